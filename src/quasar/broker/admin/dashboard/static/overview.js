// Overview (#/): the cluster (GET /admin/v2/clusters, /clusters/{c}), its brokers (GET /admin/v2/brokers),
// tenants and namespaces, and totals over every topic the user may see (refreshed every 5 s). Each section
// is loaded on its own: a role that may not read one (403: the broker list and tenants need a super user)
// still sees the others, and the section says why it is empty.
import { ApiError, getJson, mapLimited } from "./api.js";
import { el, formatBytes, formatInt, replace, section, stat, table } from "./dom.js";
import { loadNamespace, loadNamespaces } from "./topics.js";

/** Run load(); on an API error show it in box and return null (other errors propagate). */
async function attempt(box, load) {
  try {
    return await load();
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    replace(box, el("p", { class: "note denied" }, `${error.status}: ${error.reason}`));
    return null;
  }
}

export function render(view, params, query, ctx) {
  const totals = el("div", { class: "stats" });
  const cluster = el("div");
  const brokers = el("div");
  const namespaces = el("div");
  replace(view, el("h1", {}, "Overview"),
    section("Totals", "totals", totals),
    section("Cluster", "cluster", cluster),
    section("Brokers", "brokers", brokers),
    section("Tenants and namespaces", "namespaces", namespaces));

  ctx.poll(async (signal) => {
    const clusters = await getJson("/admin/v2/clusters", { signal }); // any authenticated role: a 401 stops here
    const data = await mapLimited(clusters, 4, (c) => getJson(`/admin/v2/clusters/${encodeURIComponent(c)}`, { signal }));
    replace(cluster, table(
      [
        { title: "Cluster", field: "name" },
        { title: "Web service URL", field: "serviceUrl" },
        { title: "Broker service URL", field: "brokerServiceUrl" },
      ],
      clusters.map((name, i) => ({ name, ...(data[i] || {}) })),
      { rowKey: (r) => r.name, id: "clusters" },
    ));
    const live = await attempt(brokers, async () => {
      const found = await getJson("/admin/v2/brokers", { signal });
      replace(brokers, table(
        [
          { title: "Broker", field: "brokerName" },
          { title: "Id", field: "brokerId", num: true },
          { title: "Role", field: "role" },
          { title: "Service URL", field: "serviceUrl" },
          { title: "Web service URL", field: "webServiceUrl" },
        ],
        found,
        { rowKey: (b) => `${b.brokerName}/${b.brokerId}`, id: "brokers-list" },
      ));
      return found;
    });
    const names = await attempt(namespaces, () => loadNamespaces(signal));
    const loaded = names ? await mapLimited(names, 3, (ns) => loadNamespace(ns, signal)) : [];
    if (names) {
      replace(namespaces, table(
        [
          { title: "Namespace", field: "namespace",
            render: (r) => el("a", { href: `#/topics/${r.namespace.split("/").map(encodeURIComponent).join("/")}` }, r.namespace) },
          { title: "Topics", field: "topics", num: true, render: (r) => (r.topics ? formatInt(r.topics.total) : "–") },
          { title: "Backlog (msgs)", field: "backlog", num: true,
            render: (r) => (r.topics ? formatInt(sum(r.topics, "backlog")) : "–") },
        ],
        names.map((ns, i) => ({ namespace: ns, topics: loaded[i] })),
        { rowKey: (r) => r.namespace, id: "namespaces-list" },
      ));
    }
    const all = loaded.filter(Boolean).flat();
    const known = names !== null;
    replace(totals,
      stat("Brokers", "brokers", formatInt(live ? live.length : null)),
      stat("Tenants", "tenants", formatInt(known ? names.tenants.length : null)),
      stat("Namespaces", "namespaces", formatInt(known ? names.length : null)),
      stat("Topics", "topics", formatInt(known ? loaded.filter(Boolean).reduce((n, l) => n + l.total, 0) : null)),
      stat("Producers", "producers", formatInt(known ? sum(all, "producers") : null)),
      stat("Subscriptions", "subscriptions", formatInt(known ? sum(all, "subscriptions") : null)),
      stat("Consumers", "consumers", formatInt(known ? sum(all, "consumers") : null)),
      stat("Backlog (msgs)", "backlog", formatInt(known ? sum(all, "backlog") : null)),
      stat("Messages in", "msgInCounter", formatInt(known ? sum(all, "msgInCounter") : null)),
      stat("Messages out", "msgOutCounter", formatInt(known ? sum(all, "msgOutCounter") : null)),
      stat("Storage", "storageSize", formatBytes(known ? sum(all, "storageSize") : null)));
    ctx.ok();
  }, 5000);
}

function sum(rows, key) {
  return rows.reduce((n, r) => n + (r.summary[key] || 0), 0);
}
