// DOM helpers of the Quasar dashboard. Every value shown goes in as text (textContent / text nodes), never as
// markup: topic names, subscription names and message bodies are user input.

/** el("td", {class: "num", dataset: {field: "backlog"}}, "12") -> <td class="num" data-field="backlog">12</td>.
 *  Attributes named on<event> take a function (an event listener); any other value is set as a string. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) {
      if (typeof value !== "function") throw new TypeError(`${key} needs a function`);
      node.addEventListener(key.slice(2), value);
    } else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

/** Append children (nodes, strings, numbers, arrays of them; null/undefined/false skipped) as nodes/text. */
export function append(node, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace the children of node. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A table. columns: [{title, field, render(row) -> node|string, num: bool}]; rows: objects.
 *  Each <tr> gets data-key = rowKey(row); each <td> data-field = column.field, so tests and users can find a
 *  cell by what it shows. empty: the text shown when there are no rows. */
export function table(columns, rows, { rowKey = null, empty = "none", caption = null, id = null } = {}) {
  const head = el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null, scope: "col" }, c.title)));
  const body = el("tbody");
  if (rows.length === 0) {
    body.append(el("tr", { class: "empty" }, el("td", { colspan: columns.length }, empty)));
  }
  for (const row of rows) {
    const tr = el("tr", { dataset: rowKey ? { key: rowKey(row) } : {} });
    for (const c of columns) {
      const value = c.render ? c.render(row) : row[c.field];
      tr.append(el("td", { class: c.num ? "num" : null, dataset: { field: c.field } }, value ?? ""));
    }
    body.append(tr);
  }
  return el("table", { id }, caption ? el("caption", {}, caption) : null, el("thead", {}, head), body);
}

/** A titled section. */
export function section(title, id, ...children) {
  return el("section", { id, class: "card" }, el("h2", {}, title), ...children);
}

/** A figure: label + value, value element carries data-stat = key. */
export function stat(label, key, value) {
  return el("div", { class: "stat" }, el("div", { class: "stat-label" }, label),
    el("div", { class: "stat-value", dataset: { stat: key } }, value));
}

export function formatInt(n) {
  return n === null || n === undefined || Number.isNaN(n) ? "–" : String(Math.round(n));
}

export function formatRate(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function formatBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

export function formatMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "no data";
  if (!Number.isFinite(ms)) return "> max bucket";
  return ms >= 100 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(2)} ms`;
}

/** An epoch-ms timestamp as ISO-8601 UTC. */
export function formatTime(ms) {
  if (!ms) return "";
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? String(ms) : date.toISOString();
}
