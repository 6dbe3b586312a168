"""The state one ``quasar admin`` invocation shares between the ``admin`` group and its commands: the
:class:`~quasar.cli.admin.http.AdminSettings` from the group's options and one lazily made
:class:`~quasar.cli.admin.http.AdminClient`, closed when the command ends."""

from __future__ import annotations

import dataclasses

import click

from quasar.cli.admin.http import AdminClient, AdminSettings

__all__ = ["admin_client", "json_option", "store_settings"]

_SETTINGS = "quasar.admin.settings"
_CLIENT = "quasar.admin.client"

json_option = click.option("--json", "as_json", is_flag=True, help="Print the admin API's JSON answer.")
"""``--json``: the raw JSON answer instead of tables."""


def store_settings(ctx: click.Context, settings: AdminSettings) -> None:
    """Keep the group's settings for the commands of this invocation."""
    ctx.find_root().meta[_SETTINGS] = settings


def admin_client(admin_url: str | None = None) -> AdminClient:
    """The invocation's client (made on first use, closed with the root context); ``admin_url`` overrides
    the group's ``--admin-url`` (the ``broker-group`` commands' own option)."""
    root = click.get_current_context().find_root()
    settings: AdminSettings = root.meta.get(_SETTINGS) or AdminSettings()
    if admin_url is not None and admin_url != settings.admin_url:
        settings = dataclasses.replace(settings, admin_url=admin_url)
    key = f"{_CLIENT}:{settings.admin_url}"
    client = root.meta.get(key)
    if client is None:
        client = root.meta[key] = AdminClient(settings)
        root.call_on_close(client.close)
    return client
