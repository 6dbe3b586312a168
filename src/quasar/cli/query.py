"""``quasar query TOPIC --key K [--from T] [--to T]``: messages of a topic by key and store-time range
(RocketMQ's ``queryMsgByKey``, which Pulsar lacks), through the broker's admin REST API
``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/messages?key=K&from=MS&to=MS&max=N``.

``TOPIC`` is ``persistent://tenant/ns/topic`` or a short name (``public/default`` is assumed). ``--from`` and
``--to`` take ms since the epoch or an ISO 8601 time (``2026-11-22T05:00:00``, local time unless it has an
offset). Prints one row per message (message id, publish and store time, payload as text when it is UTF-8,
else its length) or, with ``--json``, the admin API's JSON list.

Exit status: 0 (also when nothing matches), 1 the admin API answered an error, 2 bad usage.
"""

from __future__ import annotations

import base64
import datetime
import json
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode

import click
from rich.console import Console
from rich.table import Table

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"


def parse_time_ms(value: str) -> int:
    """``"1700000000000"`` -> 1700000000000; ``"2026-11-22T05:00:00+00:00"`` -> its ms since the epoch.
    Raises click.BadParameter otherwise."""
    value = value.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"not ms since the epoch nor an ISO 8601 time: {value!r}") from None
    return int(moment.timestamp() * 1000)


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` or ``x`` -> ``persistent/t/ns/x`` (URL-quoted parts). Raises click.BadParameter."""
    domain = "persistent"
    rest = topic
    if "://" in topic:
        domain, _, rest = topic.partition("://")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    if domain not in ("persistent", "non-persistent") or len(parts) != 3 or not all(parts):
        raise click.BadParameter(f"not a topic name: {topic!r}")
    return "/".join([domain, *(quote(p, safe="") for p in parts)])


def format_ms(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


def payload_text(encoded: str) -> str:
    data = base64.b64decode(encoded)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return f"<{len(data)} bytes>"
    return text if len(text) <= 200 else text[:200] + "…"


@click.command()
@click.argument("topic")
@click.option("--key", "-k", required=True, help="Message key (the Pulsar partition key).")
@click.option("--from", "from_", default=None, help="Earliest store time: ms since the epoch or ISO 8601.")
@click.option("--to", default=None, help="Latest store time: ms since the epoch or ISO 8601.")
@click.option("--max", "max_num", default=32, show_default=True, type=click.IntRange(1, 64), help="Entries.")
@click.option("--admin-url", default=DEFAULT_ADMIN_URL, show_default=True, help="The broker's admin API.")
@click.option("--json", "as_json", is_flag=True, help="Print the admin API's JSON instead of a table.")
def query(
    topic: str, key: str, from_: str | None, to: str | None, max_num: int, admin_url: str, as_json: bool
) -> None:
    """Find the messages of TOPIC whose key is KEY, optionally within a store-time range."""
    params: dict[str, str | int] = {"key": key, "max": max_num}
    if from_ is not None:
        params["from"] = parse_time_ms(from_)
    if to is not None:
        params["to"] = parse_time_ms(to)
    url = f"{admin_url.rstrip('/')}/admin/v2/{topic_path(topic)}/messages?{urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            messages = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("reason", exc.reason)
        except (ValueError, AttributeError):
            reason = exc.reason
        raise click.ClickException(f"admin API answered {exc.code}: {reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"cannot reach the admin API at {admin_url}: {exc}") from None
    if as_json:
        click.echo(json.dumps(messages, indent=2))
        return
    table = Table(title=f"{topic} key={key!r}: {len(messages)} message(s)")
    for column in ("message id", "partition", "publish time", "store time", "payload"):
        table.add_column(column)
    for message in messages:
        table.add_row(
            message["messageId"],
            str(message["partition"]) if message["partition"] >= 0 else "-",
            format_ms(message["publishTime"]),
            format_ms(message["storeTime"]),
            payload_text(message["payload"]),
        )
    Console().print(table)
