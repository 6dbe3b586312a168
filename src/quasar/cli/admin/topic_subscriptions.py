"""Subscription commands of ``quasar admin topics`` (``pulsar-admin topics`` names and options):

``subscriptions T``, ``create-subscription T -s SUB [-m earliest|latest|L:E]``, ``unsubscribe T -s SUB [-f]``,
``peek-messages T -s SUB [-n N]``, ``skip T -s SUB -n N``, ``skip-all T -s SUB`` (also ``clear-backlog``),
``reset-cursor T -s SUB (-t 10m | -m L:E [-e])``, ``expire-messages T -s SUB -t 3600`` and
``expire-messages-all-subscriptions T -t 3600``. Times are relative (``120`` seconds, ``10m``, ``3h``, ``2d``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

import click

from quasar.cli.admin.args import message_id, parse_relative_seconds, topic_path
from quasar.cli.admin.context import admin_client, json_option
from quasar.cli.admin.output import echo_json, echo_lines
from quasar.cli.admin.peek import peek_messages, print_messages

__all__ = ["SUBSCRIPTION_COMMANDS"]

SUBSCRIPTION_COMMANDS: list[tuple[click.Command, str]] = []


def _command(*names: str) -> Callable[[click.Command], click.Command]:
    def register(command: click.Command) -> click.Command:
        SUBSCRIPTION_COMMANDS.extend((command, name) for name in names)
        return command

    return register


def _sub_url(topic: str, subscription: str, suffix: str = "") -> str:
    return f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}{suffix}"


def _seconds(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_relative_seconds(value)


_SUB = click.option("--subscription", "-s", required=True, help="Subscription name.")


@_command("subscriptions")
@click.command()
@click.argument("topic")
@json_option
def subscriptions(topic: str, as_json: bool) -> None:
    """TOPIC's subscriptions, one per line."""
    names = admin_client().get_json(f"/admin/v2/{topic_path(topic)}/subscriptions")
    echo_json(names) if as_json else echo_lines(names)


@_command("create-subscription")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--messageId", "-m", "start", default="latest", show_default=True,
              help="First message: earliest, latest or ledgerId:entryId.")  # fmt: skip
def create_subscription(topic: str, subscription: str, start: str) -> None:
    """Create a durable SUBSCRIPTION on TOPIC whose first message is --messageId (409 if it exists)."""
    admin_client().send("PUT", _sub_url(topic, subscription), message_id(start))


@_command("unsubscribe")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--force", "-f", is_flag=True, help="Disconnect its consumers first.")
def unsubscribe(topic: str, subscription: str, force: bool) -> None:
    """Delete SUBSCRIPTION of TOPIC (412 while it has consumers, unless --force)."""
    path = f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
    admin_client().send("DELETE", path, force=str(force).lower())


@_command("peek-messages")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--count", "-n", default=1, show_default=True, type=click.IntRange(1, 10_000),
              help="Number of messages.")  # fmt: skip
@json_option
def peek(topic: str, subscription: str, count: int, as_json: bool) -> None:
    """The next COUNT messages of SUBSCRIPTION, without consuming them."""
    messages = peek_messages(admin_client(), _sub_url(topic, subscription), count)
    if as_json:
        echo_json([m.to_json() for m in messages])
    else:
        print_messages(messages)


@_command("skip")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--count", "-n", required=True, type=click.IntRange(min=0), help="Number of messages.")
def skip(topic: str, subscription: str, count: int) -> None:
    """Acknowledge the next COUNT messages of SUBSCRIPTION without delivering them."""
    admin_client().send("POST", _sub_url(topic, subscription, f"/skip/{count}"))


@_command("skip-all", "clear-backlog")
@click.command()
@click.argument("topic")
@_SUB
def skip_all(topic: str, subscription: str) -> None:
    """Acknowledge every message of SUBSCRIPTION's backlog."""
    admin_client().send("POST", _sub_url(topic, subscription, "/skip_all"))


@_command("reset-cursor")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--time", "-t", "ago_s", callback=_seconds, help="Go back this far: 120 (s), 10m, 3h, 2d.")
@click.option("--messageId", "-m", "position", default=None, help="Go to this message: ledgerId:entryId.")
@click.option("--exclude-reset-position", "-e", is_flag=True, help="Start after --messageId, not at it.")
def reset_cursor(topic: str, subscription: str, ago_s: int | None, position: str | None,
                 exclude_reset_position: bool) -> None:  # fmt: skip
    """Move SUBSCRIPTION to the first message published at or after now - TIME, or to a message id; its
    consumers are disconnected and resume from there."""
    if (ago_s is None) == (position is None):
        raise click.UsageError("give exactly one of --time and --messageId")
    client = admin_client()
    if ago_s is not None:
        timestamp = max(0, int(time.time() * 1000) - ago_s * 1000)
        client.send("POST", _sub_url(topic, subscription, f"/resetcursor/{timestamp}"))
    else:
        body = {**message_id(position or ""), "isExcluded": exclude_reset_position}
        client.send("POST", _sub_url(topic, subscription, "/resetcursor"), body)


@_command("expire-messages")
@click.command()
@click.argument("topic")
@_SUB
@click.option("--expireTime", "-t", "expire_s", required=True, callback=_seconds,
              help="Acknowledge messages older than this: 3600 (s), 10m, 3h.")  # fmt: skip
def expire_messages(topic: str, subscription: str, expire_s: int) -> None:
    """Acknowledge SUBSCRIPTION's messages published more than EXPIRETIME ago."""
    admin_client().send("POST", _sub_url(topic, subscription, f"/expireMessages/{max(expire_s, 0)}"))


@_command("expire-messages-all-subscriptions")
@click.command()
@click.argument("topic")
@click.option("--expireTime", "-t", "expire_s", required=True, callback=_seconds,
              help="Acknowledge messages older than this: 3600 (s), 10m, 3h.")  # fmt: skip
def expire_messages_all_subscriptions(topic: str, expire_s: int) -> None:
    """Acknowledge every durable subscription's messages published more than EXPIRETIME ago."""
    path = f"/admin/v2/{topic_path(topic)}/all_subscription/expireMessages/{max(expire_s, 0)}"
    admin_client().send("POST", path)
