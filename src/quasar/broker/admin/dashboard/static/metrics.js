// Prometheus text exposition parsing and latency quantiles from Pulsar's `<family>_le_*` buckets, e.g.
// pulsar_storage_write_latency_le_0_5, _le_1, _le_5, ..., _le_1000, _le_overflow (bounds in ms), _count, _sum.
// Pulsar's buckets count the values that fell in each range (not cumulative, unlike Prometheus' `le` label);
// a cumulative exposition (last bucket == _count) is recognized and turned into per-range counts.

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/g;

function unescapeLabel(value) {
  return value.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
}

function parseValue(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

/** Prometheus text -> [{name, labels: {k: v}, value}] (comments, blank and malformed lines skipped). */
export function parsePrometheus(text) {
  const samples = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels = {};
    if (match[2]) {
      for (const label of match[2].matchAll(LABEL)) labels[label[1]] = unescapeLabel(label[2]);
    }
    const value = parseValue(match[3]);
    if (!Number.isNaN(value)) samples.push({ name: match[1], labels, value });
  }
  return samples;
}

/** "0_5" -> 0.5, "1000" -> 1000, "overflow" / "inf" -> Infinity; null for anything else. */
export function bucketBound(suffix) {
  if (suffix === "overflow" || suffix === "inf" || suffix === "Inf") return Infinity;
  if (!/^\d+(?:_\d+)?$/.test(suffix)) return null;
  return Number(suffix.replace("_", "."));
}

/** The histogram `family` summed over the samples whose labels pass `accept`:
 *  {buckets: [{le, count}] sorted by le, count, sum} (count/sum null when not exposed); null when no bucket of
 *  the family is present. */
export function histogram(samples, family, accept = () => true) {
  const prefix = `${family}_le_`;
  const byBound = new Map();
  let count = null;
  let sum = null;
  for (const sample of samples) {
    if (!accept(sample.labels)) continue;
    if (sample.name.startsWith(prefix)) {
      const le = bucketBound(sample.name.slice(prefix.length));
      if (le === null) continue;
      byBound.set(le, (byBound.get(le) || 0) + sample.value);
    } else if (sample.name === `${family}_count`) {
      count = (count || 0) + sample.value;
    } else if (sample.name === `${family}_sum`) {
      sum = (sum || 0) + sample.value;
    }
  }
  if (byBound.size === 0) return null;
  const buckets = [...byBound.entries()].map(([le, n]) => ({ le, count: n })).sort((a, b) => a.le - b.le);
  return { buckets, count, sum };
}

/** cur - prev bucket by bucket (the observations between two scrapes); cur itself when there is no prev or
 *  a counter went backwards (a restart reset it). */
export function delta(prev, cur) {
  if (!cur) return null;
  if (!prev || prev.buckets.length !== cur.buckets.length) return cur;
  const buckets = cur.buckets.map((b, i) => ({ le: b.le, count: b.count - prev.buckets[i].count }));
  if (buckets.some((b) => b.count < 0)) return cur;
  const count = cur.count !== null && prev.count !== null ? cur.count - prev.count : null;
  const sum = cur.sum !== null && prev.sum !== null ? cur.sum - prev.sum : null;
  return { buckets, count, sum };
}

/** Per-range counts of a histogram (undoing a cumulative exposition, see the top of the file). */
export function perRange(hist) {
  const counts = hist.buckets.map((b) => b.count);
  const total = counts.reduce((a, b) => a + b, 0);
  const last = counts[counts.length - 1];
  const monotone = counts.every((c, i) => i === 0 || c >= counts[i - 1]);
  const cumulative = hist.count !== null && hist.count > 0 && total !== hist.count && monotone && last === hist.count;
  if (!cumulative) return counts;
  return counts.map((c, i) => (i === 0 ? c : c - counts[i - 1]));
}

/** The q-quantile (0 < q <= 1) in the histogram's unit, interpolated linearly inside its bucket (as
 *  Prometheus' histogram_quantile); the largest finite bound when it falls in the overflow bucket; null when
 *  the histogram holds no observation. */
export function quantile(q, hist) {
  if (!hist) return null;
  const counts = perRange(hist);
  const total = counts.reduce((a, b) => a + b, 0);
  if (!(total > 0)) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const upper = hist.buckets[i].le;
    const lower = i === 0 ? 0 : hist.buckets[i - 1].le;
    if (below + counts[i] >= rank && counts[i] > 0) {
      if (!Number.isFinite(upper)) return lower;
      return lower + ((upper - lower) * (rank - below)) / counts[i];
    }
    below += counts[i];
  }
  const finite = hist.buckets.filter((b) => Number.isFinite(b.le));
  return finite.length ? finite[finite.length - 1].le : null;
}

/** A label filter for one topic: series labelled with the topic (or one of its partitions) when the scrape
 *  has per-topic series, else the topic's namespace (Pulsar without exposeTopicLevelMetricsInPrometheus),
 *  else everything (a broker-wide family). */
export function topicFilter(samples, family, topicFull, namespace) {
  const own = samples.filter((s) => s.name.startsWith(`${family}_`));
  const isTopic = (l) => l.topic === topicFull || (l.topic || "").startsWith(`${topicFull}-partition-`);
  if (own.some((s) => s.labels.topic !== undefined)) return isTopic;
  if (own.some((s) => s.labels.namespace !== undefined)) return (l) => l.namespace === namespace;
  return () => true;
}
