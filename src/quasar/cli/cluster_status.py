"""What ``quasar cluster status`` (and ``cluster up``'s table) shows: each member of a ``cluster.json`` with
its configured role, whether its PID lives and its ports answer, and each broker's live role and epoch.

The live role comes from the brokers themselves: ``GET /admin/v2/brokers`` on the first broker that answers
lists every broker registered in etcd with its ``role`` (``master``/``slave``) and ``epoch``. With
replication the live role differs from the configured one after a failover (an elected slave serves as
master; a returning old master follows it). When no broker answers the live column says so; nothing fails.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from rich.table import Table

from quasar.cli.cluster_layout import broker_name, pid_alive

__all__ = ["NOT_REGISTERED", "NO_ANSWER", "fetch_live_brokers", "live_roles", "member_status", "urls_table"]

NO_ANSWER = "unknown (no broker answered)"
NOT_REGISTERED = "not registered"


def _reachable(url: str | None, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection to ``url``'s host and port (``scheme://h:p`` or ``h:p``) succeeds."""
    if not url:
        return False
    parts = urlsplit(url if "://" in url else "tcp://" + url)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _broker_urls(entry: dict[str, Any]) -> list[str | None]:
    urls = [entry.get("serviceUrl"), entry.get("webServiceUrl")]
    for field in ("haAddress", "rocketmqAddress"):
        if entry.get(field):
            urls.append(entry.get(field))
    return urls


def member_status(doc: dict[str, Any]) -> dict[str, str]:
    """``{member name: "up" | "pid gone" | "not answering" | "not started"}`` for a cluster.json document:
    up = its PID is alive and every one of its listed ports accepts a TCP connection. A broker ``cluster up``
    restarted says how often (``"up (restarted 2x)"``); one it gave up on says that too."""
    status: dict[str, str] = {}
    etcd = doc.get("etcd") or {}
    entries: list[tuple[str, Any, list[str | None], dict[str, Any]]] = [
        ("etcd", etcd.get("pid"), [etcd.get("endpoint")], etcd)
    ]
    entries += [
        (str(ns.get("name")), ns.get("pid"), [ns.get("address"), ns.get("http")], ns)
        for ns in doc.get("nameservers") or []
    ]
    entries += [(broker_name(b), b.get("pid"), _broker_urls(b), b) for b in doc.get("brokers") or []]
    for name, pid, urls, entry in entries:
        if not isinstance(pid, int):
            state = "not started"
        elif not pid_alive(pid):
            state = "pid gone"
        elif not all(_reachable(url) for url in urls):
            state = "not answering"
        else:
            state = "up"
        restarts = entry.get("restarts")
        if isinstance(restarts, int) and restarts > 0:
            state += f" (restarted {restarts}x)"
        if entry.get("gaveUp"):
            state += " (cluster up gave up restarting it)"
        status[name] = state
    return status


def fetch_live_brokers(doc: dict[str, Any], timeout_s: float = 2.0) -> list[dict[str, Any]] | None:
    """The live brokers as the first answering broker of ``doc`` lists them (``GET /admin/v2/brokers``), or
    None when none answers with a JSON list."""
    for entry in doc.get("brokers") or []:
        pid, web = entry.get("pid"), entry.get("webServiceUrl")
        if not isinstance(pid, int) or not pid_alive(pid) or not isinstance(web, str):
            continue
        try:
            with urllib.request.urlopen(web.rstrip("/") + "/admin/v2/brokers", timeout=timeout_s) as response:
                listed = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            continue
        if isinstance(listed, list):
            return [b for b in listed if isinstance(b, dict)]
    return None


def live_roles(doc: dict[str, Any], live: list[dict[str, Any]] | None) -> dict[str, str]:
    """``{broker name: "master epoch=3" | "slave epoch=3" | NOT_REGISTERED | NO_ANSWER}`` for every broker of
    ``doc``; a registration is matched by its Pulsar service URL, else by group and broker id."""
    out: dict[str, str] = {}
    by_url = {str(b.get("serviceUrl")): b for b in live or []}
    by_id = {(str(b.get("brokerName")), b.get("brokerId")): b for b in live or []}
    for entry in doc.get("brokers") or []:
        name = broker_name(entry)
        if live is None:
            out[name] = NO_ANSWER
            continue
        found = by_url.get(str(entry.get("serviceUrl"))) or by_id.get(
            (str(entry.get("group")), entry.get("id"))
        )
        if found is None:
            out[name] = NOT_REGISTERED
        else:
            out[name] = f"{found.get('role') or '?'} epoch={found.get('epoch', 0)}"
    return out


def urls_table(
    doc: dict[str, Any],
    *,
    title: str,
    status: dict[str, str] | None = None,
    live: dict[str, str] | None = None,
) -> Table:
    """The members of ``doc`` as a table: name, pid, configured role, URLs, then (when given) the live role
    (brokers) and the status of each member."""
    table = Table(title=title)
    columns = ["member", "pid", "role", "urls"]
    if live is not None:
        columns.append("live role")
    if status is not None:
        columns.append("status")
    for column in columns:
        table.add_column(column, overflow="fold")
    etcd = doc.get("etcd") or {}
    rows = [("etcd", etcd.get("pid"), "metadata", f"{etcd.get('url')}  {etcd.get('endpoint')}")]
    for ns in doc.get("nameservers") or []:
        rows.append((ns.get("name"), ns.get("pid"), "name server", f"{ns.get('address')}  {ns.get('http')}"))
    for b in doc.get("brokers") or []:
        role = f"{b.get('role')} id={b.get('id')}"
        if b.get("brokerRole"):
            role += f" {b.get('brokerRole')}"
        urls = f"{b.get('serviceUrl')}  {b.get('webServiceUrl')}"
        if b.get("haAddress"):
            urls += f"  ha={b.get('haAddress')}"
        if b.get("rocketmqAddress"):
            urls += f"  rocketmq={b.get('rocketmqAddress')}"
        rows.append((broker_name(b), b.get("pid"), role, urls))
    for name, pid, role, urls in rows:
        extra: list[str] = []
        if live is not None:
            extra.append(live.get(str(name), ""))
        if status is not None:
            extra.append(status.get(str(name), "?"))
        table.add_row(str(name), str(pid), role, urls, *extra)
    return table
