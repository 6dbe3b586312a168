"""``quasar admin broker-group``: replicated broker groups (master/slave).

- ``quasar admin broker-group status G``: every live broker of group G with its role and epoch, and the
  master's replication status (sync-state set, each slave's acked commit-log offset and whether it is in sync).
- ``quasar admin broker-group failover G``: manual switch (RocketMQ 5's ``electMaster``): the master of G
  resigns and an in-sync slave is elected; refused (exit 1) when no slave is in sync.

``--admin-url`` (here or on ``quasar admin``) is any broker of the cluster (``GET /admin/v2/brokers`` finds the
group's master). On a broker with authentication on these commands need a super user's ``--auth-token``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from quasar.cli.admin.context import admin_client
from quasar.cli.admin.http import AdminApiError

__all__ = ["broker_group"]


def _group_brokers(admin_url: str | None, group: str) -> list[dict[str, Any]]:
    brokers = admin_client(admin_url).get_json("/admin/v2/brokers")
    if not isinstance(brokers, list):
        raise click.ClickException(f"GET /admin/v2/brokers answered {brokers!r:.200}")
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


@click.group("broker-group")
def broker_group() -> None:
    """Replicated broker groups (master/slave)."""


_ADMIN_URL = click.option(
    "--admin-url",
    default=None,
    help="Admin URL of any broker of the cluster [default: quasar admin's --admin-url].",
)


@broker_group.command("status")
@click.argument("group")
@_ADMIN_URL
def status(group: str, admin_url: str | None) -> None:
    """Roles, epochs and replication of GROUP's live brokers (JSON)."""
    members = _group_brokers(admin_url, group)
    doc: dict[str, Any] = {
        "group": group,
        "brokers": [
            {k: b.get(k) for k in ("brokerId", "role", "epoch", "serviceUrl", "webServiceUrl", "haAddress")}
            for b in sorted(members, key=lambda b: int(b.get("brokerId", 0)))
        ],
    }
    if any(b.get("role") == "master" for b in members):
        master_url = _master(members, group)["webServiceUrl"]
        try:
            doc["replication"] = admin_client(admin_url).get_json(master_url + "/admin/v2/replication")
        except AdminApiError as exc:
            doc["replication"] = {"error": exc.status, "body": {"reason": exc.reason}}
    click.echo(json.dumps(doc, indent=2))


@broker_group.command("failover")
@click.argument("group")
@_ADMIN_URL
def failover(group: str, admin_url: str | None) -> None:
    """Make GROUP's master resign so an in-sync slave is elected (RocketMQ electMaster)."""
    master = _master(_group_brokers(admin_url, group), group)
    try:
        admin_client(admin_url).request("POST", master["webServiceUrl"] + "/admin/v2/replication/failover")
    except AdminApiError as exc:
        raise click.ClickException(f"failover of {group!r} refused ({exc.status}): {exc.reason}") from None
    click.echo(f"broker group {group}: master {master['brokerId']} resigned; an in-sync slave takes over")
