"""Namespace policy commands of ``quasar admin namespaces`` (``pulsar-admin namespaces`` names and options):

- ``set-retention NS -s 10G -t 3d`` / ``get-retention`` / ``remove-retention``: Pulsar's
  ``{"retentionTimeInMinutes", "retentionSizeInMB"}`` (``-1`` unlimited, 0 none; sizes below 1 MiB are 0).
- ``set-message-ttl NS -ttl 1h`` / ``get-message-ttl`` / ``remove-message-ttl``: seconds, 0 = no TTL.
- ``set-backlog-quota NS -l 10G -p producer_request_hold [-t destination_storage]``, ``-lt 1h -t
  message_age`` / ``get-backlog-quotas`` / ``remove-backlog-quota [-t type]``. Quasar keeps one quota per
  namespace with both limits (``{"limitSize": bytes, "limitTime": s, "policy"}``) where Pulsar keeps one
  per type: a type sets (or, removed, clears) its own limit and keeps the other.
- ``set-deduplication NS --enable|--disable`` / ``get-deduplication`` / ``remove-deduplication``.
- ``set-compaction-threshold NS -t 100M`` / ``get-compaction-threshold`` / ``remove-compaction-threshold``.
- ``set-schema-compatibility-strategy NS -c FULL`` / ``get-schema-compatibility-strategy``.

Getters print the JSON value as ``pulsar-admin`` does (``null`` when the namespace has none set).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from quasar.cli.admin.args import namespace_path, parse_relative_seconds, parse_size
from quasar.cli.admin.context import admin_client
from quasar.cli.admin.output import echo_json

__all__ = ["POLICY_COMMANDS"]

POLICY_COMMANDS: list[click.Command] = []

_BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
_BACKLOG_TYPES = ("destination_storage", "message_age")
_STRATEGIES = ("UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
               "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")  # fmt: skip


def _command(name: str) -> Callable[[Callable[..., None]], click.Command]:
    def register(function: Callable[..., None]) -> click.Command:
        command = click.command(name)(click.argument("namespace")(function))
        POLICY_COMMANDS.append(command)
        return command

    return register


def _path(namespace: str, policy: str) -> str:
    return f"/admin/v2/namespaces/{namespace_path(namespace)}/{policy}"


def _size(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_size(value)


def _seconds(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_relative_seconds(value)


# ---------------------------------------------------------------------- retention
@click.option(
    "--size", "-s", required=True, callback=_size, help="Size limit: 4096, 10M, 16G, 3T; -1 unlimited."
)
@click.option("--time", "-t", "time_s", required=True, callback=_seconds,
              help="Time limit: 120 (s), 100m, 3h, 2d, 5w; -1 unlimited.")  # fmt: skip
@_command("set-retention")
def set_retention(namespace: str, size: int, time_s: int) -> None:
    """Keep acknowledged messages of NAMESPACE up to SIZE and TIME."""
    body = {
        "retentionTimeInMinutes": time_s if time_s == -1 else time_s // 60,
        "retentionSizeInMB": size if size == -1 else size // (1024 * 1024),
    }
    admin_client().send("POST", _path(namespace, "retention"), body)


@_command("get-retention")
def get_retention(namespace: str) -> None:
    """NAMESPACE's retention policy."""
    echo_json(admin_client().get_json(_path(namespace, "retention")))


@_command("remove-retention")
def remove_retention(namespace: str) -> None:
    """Drop NAMESPACE's retention policy (the broker default applies)."""
    admin_client().send("DELETE", _path(namespace, "retention"))


# ---------------------------------------------------------------------- message TTL
@click.option("--messageTTL", "-ttl", "ttl", required=True, callback=_seconds,
              help="Message TTL: 3600 (s), 100m, 3h, 2d; 0 = none.")  # fmt: skip
@_command("set-message-ttl")
def set_message_ttl(namespace: str, ttl: int) -> None:
    """Expire NAMESPACE's unacknowledged messages after TTL."""
    if ttl < 0:
        raise click.BadParameter("the message TTL must be 0 or more seconds", param_hint="--messageTTL")
    admin_client().send("POST", _path(namespace, "messageTTL"), ttl)


@_command("get-message-ttl")
def get_message_ttl(namespace: str) -> None:
    """NAMESPACE's message TTL in seconds."""
    echo_json(admin_client().get_json(_path(namespace, "messageTTL")))


@_command("remove-message-ttl")
def remove_message_ttl(namespace: str) -> None:
    """Drop NAMESPACE's message TTL (the broker default applies)."""
    admin_client().send("DELETE", _path(namespace, "messageTTL"))


# ---------------------------------------------------------------------- backlog quota
_TYPE = click.option("--type", "-t", "quota_type", type=click.Choice(_BACKLOG_TYPES),
                     default="destination_storage", show_default=True, help="Backlog quota type.")  # fmt: skip


@click.option("--limit", "-l", callback=_size, help="Size limit (destination_storage): 10M, 16G; -1 none.")
@click.option("--limitTime", "-lt", "limit_time", callback=_seconds,
              help="Age limit (message_age): 3600, 100m, 3h; -1 none.")  # fmt: skip
@click.option(
    "--policy", "-p", required=True, type=click.Choice(_BACKLOG_POLICIES), help="What to do when hit."
)
@_TYPE
@_command("set-backlog-quota")
def set_backlog_quota(
    namespace: str, limit: int | None, limit_time: int | None, policy: str, quota_type: str
) -> None:
    """Limit NAMESPACE's backlog by size (destination_storage) or age (message_age)."""
    if quota_type == "destination_storage" and limit is None:
        raise click.UsageError("--limit is required for a destination_storage quota")
    if quota_type == "message_age" and limit_time is None:
        raise click.UsageError("--limitTime is required for a message_age quota")
    client = admin_client()
    current = client.get_json(_path(namespace, "backlogQuotaMap")) or {}
    body = {
        "limitSize": limit if limit is not None else current.get("limitSize", -1),
        "limitTime": limit_time if limit_time is not None else current.get("limitTime", -1),
        "policy": policy,
    }
    client.send("POST", _path(namespace, "backlogQuota"), body)


@_command("get-backlog-quotas")
def get_backlog_quotas(namespace: str) -> None:
    """NAMESPACE's backlog quota (``{"limitSize", "limitTime", "policy"}``)."""
    echo_json(admin_client().get_json(_path(namespace, "backlogQuotaMap")))


@_TYPE
@_command("remove-backlog-quota")
def remove_backlog_quota(namespace: str, quota_type: str) -> None:
    """Drop NAMESPACE's size (destination_storage) or age (message_age) limit."""
    client = admin_client()
    current = client.get_json(_path(namespace, "backlogQuotaMap")) or {}
    kept = dict(current)
    kept["limitSize" if quota_type == "destination_storage" else "limitTime"] = -1
    if kept.get("limitSize", -1) < 0 and kept.get("limitTime", -1) < 0:
        client.send("DELETE", _path(namespace, "backlogQuota"))
    else:
        client.send("POST", _path(namespace, "backlogQuota"), kept)


# ---------------------------------------------------------------------- deduplication
@click.option("--enable/--disable", "-e/-d", "enable", default=None, help="Turn deduplication on or off.")
@_command("set-deduplication")
def set_deduplication(namespace: str, enable: bool | None) -> None:
    """Turn message deduplication on or off for NAMESPACE."""
    if enable is None:
        raise click.UsageError("give --enable or --disable")
    admin_client().send("POST", _path(namespace, "deduplication"), enable)


@_command("get-deduplication")
def get_deduplication(namespace: str) -> None:
    """NAMESPACE's deduplication policy (true, false or null when unset)."""
    echo_json(admin_client().get_json(_path(namespace, "deduplication")))


@_command("remove-deduplication")
def remove_deduplication(namespace: str) -> None:
    """Drop NAMESPACE's deduplication policy (the broker default applies)."""
    admin_client().send("DELETE", _path(namespace, "deduplication"))


# ---------------------------------------------------------------------- compaction threshold
@click.option(
    "--threshold", "-t", required=True, callback=_size, help="Backlog size that triggers: 100M, 1G."
)
@_command("set-compaction-threshold")
def set_compaction_threshold(namespace: str, threshold: int) -> None:
    """Compact NAMESPACE's topics automatically once their backlog passes THRESHOLD (0 = never)."""
    if threshold < 0:
        raise click.BadParameter("the threshold must be 0 or more bytes", param_hint="--threshold")
    admin_client().send("PUT", _path(namespace, "compactionThreshold"), threshold)


@_command("get-compaction-threshold")
def get_compaction_threshold(namespace: str) -> None:
    """NAMESPACE's compaction threshold in bytes."""
    echo_json(admin_client().get_json(_path(namespace, "compactionThreshold")))


@_command("remove-compaction-threshold")
def remove_compaction_threshold(namespace: str) -> None:
    """Drop NAMESPACE's compaction threshold (the broker default applies)."""
    admin_client().send("DELETE", _path(namespace, "compactionThreshold"))


# ---------------------------------------------------------------------- schema compatibility
@click.option("--compatibility", "-c", required=True, type=click.Choice(_STRATEGIES, case_sensitive=False),
              help="Schema compatibility strategy.")  # fmt: skip
@_command("set-schema-compatibility-strategy")
def set_schema_compatibility_strategy(namespace: str, compatibility: str) -> None:
    """Set the strategy new schemas of NAMESPACE's topics are checked with."""
    admin_client().send("PUT", _path(namespace, "schemaCompatibilityStrategy"), compatibility.upper())


@_command("get-schema-compatibility-strategy")
def get_schema_compatibility_strategy(namespace: str) -> None:
    """The schema compatibility strategy in force in NAMESPACE."""
    click.echo(admin_client().get_json(_path(namespace, "schemaCompatibilityStrategy")))
