// The Quasar dashboard: a single-page app with hash routes over the admin REST API.
//   #/                                   overview: cluster, brokers, tenants/namespaces, totals
//   #/topics/{tenant}/{namespace}        topics of a namespace with rates and backlog
//   #/topic/{domain}/{t}/{ns}/{topic}    partitions, producers, subscriptions, consumers, live charts
//   #/messages/{domain}/{t}/{ns}/{topic}[?sub=NAME]   message browser: peek a subscription, query by key
import { ApiError, getToken, setToken } from "./api.js";
import { replace } from "./dom.js";
import { render as messages } from "./messages.js";
import { render as overview } from "./overview.js";
import { PageContext } from "./poll.js";
import { render as topic } from "./topic.js";
import { render as topics } from "./topics.js";

const ROUTES = [
  { pattern: /^$/, page: overview, nav: "overview" },
  { pattern: /^topics(?:\/([^/]+)\/([^/]+))?$/, page: topics, nav: "topics" },
  { pattern: /^topic\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/([^/]+)$/, page: topic, nav: "topics" },
  { pattern: /^messages\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/([^/]+)$/, page: messages, nav: "messages" },
];

let current = null;

function decode(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return null;
  }
}

function report(error) {
  const status = document.getElementById("status");
  if (error === null) {
    status.dataset.state = "ok";
    replace(status, `updated ${new Date().toLocaleTimeString()}`);
    return;
  }
  status.dataset.state = "error";
  if (error instanceof ApiError && error.status === 401) {
    replace(status, `${error.reason} (401): paste a valid token above`);
  } else if (error instanceof ApiError && error.status === 403) {
    replace(status, `Not authorized: ${error.reason}`);
  } else if (error instanceof ApiError) {
    replace(status, `Error ${error.status}: ${error.reason} (${error.path})`);
  } else {
    replace(status, `Error: ${error && error.message ? error.message : error}`);
  }
}

function route() {
  if (current) current.dispose();
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = hash.split("?", 2);
  const view = document.getElementById("view");
  for (const { pattern, page, nav } of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    const params = match.slice(1).map((p) => (p === undefined ? undefined : decode(p)));
    if (params.includes(null)) break;
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.nav === nav);
    }
    current = new PageContext(report);
    document.body.dataset.page = nav;
    try {
      page(view, params, new URLSearchParams(query), current);
    } catch (error) {
      current.error(error);
    }
    return;
  }
  current = null;
  replace(view, "Unknown page: ", hash);
}

function showTokenState() {
  const state = document.getElementById("token-state");
  state.textContent = getToken() ? "token set" : "no token";
}

function setUp() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value);
    input.value = "";
    showTokenState();
    route();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    setToken("");
    showTokenState();
    route();
  });
  showTokenState();
  window.addEventListener("hashchange", route);
  route();
}

setUp();
