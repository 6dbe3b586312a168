// Message browser (#/messages/{domain}/{t}/{ns}/{topic}[?sub=NAME]): peek the first N unacknowledged messages
// of a subscription (GET .../subscription/{sub}/position/{n}, 1-based, answered with the payload and
// X-Pulsar-* headers as Pulsar's peek-messages), and query by key (GET .../{topic}/messages?key=K, Quasar's
// RocketMQ-style index). A partitioned topic is peeked partition by partition, as Pulsar requires.
import { ApiError, get, getJson, topicHash, topicPath } from "./api.js";
import { el, formatTime, replace, section, table } from "./dom.js";
import { loadTopic } from "./topic.js";

export const MAX_PEEK = 50;
const SHOWN_CHARS = 2048;

/** A payload for display: UTF-8 text when it decodes, else "(N bytes, base64) ..."; cut at SHOWN_CHARS. */
export function payloadText(bytes) {
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    let binary = "";
    for (const b of bytes.slice(0, SHOWN_CHARS)) binary += String.fromCharCode(b);
    text = `(${bytes.length} bytes, base64) ${btoa(binary)}`;
  }
  return text.length > SHOWN_CHARS ? `${text.slice(0, SHOWN_CHARS)}… (${bytes.length} bytes)` : text;
}

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function propertiesText(properties) {
  return Object.entries(properties).map(([k, v]) => `${k}=${v}`).join(", ");
}

/** The n-th (1-based) unacknowledged message of `sub` on `target` (a topic or one partition), or null when
 *  there are fewer. */
export async function peekOne(target, sub, n, signal) {
  const path = `${topicPath(target)}/subscription/${encodeURIComponent(sub)}/position/${n}`;
  let response;
  try {
    response = await get(path, { signal, accept: "application/octet-stream" });
  } catch (error) {
    if (error instanceof ApiError && error.status === 404 && error.reason === "Message not found") return null;
    throw error;
  }
  const headers = response.headers;
  const properties = {};
  for (const [name, value] of headers.entries()) {
    const match = /^x-pulsar-property-(.+)$/i.exec(name);
    if (match) properties[match[1]] = value;
  }
  return {
    position: n,
    messageId: headers.get("X-Pulsar-Message-ID") || "",
    publishTime: headers.get("X-Pulsar-publish-time") || "",
    producer: headers.get("X-Pulsar-producer-name") || "",
    key: headers.get("X-Pulsar-partition-key") || "",
    batch: headers.get("X-Pulsar-num-batch-message"),
    properties,
    payload: payloadText(new Uint8Array(await response.arrayBuffer())),
  };
}

export function render(view, params, query, ctx) {
  const [domain, tenant, namespace, local] = params;
  const topic = { domain, tenant, namespace, local, full: `${domain}://${tenant}/${namespace}/${local}` };
  const subSelect = el("select", { id: "peek-subscription", "aria-label": "subscription" });
  const partitionSelect = el("select", { id: "peek-partition", "aria-label": "partition" });
  const partitionLabel = el("label", { hidden: true }, "Partition ", partitionSelect);
  const count = el("input", { id: "peek-count", type: "number", min: 1, max: MAX_PEEK, value: 5 });
  const peekButton = el("button", { id: "peek-button", type: "submit" }, "Peek");
  const peekResults = el("div", { id: "peek-results" });
  const keyInput = el("input", { id: "query-key", type: "text", placeholder: "message key", required: true });
  const queryButton = el("button", { id: "query-button", type: "submit" }, "Query");
  const queryResults = el("div", { id: "query-results" });
  const peekForm = el("form", { class: "controls" }, el("label", {}, "Subscription ", subSelect), partitionLabel,
    el("label", {}, "Messages ", count), peekButton);
  const queryForm = el("form", { class: "controls" }, el("label", {}, "Key ", keyInput), queryButton);
  replace(view,
    el("h1", {}, "Messages of ", el("a", { href: topicHash(topic) }, topic.full)),
    section("Peek a subscription", "peek", peekForm, peekResults),
    section("Query by key", "query", queryForm, queryResults));

  const wanted = query.get("sub");
  loadTopic(topic, ctx.signal).then((loaded) => {
    const names = Object.keys(loaded.stats.subscriptions || {}).sort();
    if (wanted && !names.includes(wanted)) names.unshift(wanted);
    replace(subSelect, names.map((name) => el("option", { value: name, selected: name === wanted }, name)));
    if (names.length === 0) replace(peekResults, "This topic has no subscription.");
    if (loaded.partitions > 0) {
      partitionLabel.hidden = false;
      replace(partitionSelect, Array.from({ length: loaded.partitions },
        (_, i) => el("option", { value: i }, `${topic.full}-partition-${i}`)));
    }
    peekForm.dataset.ready = "true";
    ctx.ok();
  }, (error) => ctx.error(error));

  peekForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const sub = subSelect.value;
    if (!sub) return;
    const target = partitionLabel.hidden ? topic
      : { ...topic, local: `${topic.local}-partition-${partitionSelect.value}` };
    const n = Math.max(1, Math.min(MAX_PEEK, Number(count.value) || 1));
    peekButton.disabled = true;
    replace(peekResults, "peeking…");
    peekResults.dataset.state = "loading";
    peekAll(target, sub, n, ctx.signal).then((found) => {
      replace(peekResults, table(
        [
          { title: "#", field: "position", num: true },
          { title: "Message ID", field: "messageId" },
          { title: "Published", field: "publishTime" },
          { title: "Producer", field: "producer" },
          { title: "Key", field: "key" },
          { title: "Properties", field: "properties", render: (m) => propertiesText(m.properties) },
          { title: "Payload", field: "payload", render: (m) => el("pre", {}, m.batch ? `(batch of ${m.batch}) ${m.payload}` : m.payload) },
        ],
        found, { rowKey: (m) => String(m.position), empty: "no unacknowledged message", id: "peek-list" }));
      peekResults.dataset.state = "done";
      ctx.ok();
    }, (error) => {
      replace(peekResults, `Peek failed: ${error.message}`);
      peekResults.dataset.state = "error";
    }).finally(() => {
      peekButton.disabled = false;
    });
  });

  queryForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = keyInput.value;
    if (!key) return;
    queryButton.disabled = true;
    replace(queryResults, "querying…");
    queryResults.dataset.state = "loading";
    getJson(`${topicPath(topic)}/messages?key=${encodeURIComponent(key)}`, { signal: ctx.signal }).then((found) => {
      replace(queryResults, table(
        [
          { title: "Message ID", field: "messageId" },
          { title: "Partition", field: "partition", num: true },
          { title: "Key", field: "key" },
          { title: "Published", field: "publishTime", render: (m) => formatTime(m.publishTime) },
          { title: "Properties", field: "properties", render: (m) => propertiesText(m.properties || {}) },
          { title: "Payload", field: "payload", render: (m) => el("pre", {}, payloadText(base64Bytes(m.payload))) },
        ],
        found, { rowKey: (m) => `${m.partition}/${m.messageId}`, empty: "no message with this key", id: "query-list" }));
      queryResults.dataset.state = "done";
      ctx.ok();
    }, (error) => {
      replace(queryResults, `Query failed: ${error.message}`);
      queryResults.dataset.state = "error";
    }).finally(() => {
      queryButton.disabled = false;
    });
  });
}

async function peekAll(target, sub, n, signal) {
  const found = [];
  for (let i = 1; i <= n; i++) {
    const message = await peekOne(target, sub, i, signal);
    if (message === null) break;
    found.push(message);
  }
  return found;
}
