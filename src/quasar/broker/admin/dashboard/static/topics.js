// Topics of a namespace with rates and backlog (#/topics/{tenant}/{namespace}), and the namespace loading the
// overview shares: GET /admin/v2/{domain}/{t}/{ns} (topics, partitions included), .../partitioned, then each
// topic's /stats or, for a partitioned topic, its /partitioned-stats aggregate.
import { getJson, mapLimited, namespacePath, parseTopic, partitionParent, topicHash, topicPath } from "./api.js";
import { el, formatBytes, formatInt, formatRate, replace, section, table } from "./dom.js";
import { RateTracker, summarize } from "./stats.js";

export const MAX_TOPICS = 200;
const DOMAINS = ["persistent", "non-persistent"];

/** [{topic (parseTopic), partitions, stats, summary}] of a namespace ("tenant/ns"), partitioned topics as one
 *  row (their partitions folded in), sorted by name; at most MAX_TOPICS rows get stats (truncated: true). */
export async function loadNamespace(namespace, signal) {
  const names = [];
  const partitioned = new Set();
  for (const domain of DOMAINS) {
    const path = namespacePath(domain, namespace);
    const [all, parents] = await Promise.all([
      getJson(path, { signal }),
      getJson(`${path}/partitioned`, { signal }).catch(() => []),
    ]);
    for (const parent of parents) partitioned.add(parent);
    for (const name of [...parents, ...all]) {
      const partition = partitionParent(name);
      if (partition && partitioned.has(partition.parent)) continue;
      if (!names.includes(name)) names.push(name);
    }
  }
  names.sort();
  const shown = names.slice(0, MAX_TOPICS);
  const rows = await mapLimited(shown, 6, async (name) => {
    const topic = parseTopic(name);
    if (topic === null) return null;
    if (partitioned.has(name)) {
      const stats = await getJson(`${topicPath(topic)}/partitioned-stats?perPartition=false`, { signal });
      return { topic, partitions: stats.metadata ? stats.metadata.partitions : null, stats, summary: summarize(stats) };
    }
    const stats = await getJson(`${topicPath(topic)}/stats`, { signal });
    return { topic, partitions: 0, stats, summary: summarize(stats) };
  });
  const loaded = rows.filter((r) => r !== null);
  loaded.truncated = names.length > shown.length;
  loaded.total = names.length;
  return loaded;
}

/** Every namespace ("tenant/ns") the user may list, in order; .tenants: the tenants listed. */
export async function loadNamespaces(signal) {
  const tenants = await getJson("/admin/v2/tenants", { signal });
  const lists = await mapLimited(tenants, 4, (t) => getJson(`/admin/v2/namespaces/${encodeURIComponent(t)}`, { signal }));
  const namespaces = lists.filter((l) => Array.isArray(l)).flat().sort();
  namespaces.tenants = tenants;
  return namespaces;
}

export function topicLink(topic) {
  return el("a", { href: topicHash(topic) }, topic.full);
}

export function render(view, params, query, ctx) {
  const [tenant, namespace] = params;
  const selector = el("select", { id: "namespace-select", "aria-label": "namespace" });
  const tableBox = el("div", { id: "topics-table" });
  const note = el("p", { class: "note" });
  replace(view, el("h1", {}, "Topics"),
    section("Namespace", "namespace", el("label", {}, "Namespace ", selector)),
    section("Topics", "topics", tableBox, note));
  selector.addEventListener("change", () => {
    window.location.hash = `#/topics/${selector.value.split("/").map(encodeURIComponent).join("/")}`;
  });
  const chosen = tenant ? `${tenant}/${namespace}` : null;
  const rates = new RateTracker();

  const pollChosen = () => ctx.poll(async (signal) => {
    const rows = await loadNamespace(chosen, signal);
    const now = performance.now();
    for (const row of rows) Object.assign(row, rates.update(row.topic.full, row.summary, now));
    replace(tableBox, topicsTable(rows));
    replace(note, rows.truncated ? `Showing ${rows.length} of ${rows.total} topics.` : `${rows.length} topics.`);
    ctx.ok();
  }, 2000);
  if (chosen !== null) {
    selector.append(el("option", { value: chosen, selected: true }, chosen));
    pollChosen(); // a role that may not list tenants (super user only) still sees a namespace it names
  }
  loadNamespaces(ctx.signal).then((namespaces) => {
    replace(selector, namespaces.map((ns) => el("option", { value: ns, selected: ns === chosen }, ns)));
    if (chosen !== null) {
      if (!namespaces.includes(chosen)) selector.append(el("option", { value: chosen, selected: true }, chosen));
      return;
    }
    if (namespaces.length === 0) {
      replace(tableBox, "No namespace.");
      return;
    }
    const first = namespaces.includes("public/default") ? "public/default" : namespaces[0];
    window.location.replace(`#/topics/${first.split("/").map(encodeURIComponent).join("/")}`);
  }, (error) => {
    if (chosen === null) ctx.error(error);
  });
}

function topicsTable(rows) {
  return table(
    [
      { title: "Topic", field: "topic", render: (r) => topicLink(r.topic) },
      { title: "Partitions", field: "partitions", num: true, render: (r) => formatInt(r.partitions) },
      { title: "Producers", field: "producers", num: true, render: (r) => formatInt(r.summary.producers) },
      { title: "Subscriptions", field: "subscriptions", num: true, render: (r) => formatInt(r.summary.subscriptions) },
      { title: "Consumers", field: "consumers", num: true, render: (r) => formatInt(r.summary.consumers) },
      { title: "In (msg/s)", field: "rateIn", num: true, render: (r) => formatRate(r.rateIn) },
      { title: "Out (msg/s)", field: "rateOut", num: true, render: (r) => formatRate(r.rateOut) },
      { title: "Backlog (msgs)", field: "backlog", num: true, render: (r) => formatInt(r.summary.backlog) },
      { title: "Storage", field: "storage", num: true, render: (r) => formatBytes(r.summary.storageSize) },
    ],
    rows,
    { rowKey: (r) => r.topic.full, empty: "No topics in this namespace.", id: "topics-list" },
  );
}
