"""``quasar admin topics``: ``pulsar-admin topics`` commands on a topic as a whole (the subscription commands
are in :mod:`~quasar.cli.admin.topic_subscriptions`).

``list NS``, ``list-partitioned-topics NS``, ``create T``, ``create-partitioned-topic T -p N``,
``get-partitioned-topic-metadata T``, ``delete T [-f]``, ``delete-partitioned-topic T [-f]``, ``stats T``,
``internal-stats T`` (also ``stats-internal``), ``partitioned-stats T [--per-partition]``,
``last-message-id T``, ``unload T``, ``terminate T``, ``compact T``, ``compaction-status T``, and Quasar's
``query T --key K [--from] [--to] [--max]`` (messages by key and store time, RocketMQ ``queryMessage``).

Topic names take Pulsar's short forms (``x`` = ``persistent://public/default/x``). Tables show the fields
operators look at; ``--json`` prints the admin API's answer unchanged.
"""

from __future__ import annotations

from typing import Any

import click

from quasar.cli.admin.args import namespace_path, parse_time_ms, topic_name, topic_path
from quasar.cli.admin.context import admin_client, json_option
from quasar.cli.admin.output import (
    echo_json,
    echo_lines,
    fields_table,
    format_ms,
    payload_text,
    print_tables,
    rows_table,
)
from quasar.cli.admin.topic_subscriptions import SUBSCRIPTION_COMMANDS

__all__ = ["topics"]

_TOPIC_FIELDS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "msgInCounter",
                 "bytesInCounter", "msgOutCounter", "bytesOutCounter", "averageMsgSize", "storageSize",
                 "backlogSize", "deduplicationStatus")  # fmt: skip
_SUBSCRIPTION_COLUMNS = ("type", "msgBacklog", "unackedMessages", "msgRateOut", "msgOutCounter", "isDurable")
_CONSUMER_COLUMNS = ("consumerName", "address", "availablePermits", "unackedMessages", "msgRateOut",
                     "msgOutCounter")  # fmt: skip
_INTERNAL_FIELDS = ("numberOfEntries", "totalSize", "lastConfirmedEntry")
_PUBLISHER_COLUMNS = ("producerName", "producerId", "address", "msgRateIn", "msgInCounter")


@click.group()
def topics() -> None:
    """Topics, their stats and subscriptions (/admin/v2/persistent/...)."""


for _command, _name in SUBSCRIPTION_COMMANDS:
    topics.add_command(_command, _name)


def _url(topic: str, suffix: str = "") -> str:
    return f"/admin/v2/{topic_path(topic)}{suffix}"


@topics.command("list")
@click.argument("namespace")
@click.option("--topic-domain", "-td", type=click.Choice(["persistent", "non-persistent"]),
              default="persistent", show_default=True, help="Which topics.")  # fmt: skip
@json_option
def list_topics(namespace: str, topic_domain: str, as_json: bool) -> None:
    """NAMESPACE's topics (partitions one by one), one per line."""
    names = admin_client().get_json(f"/admin/v2/{topic_domain}/{namespace_path(namespace)}")
    echo_json(names) if as_json else echo_lines(names)


@topics.command("list-partitioned-topics")
@click.argument("namespace")
@json_option
def list_partitioned_topics(namespace: str, as_json: bool) -> None:
    """NAMESPACE's partitioned topics, one per line."""
    names = admin_client().get_json(f"/admin/v2/persistent/{namespace_path(namespace)}/partitioned")
    echo_json(names) if as_json else echo_lines(names)


@topics.command("create")
@click.argument("topic")
def create(topic: str) -> None:
    """Create a non-partitioned TOPIC (409 if it exists)."""
    admin_client().send("PUT", _url(topic))


@topics.command("create-partitioned-topic")
@click.argument("topic")
@click.option("--partitions", "-p", required=True, type=click.IntRange(min=1), help="Number of partitions.")
def create_partitioned_topic(topic: str, partitions: int) -> None:
    """Create TOPIC with PARTITIONS partitions."""
    admin_client().send("PUT", _url(topic, "/partitions"), partitions)


@topics.command("get-partitioned-topic-metadata")
@click.argument("topic")
def get_partitioned_topic_metadata(topic: str) -> None:
    """TOPIC's partition count (``{"partitions": N}``, 0 for a non-partitioned topic)."""
    echo_json(admin_client().get_json(_url(topic, "/partitions")))


_FORCE = click.option("--force", "-f", is_flag=True, help="Close its producers and consumers first.")


@topics.command("delete")
@click.argument("topic")
@_FORCE
def delete(topic: str, force: bool) -> None:
    """Delete a non-partitioned TOPIC and its data (412 while it has clients, unless --force)."""
    admin_client().send("DELETE", _url(topic), force=str(force).lower())


@topics.command("delete-partitioned-topic")
@click.argument("topic")
@_FORCE
def delete_partitioned_topic(topic: str, force: bool) -> None:
    """Delete a partitioned TOPIC, its partitions and their data."""
    admin_client().send("DELETE", _url(topic, "/partitions"), force=str(force).lower())


def _stats_tables(title: str, stats: dict[str, Any]) -> None:
    topic_fields = dict(stats)
    topic_fields["publishers"] = len(stats.get("publishers", []))
    topic_fields["subscriptions"] = len(stats.get("subscriptions", {}))
    keys = [k for k in _TOPIC_FIELDS if k in stats] + ["publishers", "subscriptions"]
    subscriptions = stats.get("subscriptions", {})
    sub_rows = [
        [name, *(sub.get(c) for c in _SUBSCRIPTION_COLUMNS), len(sub.get("consumers", []))]
        for name, sub in sorted(subscriptions.items())
    ]
    consumer_rows = [
        [name, *(c.get(k) for k in _CONSUMER_COLUMNS)]
        for name, sub in sorted(subscriptions.items())
        for c in sub.get("consumers", [])
    ]
    publisher_rows = [[p.get(k) for k in _PUBLISHER_COLUMNS] for p in stats.get("publishers", [])]
    print_tables(
        fields_table(title, topic_fields, keys),
        rows_table("subscriptions", ("subscription", *_SUBSCRIPTION_COLUMNS, "consumers"), sub_rows),
        rows_table("consumers", ("subscription", *_CONSUMER_COLUMNS), consumer_rows),
        rows_table("publishers", _PUBLISHER_COLUMNS, publisher_rows),
    )


@topics.command("stats")
@click.argument("topic")
@json_option
def stats(topic: str, as_json: bool) -> None:
    """TOPIC's stats: rates and counters, subscriptions with their backlog, consumers, publishers."""
    data = admin_client().get_json(_url(topic, "/stats"))
    echo_json(data) if as_json else _stats_tables(f"stats of {topic_name(topic)}", data)


@topics.command("partitioned-stats")
@click.argument("topic")
@click.option("--per-partition", is_flag=True, help="Also each partition's stats.")
@json_option
def partitioned_stats(topic: str, per_partition: bool, as_json: bool) -> None:
    """A partitioned TOPIC's stats summed over its partitions."""
    params = {"perPartition": str(per_partition).lower()}
    data = admin_client().get_json(_url(topic, "/partitioned-stats"), params)
    if as_json:
        echo_json(data)
        return
    partitions = data.get("metadata", {}).get("partitions")
    _stats_tables(f"stats of {topic_name(topic)} ({partitions} partitions)", data)
    for name, partition in sorted(data.get("partitions", {}).items()):
        _stats_tables(f"stats of {name}", partition)


@click.command("internal-stats")
@click.argument("topic")
@json_option
def internal_stats(topic: str, as_json: bool) -> None:
    """TOPIC's managed ledger: entries, size, ledgers, and the cursors' positions."""
    data = admin_client().get_json(_url(topic, "/internalStats"))
    if as_json:
        echo_json(data)
        return
    ledgers = [
        [r.get(k) for k in ("ledgerId", "entries", "size", "createdMs")] for r in data.get("ledgers", [])
    ]
    cursors = [
        [
            name,
            c.get("markDeletePosition"),
            c.get("readPosition"),
            c.get("numberOfEntriesSinceFirstNotAckedMessage"),
        ]
        for name, c in sorted(data.get("cursors", {}).items())
    ]
    print_tables(
        fields_table(f"internal stats of {topic_name(topic)}", data, _INTERNAL_FIELDS),
        rows_table("ledgers", ("ledgerId", "entries", "size", "createdMs"), ledgers),
        rows_table("cursors", ("cursor", "markDeletePosition", "readPosition", "backlog entries"), cursors),
    )


topics.add_command(internal_stats)
topics.add_command(internal_stats, "stats-internal")  # pulsar-admin's name


@topics.command("last-message-id")
@click.argument("topic")
def last_message_id(topic: str) -> None:
    """The id of TOPIC's last message (``{"ledgerId", "entryId", "partitionIndex"}``; -1/-1 when empty)."""
    echo_json(admin_client().get_json(_url(topic, "/lastMessageId")))


@topics.command("unload")
@click.argument("topic")
def unload(topic: str) -> None:
    """Close TOPIC on its broker: clients reconnect and it loads again."""
    admin_client().send("PUT", _url(topic, "/unload"))


@topics.command("terminate")
@click.argument("topic")
def terminate(topic: str) -> None:
    """Seal TOPIC: no more messages can be published to it."""
    last = admin_client().send("POST", _url(topic, "/terminate"))
    click.echo(f"Topic successfully terminated, the last message id is {last['ledgerId']}:{last['entryId']}")


@topics.command("compact")
@click.argument("topic")
def compact(topic: str) -> None:
    """Start compacting TOPIC (each partition of a partitioned topic)."""
    admin_client().send("PUT", _url(topic, "/compaction"))
    click.echo(f"Topic compaction requested for {topic_name(topic)}")


_COMPACTION_TEXT = {"NOT_RUN": "Compaction has not been run for {} since broker startup",
                    "RUNNING": "Compaction is currently running", "SUCCESS": "Compaction was a success"}  # fmt: skip


@topics.command("compaction-status")
@click.argument("topic")
@json_option
def compaction_status(topic: str, as_json: bool) -> None:
    """Status of the last compaction of TOPIC (a topic or one partition); exit 1 when it failed."""
    status = admin_client().get_json(_url(topic, "/compaction"))
    if as_json:
        echo_json(status)
        return
    state = status.get("status")
    if state == "ERROR":
        raise click.ClickException(f"Error in compaction: {status.get('lastError', '')}")
    click.echo(_COMPACTION_TEXT.get(state, f"Compaction status: {state}").format(topic_name(topic)))


@topics.command("query")
@click.argument("topic")
@click.option("--key", "-k", required=True, help="Message key (the Pulsar partition key).")
@click.option("--from", "from_", default=None, help="Earliest store time: ms since the epoch or ISO 8601.")
@click.option("--to", default=None, help="Latest store time: ms since the epoch or ISO 8601.")
@click.option("--max", "max_num", default=32, show_default=True, type=click.IntRange(1, 64),
              help="Entries looked up per partition.")  # fmt: skip
@json_option
def query(topic: str, key: str, from_: str | None, to: str | None, max_num: int, as_json: bool) -> None:
    """TOPIC's messages whose key is KEY, optionally within a store-time range (Quasar's RocketMQ-style
    index; Pulsar has no such command)."""
    params: dict[str, str | int] = {"key": key, "max": max_num}
    if from_ is not None:
        params["from"] = parse_time_ms(from_)
    if to is not None:
        params["to"] = parse_time_ms(to)
    messages = admin_client().get_json(_url(topic, "/messages"), params)
    if as_json:
        echo_json(messages)
        return
    rows = [
        [m["messageId"], m["partition"] if m["partition"] >= 0 else "-", format_ms(m["publishTime"]),
         format_ms(m["storeTime"]), payload_text(m["payload"])]
        for m in messages
    ]  # fmt: skip
    columns = ("message id", "partition", "publish time", "store time", "payload")
    print_tables(rows_table(f"{topic_name(topic)} key={key!r}: {len(messages)} message(s)", columns, rows))
