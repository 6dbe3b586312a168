"""``quasar query TOPIC --key K [--from T] [--to T]``: messages of a topic by key and store-time range
(RocketMQ's ``queryMsgByKey``, which Pulsar lacks), through the broker's admin REST API
``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/messages?key=K&from=MS&to=MS&max=N``.

The same command as ``quasar admin topics query``, with the connection options of ``quasar admin`` on the
command itself: ``--admin-url`` (env ``QUASAR_ADMIN_URL``), ``--auth-token`` (env ``QUASAR_AUTH_TOKEN``) for a
broker with authentication on, ``--tls-trust-certs-file`` / ``--tls-allow-insecure`` for ``https://`` URLs.

``TOPIC`` is ``persistent://tenant/ns/topic`` or a short name (``public/default`` is assumed). ``--from`` and
``--to`` take ms since the epoch or an ISO 8601 time (``2026-11-22T05:00:00``, local time unless it has an
offset). Prints one row per message (message id, publish and store time, payload as text when it is UTF-8,
else its length) or, with ``--json``, the admin API's JSON list.

Exit status: 0 (also when nothing matches), 1 the admin API answered an error or nothing answered, 2 bad usage.
"""

from __future__ import annotations

import click

from quasar.cli.admin.context import store_settings
from quasar.cli.admin.http import DEFAULT_ADMIN_URL, AdminSettings
from quasar.cli.admin.topics import topics

__all__ = ["query"]

_FILE = click.Path(exists=True, dir_okay=False)
_ADMIN_QUERY = topics.commands["query"]


@click.command()
@click.argument("topic")
@click.option("--key", "-k", required=True, help="Message key (the Pulsar partition key).")
@click.option("--from", "from_", default=None, help="Earliest store time: ms since the epoch or ISO 8601.")
@click.option("--to", default=None, help="Latest store time: ms since the epoch or ISO 8601.")
@click.option("--max", "max_num", default=32, show_default=True, type=click.IntRange(1, 64),
              help="Entries looked up per partition.")  # fmt: skip
@click.option("--admin-url", envvar="QUASAR_ADMIN_URL", default=DEFAULT_ADMIN_URL, show_default=True,
              help="The broker's admin API [env QUASAR_ADMIN_URL].")  # fmt: skip
@click.option("--auth-token", envvar="QUASAR_AUTH_TOKEN", default=None,
              help="JWT sent as 'Authorization: Bearer' [env QUASAR_AUTH_TOKEN].")  # fmt: skip
@click.option("--tls-trust-certs-file", type=_FILE, default=None,
              help="PEM file of the CAs to trust for an https:// admin URL (default: the system's).")  # fmt: skip
@click.option("--tls-allow-insecure", is_flag=True, help="Accept any server certificate (tests only).")
@click.option("--json", "as_json", is_flag=True, help="Print the admin API's JSON instead of a table.")
@click.pass_context
def query(
    ctx: click.Context,
    topic: str,
    key: str,
    from_: str | None,
    to: str | None,
    max_num: int,
    admin_url: str,
    auth_token: str | None,
    tls_trust_certs_file: str | None,
    tls_allow_insecure: bool,
    as_json: bool,
) -> None:
    """Find the messages of TOPIC whose key is KEY, optionally within a store-time range."""
    if not admin_url.lower().startswith(("http://", "https://")):
        raise click.BadParameter(f"{admin_url!r} is not an http:// or https:// URL", param_hint="--admin-url")
    settings = AdminSettings(
        admin_url=admin_url,
        auth_token=auth_token or None,
        tls_trust_certs_file=tls_trust_certs_file,
        tls_allow_insecure_connection=tls_allow_insecure,
    )
    store_settings(ctx, settings)
    ctx.invoke(_ADMIN_QUERY, topic=topic, key=key, from_=from_, to=to, max_num=max_num, as_json=as_json)
