"""``quasar admin``: ``pulsar-admin``'s most used commands over a broker's admin REST API (with ``httpx``).

Command groups (names and options as ``pulsar-admin``'s): ``tenants``, ``namespaces`` (and their policies),
``topics`` (and their subscriptions, plus Quasar's ``query --key``), ``schemas``, ``clusters``, ``brokers``,
and Quasar's ``broker-group status|failover`` for replicated broker groups. Topic names take Pulsar's short
forms (``x`` = ``persistent://public/default/x``).

Options of the group (before the command): ``--admin-url`` (default ``http://127.0.0.1:8080``, env
``QUASAR_ADMIN_URL``; any broker of a cluster: requests about a topic follow its 307 to the owner),
``--auth-token`` (env ``QUASAR_AUTH_TOKEN``; sent as ``Authorization: Bearer``), ``--tls-trust-certs-file``,
``--tls-cert-file`` / ``--tls-key-file`` (client certificate), ``--tls-allow-insecure``,
``--request-timeout`` (seconds).

Output: tables, names one per line, or the admin API's JSON with ``--json``. Exit status: 0 done; 1 the
server answered an error (its ``reason`` is printed: ``GET /admin/v2/tenants/x answered 404: Tenant does not
exist``) or nothing answered; 2 bad usage (a bad topic name, size or time).
"""

from __future__ import annotations

import click

from quasar.cli.admin.broker_group import broker_group
from quasar.cli.admin.context import store_settings
from quasar.cli.admin.http import DEFAULT_ADMIN_URL, AdminSettings
from quasar.cli.admin.namespaces import namespaces
from quasar.cli.admin.schemas import schemas
from quasar.cli.admin.tenants import brokers, clusters, tenants
from quasar.cli.admin.topics import topics

__all__ = ["admin"]

_FILE = click.Path(exists=True, dir_okay=False)


@click.group()
@click.option("--admin-url", envvar="QUASAR_ADMIN_URL", default=DEFAULT_ADMIN_URL, show_default=True,
              help="Admin API of a broker [env QUASAR_ADMIN_URL].")  # fmt: skip
@click.option(
    "--auth-token",
    envvar="QUASAR_AUTH_TOKEN",
    default=None,
    help="JWT sent as 'Authorization: Bearer' to a broker with authentication on [env QUASAR_AUTH_TOKEN].",
)
@click.option("--tls-trust-certs-file", "--tls-trust-cert-path", type=_FILE, default=None,
              help="PEM file of the CAs to trust for an https:// admin URL (default: the system's).")  # fmt: skip
@click.option(
    "--tls-cert-file", type=_FILE, default=None, help="Client certificate (PEM) for TLS authentication."
)
@click.option("--tls-key-file", type=_FILE, default=None, help="Private key (PEM) of --tls-cert-file.")
@click.option("--tls-allow-insecure", is_flag=True, help="Accept any server certificate (tests only).")
@click.option("--request-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds to wait for each answer.")  # fmt: skip
@click.pass_context
def admin(
    ctx: click.Context,
    admin_url: str,
    auth_token: str | None,
    tls_trust_certs_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_allow_insecure: bool,
    request_timeout: float,
) -> None:
    """Operator commands over the admin REST API (pulsar-admin's names)."""
    if not admin_url.lower().startswith(("http://", "https://")):
        raise click.BadParameter(f"{admin_url!r} is not an http:// or https:// URL", param_hint="--admin-url")
    store_settings(
        ctx,
        AdminSettings(
            admin_url=admin_url,
            auth_token=auth_token or None,
            tls_trust_certs_file=tls_trust_certs_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            tls_allow_insecure_connection=tls_allow_insecure,
            timeout_s=request_timeout,
        ),
    )


for _group in (tenants, namespaces, topics, schemas, clusters, brokers, broker_group):
    admin.add_command(_group)
