"""``quasar admin``: operator commands over a broker's admin REST API (the subset replication needs; the
operations issue grows it into ``pulsar-admin``'s commands).

- ``quasar admin broker-group status G``: every live broker of group G with its role and epoch, and the
  master's replication status (sync-state set, each slave's acked commit-log offset and whether it is in sync).
- ``quasar admin broker-group failover G``: manual switch (RocketMQ 5's ``electMaster``): the master of G
  resigns and an in-sync slave is elected; refused (exit 1) when no slave is in sync.

``--admin-url`` is any broker of the cluster (``GET /admin/v2/brokers`` finds the group's master). On a broker
with authentication on, ``quasar admin --auth-token JWT`` (or the ``QUASAR_AUTH_TOKEN`` environment variable)
sends ``Authorization: Bearer JWT``; these commands need a super user's token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click

__all__ = ["admin"]

TIMEOUT_S = 10.0


def _request(method: str, url: str) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body or None), with the group's ``--auth-token`` as a Bearer token; raises
    click.ClickException when nothing answers."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    context = click.get_current_context(silent=True)
    token = context.find_root().meta.get(_TOKEN_META) if context is not None else None
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body) if body else None
        except ValueError:
            return exc.code, {"reason": body.decode(errors="replace")}
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"{url}: {exc}") from None


def _group_brokers(admin_url: str, group: str) -> list[dict[str, Any]]:
    status, brokers = _request("GET", admin_url.rstrip("/") + "/admin/v2/brokers")
    if status != 200 or not isinstance(brokers, list):
        raise click.ClickException(f"GET /admin/v2/brokers answered {status}: {brokers}")
    members = [b for b in brokers if b.get("brokerName") == group]
    if not members:
        raise click.ClickException(f"no live broker of group {group!r} (live groups: "
                                   f"{sorted({b.get('brokerName') for b in brokers})})")  # fmt: skip
    return members


def _master(members: list[dict[str, Any]], group: str) -> dict[str, Any]:
    masters = [b for b in members if b.get("role") == "master"]
    if not masters:
        raise click.ClickException(
            f"broker group {group!r} has no live master now (a failover may be running)"
        )
    return max(masters, key=lambda b: int(b.get("epoch", 0)))


_TOKEN_META = "quasar.admin.auth_token"


@click.group()
@click.option(
    "--auth-token",
    envvar="QUASAR_AUTH_TOKEN",
    default=None,
    help="JWT sent as 'Authorization: Bearer' to a broker with authentication on [env QUASAR_AUTH_TOKEN].",
)
@click.pass_context
def admin(ctx: click.Context, auth_token: str | None) -> None:
    """Operator commands over the admin REST API."""
    ctx.find_root().meta[_TOKEN_META] = auth_token


@admin.group("broker-group")
def broker_group() -> None:
    """Replicated broker groups (master/slave)."""


_ADMIN_URL = click.option(
    "--admin-url",
    default="http://127.0.0.1:8080",
    show_default=True,
    help="Admin URL of any broker of the cluster.",
)


@broker_group.command("status")
@click.argument("group")
@_ADMIN_URL
def status(group: str, admin_url: str) -> None:
    """Roles, epochs and replication of GROUP's live brokers (JSON)."""
    members = _group_brokers(admin_url, group)
    doc: dict[str, Any] = {
        "group": group,
        "brokers": [
            {k: b.get(k) for k in ("brokerId", "role", "epoch", "serviceUrl", "webServiceUrl", "haAddress")}
            for b in sorted(members, key=lambda b: int(b.get("brokerId", 0)))
        ],
    }
    masters = [b for b in members if b.get("role") == "master"]
    if masters:
        code, replication = _request(
            "GET", _master(members, group)["webServiceUrl"] + "/admin/v2/replication"
        )
        doc["replication"] = replication if code == 200 else {"error": code, "body": replication}
    click.echo(json.dumps(doc, indent=2))


@broker_group.command("failover")
@click.argument("group")
@_ADMIN_URL
def failover(group: str, admin_url: str) -> None:
    """Make GROUP's master resign so an in-sync slave is elected (RocketMQ electMaster)."""
    master = _master(_group_brokers(admin_url, group), group)
    code, body = _request("POST", master["webServiceUrl"] + "/admin/v2/replication/failover")
    if code != 204:
        reason = body.get("reason") if isinstance(body, dict) else body
        raise click.ClickException(f"failover of {group!r} refused ({code}): {reason}")
    click.echo(f"broker group {group}: master {master['brokerId']} resigned; an in-sync slave takes over")
