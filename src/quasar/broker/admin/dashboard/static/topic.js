// A topic (#/topic/{domain}/{t}/{ns}/{topic}): figures, live charts of publish/dispatch rates (stats polled
// every second) and write latency p50/p99 (GET /metrics, pulsar_storage_write_latency_le_* buckets), the
// partitions, producers, subscriptions and consumers.
import { ApiError, get, getJson, topicHash, topicPath } from "./api.js";
import { LineChart } from "./chart.js";
import { el, formatBytes, formatInt, formatMs, formatRate, replace, section, stat, table } from "./dom.js";
import { delta, histogram, parsePrometheus, quantile, topicFilter } from "./metrics.js";
import { RateTracker, summarize } from "./stats.js";

export const LATENCY_FAMILY = "pulsar_storage_write_latency";
const METRICS_RETRY_MS = 10000;

/** The stats of a topic: {partitions, stats (TopicStats or the partitioned aggregate), perPartition}. */
export async function loadTopic(topic, signal) {
  const meta = await getJson(`${topicPath(topic)}/partitions`, { signal });
  const partitions = meta.partitions || 0;
  if (partitions > 0) {
    const stats = await getJson(`${topicPath(topic)}/partitioned-stats?perPartition=true`, { signal });
    return { partitions, stats, perPartition: stats.partitions || {} };
  }
  return { partitions: 0, stats: await getJson(`${topicPath(topic)}/stats`, { signal }), perPartition: {} };
}

export function render(view, params, query, ctx) {
  const [domain, tenant, namespace, local] = params;
  const topic = { domain, tenant, namespace, local, full: `${domain}://${tenant}/${namespace}/${local}` };
  const figures = el("div", { class: "stats" });
  const rateChart = new LineChart([{ name: "publish", cls: "s1" }, { name: "dispatch", cls: "s2" }],
    { unit: "msg/s", format: formatRate, id: "rates" });
  const latencyChart = new LineChart([{ name: "p50", cls: "s1" }, { name: "p99", cls: "s3" }],
    { unit: "", format: formatMs, id: "latency" });
  const latencyNote = el("p", { class: "note", id: "latency-note" }, "waiting for /metrics");
  const boxes = {
    partitions: el("div"), producers: el("div"), subscriptions: el("div"), consumers: el("div"),
  };
  replace(view,
    el("h1", {}, "Topic ", el("span", { id: "topic-name" }, topic.full)),
    el("p", {}, el("a", { href: topicHash(topic, "messages"), id: "browse-link" }, "Browse messages"), " · ",
      el("a", { href: `#/topics/${encodeURIComponent(tenant)}/${encodeURIComponent(namespace)}` }, "All topics of the namespace")),
    section("Figures", "figures", figures),
    el("div", { class: "charts" },
      section("Publish and dispatch rate", "rate-chart", rateChart.root),
      section("Write latency", "latency-chart", latencyChart.root, latencyNote)),
    section("Partitions", "partitions", boxes.partitions),
    section("Producers", "producers", boxes.producers),
    section("Subscriptions", "subscriptions", boxes.subscriptions),
    section("Consumers", "consumers", boxes.consumers));

  const rates = new RateTracker();
  ctx.poll(async (signal) => {
    const loaded = await loadTopic(topic, signal);
    const summary = summarize(loaded.stats);
    const { rateIn, rateOut } = rates.update(topic.full, summary);
    rateChart.push([rateIn, rateOut]);
    replace(figures,
      stat("Partitions", "partitions", formatInt(loaded.partitions)),
      stat("Producers", "producers", formatInt(summary.producers)),
      stat("Subscriptions", "subscriptions", formatInt(summary.subscriptions)),
      stat("Consumers", "consumers", formatInt(summary.consumers)),
      stat("Backlog (msgs)", "backlog", formatInt(summary.backlog)),
      stat("In (msg/s)", "rateIn", formatRate(rateIn)),
      stat("Out (msg/s)", "rateOut", formatRate(rateOut)),
      stat("Messages in", "msgInCounter", formatInt(summary.msgInCounter)),
      stat("Messages out", "msgOutCounter", formatInt(summary.msgOutCounter)),
      stat("Storage", "storageSize", formatBytes(summary.storageSize)));
    renderTables(boxes, topic, loaded);
    ctx.ok();
  }, 1000);

  let previous = null;
  ctx.poll(async (signal) => {
    let text;
    try {
      text = await (await get("/metrics", { signal, accept: "text/plain" })).text();
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      latencyChart.push([null, null]);
      replace(latencyNote, `no data: GET /metrics answered ${error.status} ${error.reason}`);
      previous = null;
      return METRICS_RETRY_MS;
    }
    const samples = parsePrometheus(text);
    const current = histogram(samples, LATENCY_FAMILY, topicFilter(samples, LATENCY_FAMILY, topic.full, `${tenant}/${namespace}`));
    if (current === null) {
      latencyChart.push([null, null]);
      replace(latencyNote, `no data: /metrics has no ${LATENCY_FAMILY}_le_* buckets`);
      return METRICS_RETRY_MS;
    }
    const window = delta(previous, current);
    const first = previous === null;
    previous = current;
    if (first) return undefined; // the first scrape only sets the baseline: a rate needs two
    const p50 = quantile(0.5, window);
    const p99 = quantile(0.99, window);
    latencyChart.push([p50, p99]);
    replace(latencyNote, p50 === null ? "no writes in the last second" : "from /metrics bucket deltas, last second");
    return undefined;
  }, 1000);
}

function subscriptionRows(stats) {
  return Object.entries(stats.subscriptions || {}).map(([name, s]) => ({ name, ...s }));
}

function renderTables(boxes, topic, loaded) {
  const partitionNames = Object.keys(loaded.perPartition).sort();
  const sources = loaded.partitions > 0 ? partitionNames.map((name) => [name, loaded.perPartition[name]]) : [["–", loaded.stats]];
  replace(boxes.partitions, loaded.partitions > 0
    ? table(
      [
        { title: "Partition", field: "name" },
        { title: "Producers", field: "producers", num: true, render: (r) => formatInt(r.summary.producers) },
        { title: "Subscriptions", field: "subscriptions", num: true, render: (r) => formatInt(r.summary.subscriptions) },
        { title: "Consumers", field: "consumers", num: true, render: (r) => formatInt(r.summary.consumers) },
        { title: "Backlog (msgs)", field: "backlog", num: true, render: (r) => formatInt(r.summary.backlog) },
        { title: "Messages in", field: "msgInCounter", num: true, render: (r) => formatInt(r.summary.msgInCounter) },
        { title: "Storage", field: "storage", num: true, render: (r) => formatBytes(r.summary.storageSize) },
      ],
      sources.map(([name, stats]) => ({ name, summary: summarize(stats) })),
      { rowKey: (r) => r.name, id: "partitions-list", empty: "no partition in use yet" })
    : el("p", { class: "note" }, "Not partitioned."));
  const producers = sources.flatMap(([name, stats]) => (stats.publishers || []).map((p) => ({ partition: name, ...p })));
  replace(boxes.producers, table(
    [
      { title: "Producer", field: "producerName" },
      { title: "Id", field: "producerId", num: true },
      { title: "Partition", field: "partition" },
      { title: "Messages in", field: "msgInCounter", num: true, render: (p) => formatInt(p.msgInCounter) },
    ],
    producers, { rowKey: (p) => `${p.partition}/${p.producerName}`, id: "producers-list", empty: "no producers" }));
  const subscriptions = subscriptionRows(loaded.stats);
  replace(boxes.subscriptions, table(
    [
      { title: "Subscription", field: "name" },
      { title: "Type", field: "type", render: (s) => s.type || "–" },
      { title: "Backlog (msgs)", field: "msgBacklog", num: true, render: (s) => formatInt(s.msgBacklog) },
      { title: "Unacked", field: "unackedMessages", num: true, render: (s) => formatInt(s.unackedMessages) },
      { title: "Consumers", field: "consumers", num: true, render: (s) => formatInt((s.consumers || []).length) },
      { title: "Durable", field: "isDurable", render: (s) => (s.isDurable === false ? "no" : "yes") },
      { title: "", field: "browse",
        render: (s) => el("a", { href: `${topicHash(topic, "messages")}?sub=${encodeURIComponent(s.name)}` }, "peek") },
    ],
    subscriptions, { rowKey: (s) => s.name, id: "subscriptions-list", empty: "no subscriptions" }));
  const consumers = sources.flatMap(([name, stats]) => subscriptionRows(stats).flatMap(
    (s) => (s.consumers || []).map((c) => ({ subscription: s.name, partition: name, ...c }))));
  replace(boxes.consumers, table(
    [
      { title: "Subscription", field: "subscription" },
      { title: "Consumer", field: "consumerName" },
      { title: "Partition", field: "partition" },
      { title: "Address", field: "address" },
      { title: "Permits", field: "availablePermits", num: true, render: (c) => formatInt(c.availablePermits) },
      { title: "Unacked", field: "unackedMessages", num: true, render: (c) => formatInt(c.unackedMessages) },
      { title: "Messages out", field: "msgOutCounter", num: true, render: (c) => formatInt(c.msgOutCounter) },
    ],
    consumers, { rowKey: (c) => `${c.partition}/${c.subscription}/${c.consumerName}`, id: "consumers-list", empty: "no consumers" }));
}
