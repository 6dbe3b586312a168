"""``quasar admin namespaces``: ``list TENANT``, ``create T/N``, ``delete T/N [-f]``, ``policies T/N``,
``topics T/N``, ``permissions T/N``, ``grant-permission T/N --role R --actions produce,consume``,
``revoke-permission T/N --role R``, and the policy commands of :mod:`~quasar.cli.admin.namespace_policies`
(``pulsar-admin namespaces`` names and options)."""

from __future__ import annotations

from urllib.parse import quote

import click

from quasar.cli.admin.args import namespace_path, tenant_path
from quasar.cli.admin.context import admin_client, json_option
from quasar.cli.admin.namespace_policies import POLICY_COMMANDS
from quasar.cli.admin.output import echo_json, echo_lines, fields_table, print_tables, rows_table

__all__ = ["namespaces"]

_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


@click.group()
def namespaces() -> None:
    """Namespaces and their policies (/admin/v2/namespaces)."""


for _command in POLICY_COMMANDS:
    namespaces.add_command(_command)


@namespaces.command("list")
@click.argument("tenant")
@json_option
def list_namespaces(tenant: str, as_json: bool) -> None:
    """TENANT's namespaces (tenant/ns), one per line."""
    names = admin_client().get_json(f"/admin/v2/namespaces/{tenant_path(tenant)}")
    echo_json(names) if as_json else echo_lines(names)


@namespaces.command("create")
@click.argument("namespace")
def create_namespace(namespace: str) -> None:
    """Create NAMESPACE (tenant/ns; 409 if it exists, 404 for an unknown tenant)."""
    admin_client().send("PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}", {})


@namespaces.command("delete")
@click.argument("namespace")
@click.option("--force", "-f", is_flag=True, help="Delete its topics too (refused by Quasar: 405).")
def delete_namespace(namespace: str, force: bool) -> None:
    """Delete NAMESPACE (409 while it holds topics)."""
    path = f"/admin/v2/namespaces/{namespace_path(namespace)}"
    admin_client().send("DELETE", path, force=str(force).lower())


@namespaces.command("policies")
@click.argument("namespace")
@json_option
def policies(namespace: str, as_json: bool) -> None:
    """NAMESPACE's policies (Pulsar Policies JSON)."""
    data = admin_client().get_json(f"/admin/v2/namespaces/{namespace_path(namespace)}")
    echo_json(data) if as_json else print_tables(fields_table(f"policies of {namespace}", data))


@namespaces.command("topics")
@click.argument("namespace")
@click.option(
    "--mode", type=click.Choice(["PERSISTENT", "NON_PERSISTENT", "ALL"], case_sensitive=False), default=None
)
@json_option
def namespace_topics(namespace: str, mode: str | None, as_json: bool) -> None:
    """NAMESPACE's topics (partitions one by one), one per line."""
    params = {"mode": mode.upper()} if mode else None
    names = admin_client().get_json(f"/admin/v2/namespaces/{namespace_path(namespace)}/topics", params)
    echo_json(names) if as_json else echo_lines(names)


@namespaces.command("permissions")
@click.argument("namespace")
@json_option
def permissions(namespace: str, as_json: bool) -> None:
    """The roles granted on NAMESPACE and their actions."""
    grants = admin_client().get_json(f"/admin/v2/namespaces/{namespace_path(namespace)}/permissions")
    if as_json:
        echo_json(grants)
        return
    rows = [(role, ", ".join(actions)) for role, actions in sorted(grants.items())]
    print_tables(rows_table(f"permissions on {namespace}", ("role", "actions"), rows))


@namespaces.command("grant-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="Client role to grant to.")
@click.option("--actions", required=True, help=f"Comma-separated actions: {', '.join(_ACTIONS)}.")
def grant_permission(namespace: str, role: str, actions: str) -> None:
    """Grant ROLE the ACTIONS on NAMESPACE (replaces the role's actions)."""
    wanted = [a.strip() for a in actions.split(",") if a.strip()]
    unknown = [a for a in wanted if a not in _ACTIONS]
    if not wanted or unknown:
        raise click.BadParameter(f"actions must be among {', '.join(_ACTIONS)}, got {actions!r}")
    path = f"/admin/v2/namespaces/{namespace_path(namespace)}/permissions/{quote(role, safe='')}"
    admin_client().send("POST", path, wanted)


@namespaces.command("revoke-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="Client role to revoke.")
def revoke_permission(namespace: str, role: str) -> None:
    """Revoke ROLE's grant on NAMESPACE."""
    path = f"/admin/v2/namespaces/{namespace_path(namespace)}/permissions/{quote(role, safe='')}"
    admin_client().send("DELETE", path)
