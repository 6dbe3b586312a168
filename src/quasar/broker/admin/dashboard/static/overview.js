// Overview (#/): the cluster (GET /admin/v2/clusters, /clusters/{c}), its brokers (GET /admin/v2/brokers),
// tenants and namespaces, and totals over every topic the user may see (refreshed every 5 s).
import { getJson, mapLimited } from "./api.js";
import { el, formatBytes, formatInt, replace, section, stat, table } from "./dom.js";
import { loadNamespace, loadNamespaces } from "./topics.js";

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
    const clusters = await getJson("/admin/v2/clusters", { signal });
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
    const live = await getJson("/admin/v2/brokers", { signal });
    replace(brokers, table(
      [
        { title: "Broker", field: "brokerName" },
        { title: "Id", field: "brokerId", num: true },
        { title: "Role", field: "role" },
        { title: "Service URL", field: "serviceUrl" },
        { title: "Web service URL", field: "webServiceUrl" },
      ],
      live,
      { rowKey: (b) => `${b.brokerName}/${b.brokerId}`, id: "brokers-list" },
    ));
    const names = await loadNamespaces(signal);
    const loaded = await mapLimited(names, 3, (ns) => loadNamespace(ns, signal));
    const rows = names.map((ns, i) => ({ namespace: ns, topics: loaded[i] }));
    replace(namespaces, table(
      [
        { title: "Namespace", field: "namespace",
          render: (r) => el("a", { href: `#/topics/${r.namespace.split("/").map(encodeURIComponent).join("/")}` }, r.namespace) },
        { title: "Topics", field: "topics", num: true, render: (r) => (r.topics ? formatInt(r.topics.total) : "–") },
        { title: "Backlog (msgs)", field: "backlog", num: true,
          render: (r) => (r.topics ? formatInt(sum(r.topics, "backlog")) : "–") },
      ],
      rows,
      { rowKey: (r) => r.namespace, id: "namespaces-list" },
    ));
    const all = loaded.filter(Boolean).flat();
    replace(totals,
      stat("Brokers", "brokers", formatInt(live.length)),
      stat("Tenants", "tenants", formatInt(names.tenants.length)),
      stat("Namespaces", "namespaces", formatInt(names.length)),
      stat("Topics", "topics", formatInt(loaded.filter(Boolean).reduce((n, l) => n + l.total, 0))),
      stat("Producers", "producers", formatInt(sum(all, "producers"))),
      stat("Subscriptions", "subscriptions", formatInt(sum(all, "subscriptions"))),
      stat("Consumers", "consumers", formatInt(sum(all, "consumers"))),
      stat("Backlog (msgs)", "backlog", formatInt(sum(all, "backlog"))),
      stat("Messages in", "msgInCounter", formatInt(sum(all, "msgInCounter"))),
      stat("Messages out", "msgOutCounter", formatInt(sum(all, "msgOutCounter"))),
      stat("Storage", "storageSize", formatBytes(sum(all, "storageSize"))));
    ctx.ok();
  }, 5000);
}

function sum(rows, key) {
  return rows.reduce((n, r) => n + (r.summary[key] || 0), 0);
}
