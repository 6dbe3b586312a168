"""``quasar admin topics peek-messages``: the admin API's peek answers turned back into messages, as Pulsar's
admin client does (``TopicsImpl.getMessagesFromHttpResponse``), and printed as ``pulsar-admin`` prints them.

``GET .../subscription/{sub}/position/{n}`` answers one stored entry: its payload (uncompressed) as the body
and its metadata as ``X-Pulsar-*`` headers (``quasar.broker.admin.peek``). A batch entry
(``X-Pulsar-num-batch-message``) is split into its messages, each with its own properties, key and event
time and the id ``ledger:entry:batchIndex``; a peek of N messages reads entries 1, 2, ... until N messages
are found or the broker answers 404 "Message not found" (the backlog holds fewer).
"""

from __future__ import annotations

import base64
import datetime
import json
from dataclasses import dataclass, field
from typing import Any

import click
import httpx

from quasar.cli.admin.http import AdminApiError, AdminClient
from quasar.cli.admin.output import hex_dump
from quasar.protocol.errors import ProtocolError
from quasar.protocol.metadata import iter_batch

__all__ = ["PeekedMessage", "peek_messages", "print_messages"]

_PROPERTY = "x-pulsar-property-"


@dataclass
class PeekedMessage:
    """One peeked message: ``message_id`` ``L:E`` (``L:E:B`` inside a batch), times in ms since the epoch
    (``event_time`` 0 when unset), ``key`` (the partition key) and ``payload`` bytes."""

    message_id: str
    publish_time: int
    event_time: int = 0
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    payload: bytes = b""
    batch_index: int = -1

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form: payload base64-encoded, as the ``/messages`` query route gives it."""
        return {
            "messageId": self.message_id,
            "publishTime": self.publish_time,
            "eventTime": self.event_time,
            "key": self.key,
            "properties": self.properties,
            "payload": base64.b64encode(self.payload).decode("ascii"),
        }


def _ms(text: str | None) -> int:
    """Pulsar's ``2026-11-27T20:41:07.123Z`` header date -> ms since the epoch (0 when absent)."""
    if not text:
        return 0
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(moment.timestamp() * 1000)


def _messages_of(response: httpx.Response) -> list[PeekedMessage]:
    headers = response.headers
    message_id = headers.get("x-pulsar-message-id", "?")
    publish_time = _ms(headers.get("x-pulsar-publish-time"))
    properties = {k[len(_PROPERTY) :]: v for k, v in headers.items() if k.lower().startswith(_PROPERTY)}
    count = headers.get("x-pulsar-num-batch-message")
    if count is None:
        event_time = _ms(headers.get("x-pulsar-event-time"))
        key = headers.get("x-pulsar-partition-key")
        return [PeekedMessage(message_id, publish_time, event_time, key, properties, response.content)]
    messages = []
    try:
        for index, (single, payload) in enumerate(iter_batch(response.content, int(count))):
            messages.append(
                PeekedMessage(
                    f"{message_id}:{index}",
                    publish_time,
                    single.event_time if single.HasField("event_time") else 0,
                    single.partition_key if single.HasField("partition_key") else None,
                    {kv.key: kv.value for kv in single.properties},
                    bytes(payload),
                    index,
                )
            )
    except (ProtocolError, ValueError) as exc:
        raise click.ClickException(f"entry {message_id}: the batch payload does not parse: {exc}") from None
    return messages


def peek_messages(client: AdminClient, sub_path: str, count: int) -> list[PeekedMessage]:
    """Up to ``count`` messages after the mark-delete position of the subscription at ``sub_path``
    (``/admin/v2/persistent/t/ns/x/subscription/s``); AdminApiError for a 404 other than "Message not
    found" (unknown topic or subscription) and any other error."""
    found: list[PeekedMessage] = []
    position = 1
    while len(found) < count:  # bounded: each round reads one more entry, the broker 404s past the backlog
        try:
            response = client.request("GET", f"{sub_path}/position/{position}")
        except AdminApiError as exc:
            if exc.status == 404 and "Message not found" in exc.reason:
                break
            raise
        found += _messages_of(response)[: count - len(found)]
        position += 1
    return found


def print_messages(messages: list[PeekedMessage]) -> None:
    """Print ``messages`` as ``pulsar-admin topics peek-messages`` does."""
    for number, message in enumerate(messages):
        if number:
            click.echo("-------------------------------------------------------------------------\n")
        label = "Batch Message ID" if message.batch_index >= 0 else "Message ID"
        click.echo(f"{label}: {message.message_id}")
        click.echo(f"Publish time: {message.publish_time}")
        click.echo(f"Event time: {message.event_time}")
        if message.key is not None:
            click.echo(f"Key: {message.key}")
        if message.properties:
            click.echo("Properties:")
            click.echo(json.dumps(message.properties, indent=2))
        if message.payload:
            click.echo(hex_dump(message.payload))
