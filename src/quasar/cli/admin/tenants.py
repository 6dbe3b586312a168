"""``quasar admin tenants`` and ``clusters`` / ``brokers`` (``pulsar-admin`` command names and options).

- ``tenants list``; ``tenants get T``; ``tenants create T [-r roles] [-c clusters]`` (allowed clusters default
  to every cluster, as ``pulsar-admin``); ``tenants update T [-r roles] [-c clusters]`` (an option left out
  keeps the tenant's current value); ``tenants delete T [-f]``.
- ``clusters list``; ``clusters get C``; ``brokers list [C]`` (with the cluster name: Pulsar's
  ``host:port`` list; without it a table of every live broker with its group, role and URLs).
"""

from __future__ import annotations

from typing import Any

import click

from quasar.cli.admin.args import tenant_path
from quasar.cli.admin.context import admin_client, json_option
from quasar.cli.admin.output import echo_json, echo_lines, fields_table, print_tables, rows_table

__all__ = ["brokers", "clusters", "tenants"]


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


_ROLES = click.option("--admin-roles", "-r", default=None, help="Comma-separated admin roles.")
_CLUSTERS = click.option("--allowed-clusters", "-c", default=None, help="Comma-separated allowed clusters.")


@click.group()
def tenants() -> None:
    """Tenants (GET/PUT/POST/DELETE /admin/v2/tenants)."""


@tenants.command("list")
@json_option
def list_tenants(as_json: bool) -> None:
    """The tenants, one per line."""
    names = admin_client().get_json("/admin/v2/tenants")
    echo_json(names) if as_json else echo_lines(names)


@tenants.command("get")
@click.argument("tenant")
@json_option
def get_tenant(tenant: str, as_json: bool) -> None:
    """TENANT's admin roles and allowed clusters."""
    info = admin_client().get_json(f"/admin/v2/tenants/{tenant_path(tenant)}")
    if as_json:
        echo_json(info)
    else:
        print_tables(fields_table(f"tenant {tenant}", info, ["adminRoles", "allowedClusters"]))


@tenants.command("create")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def create_tenant(tenant: str, admin_roles: str | None, allowed_clusters: str | None) -> None:
    """Create TENANT (409 if it exists)."""
    client = admin_client()
    clusters = _csv(allowed_clusters)
    if clusters is None:
        clusters = client.get_json("/admin/v2/clusters")
    body = {"adminRoles": _csv(admin_roles) or [], "allowedClusters": clusters}
    client.send("PUT", f"/admin/v2/tenants/{tenant_path(tenant)}", body)


@tenants.command("update")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def update_tenant(tenant: str, admin_roles: str | None, allowed_clusters: str | None) -> None:
    """Replace TENANT's admin roles and/or allowed clusters."""
    client = admin_client()
    path = f"/admin/v2/tenants/{tenant_path(tenant)}"
    current: dict[str, Any] = client.get_json(path) or {}
    roles, clusters = _csv(admin_roles), _csv(allowed_clusters)
    body = {
        "adminRoles": roles if roles is not None else current.get("adminRoles", []),
        "allowedClusters": clusters if clusters is not None else current.get("allowedClusters", []),
    }
    client.send("POST", path, body)


@tenants.command("delete")
@click.argument("tenant")
@click.option("--force", "-f", is_flag=True, help="Delete its namespaces too (refused by Quasar: 405).")
def delete_tenant(tenant: str, force: bool) -> None:
    """Delete TENANT (409 while it has namespaces)."""
    admin_client().send("DELETE", f"/admin/v2/tenants/{tenant_path(tenant)}", force=str(force).lower())


@click.group()
def clusters() -> None:
    """Clusters (GET /admin/v2/clusters)."""


@clusters.command("list")
@json_option
def list_clusters(as_json: bool) -> None:
    """The cluster names, one per line."""
    names = admin_client().get_json("/admin/v2/clusters")
    echo_json(names) if as_json else echo_lines(names)


@clusters.command("get")
@click.argument("cluster")
@json_option
def get_cluster(cluster: str, as_json: bool) -> None:
    """CLUSTER's service URLs (Pulsar ClusterData)."""
    data = admin_client().get_json(f"/admin/v2/clusters/{tenant_path(cluster)}")
    echo_json(data) if as_json else print_tables(fields_table(f"cluster {cluster}", data))


@click.group()
def brokers() -> None:
    """Live brokers (GET /admin/v2/brokers)."""


@brokers.command("list")
@click.argument("cluster", required=False)
@json_option
def list_brokers(cluster: str | None, as_json: bool) -> None:
    """The live brokers: of CLUSTER as Pulsar lists them (host:port), or every one with its group and role."""
    client = admin_client()
    if cluster is not None:
        names = client.get_json(f"/admin/v2/brokers/{tenant_path(cluster)}")
        echo_json(names) if as_json else echo_lines(names)
        return
    live = client.get_json("/admin/v2/brokers")
    if as_json:
        echo_json(live)
        return
    columns = ("brokerName", "brokerId", "role", "epoch", "serviceUrl", "webServiceUrl")
    rows = [[b.get(c) for c in columns] for b in live]
    print_tables(rows_table("brokers", columns, rows))
