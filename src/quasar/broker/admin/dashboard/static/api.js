// Admin REST calls of the dashboard. The token (JWT) the user pastes is kept in sessionStorage (gone when the
// tab closes) and sent as "Authorization: Bearer" on every API call; the static files need none.

const TOKEN_KEY = "quasar.dashboard.token";

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  const value = (token || "").trim();
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** A non-2xx answer: status and the server's {"reason": ...} (Pulsar's admin error shape). */
export class ApiError extends Error {
  constructor(status, reason, path) {
    super(`${status} ${reason} (${path})`);
    this.status = status;
    this.reason = reason;
    this.path = path;
  }
}

/** GET path; resolves to the Response when 2xx, rejects with ApiError otherwise. signal: an AbortSignal. */
export async function get(path, { signal, accept = "application/json" } = {}) {
  const headers = { Accept: accept };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { headers, signal, cache: "no-store", credentials: "omit" });
  if (!response.ok) {
    let reason = response.statusText || "error";
    try {
      const body = await response.json();
      if (body && typeof body.reason === "string") reason = body.reason;
    } catch {
      // not JSON: keep the status text
    }
    throw new ApiError(response.status, reason, path);
  }
  return response;
}

export async function getJson(path, options) {
  return (await get(path, options)).json();
}

/** Map over items with at most `limit` calls in flight; results in input order (a rejected call -> null). */
export async function mapLimited(items, limit, fn) {
  const results = new Array(items.length).fill(null);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const index = next++;
      try {
        results[index] = await fn(items[index], index);
      } catch (error) {
        if (error && error.name === "AbortError") throw error;
        results[index] = null;
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

const enc = encodeURIComponent;

/** "persistent://t/ns/local" -> {domain, tenant, namespace, local, full}; null for another shape. */
export function parseTopic(full) {
  const match = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(full);
  if (!match) return null;
  return { domain: match[1], tenant: match[2], namespace: match[3], local: match[4], full };
}

/** The admin path of a topic: /admin/v2/{domain}/{tenant}/{namespace}/{local}. */
export function topicPath(topic) {
  return `/admin/v2/${topic.domain}/${enc(topic.tenant)}/${enc(topic.namespace)}/${enc(topic.local)}`;
}

export function namespacePath(domain, namespace) {
  const [tenant, ns] = namespace.split("/");
  return `/admin/v2/${domain}/${enc(tenant)}/${enc(ns)}`;
}

/** The dashboard route (hash) of a topic page or its message browser. */
export function topicHash(topic, page = "topic") {
  return `#/${page}/${topic.domain}/${enc(topic.tenant)}/${enc(topic.namespace)}/${enc(topic.local)}`;
}

const PARTITION = /^(.*)-partition-(\d+)$/;

/** The partitioned topic a partition's full name belongs to, or null. */
export function partitionParent(full) {
  const match = PARTITION.exec(full);
  return match ? { parent: match[1], index: Number(match[2]) } : null;
}
