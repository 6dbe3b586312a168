"""The HTTP answer to a peek (Pulsar ``PersistentTopicsBase.generateResponseWithEntry``): one stored entry as
an ``application/octet-stream`` body, its MessageMetadata as ``X-Pulsar-*`` headers, which Pulsar's admin
client (``topics peek-messages``, ``examine-message``) turns back into messages.

Headers (present when the metadata has the field): ``X-Pulsar-Message-ID`` (``ledgerId:entryId``),
``X-Pulsar-publish-time`` / ``-event-time`` / ``-deliver-at-time`` (ISO-8601 UTC with milliseconds, Pulsar's
``DateFormatter``), ``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id``, ``X-Pulsar-replicated-from``,
``X-Pulsar-partition-key`` (+ ``-b64-encoded``), ``X-Pulsar-Base64-ordering-key``,
``X-Pulsar-Base64-schema-version-b64encoded``, ``X-Pulsar-num-batch-message`` and ``X-Pulsar-batch-size`` (the
stored payload's bytes) for a batch, ``X-Pulsar-null-value``, ``X-Pulsar-Is-Encrypted``, the chunk fields,
``X-Pulsar-highest-sequence-id``, ``X-Pulsar-marker-type``, ``X-Pulsar-Broker-Entry-METADATA-timestamp`` /
``-index``, and one ``X-Pulsar-PROPERTY-<key>`` per message property (a property whose key or value cannot be
an HTTP header, e.g. holds a line break, is left out).

The body is the payload uncompressed (a batch: the whole batch payload, items with their
SingleMessageMetadata, as Pulsar sends it); payloads declaring more than :data:`MAX_PEEK_BYTES` uncompressed
are refused with 412 rather than inflated.
"""

from __future__ import annotations

import base64
import datetime
import re

from aiohttp import web

from quasar.broker.errors import NotAllowedError
from quasar.ledger.position import Position
from quasar.protocol import CompressionType, decompress, parse_headers_and_payload

__all__ = ["MAX_PEEK_BYTES", "peek_response"]

MAX_PEEK_BYTES = 64 * 1024 * 1024
"""Largest uncompressed payload a peek inflates (bytes)."""


def _date(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP header name (RFC 9110 token)."""


def _header_safe(text: str) -> bool:
    return text.isprintable() and text.isascii()


def peek_response(position: Position, data: bytes | memoryview) -> web.Response:
    """The peek answer for the entry ``data`` stored at ``position`` (module docstring). Raises
    NotAllowedError (412) for a payload past :data:`MAX_PEEK_BYTES`, ``MalformedFrameError`` or the codec's
    error (500) for an entry that does not parse."""
    parsed = parse_headers_and_payload(data)
    meta = parsed.metadata
    headers = {
        "X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}",
        "X-Pulsar-publish-time": _date(meta.publish_time),
        "X-Pulsar-producer-name": meta.producer_name,
        "X-Pulsar-sequence-id": str(meta.sequence_id),
        "X-Pulsar-Is-Encrypted": "true" if len(meta.encryption_keys) else "false",
    }
    if not _header_safe(meta.producer_name):
        del headers["X-Pulsar-producer-name"]
    optional: dict[str, object] = {
        "X-Pulsar-event-time": _date(meta.event_time) if meta.event_time else None,
        "X-Pulsar-deliver-at-time": _date(meta.deliver_at_time) if meta.HasField("deliver_at_time") else None,
        "X-Pulsar-replicated-from": meta.replicated_from if meta.HasField("replicated_from") else None,
        "X-Pulsar-partition-key": meta.partition_key if meta.HasField("partition_key") else None,
        "X-Pulsar-partition-key-b64-encoded": "true" if meta.partition_key_b64_encoded else None,
        "X-Pulsar-Base64-ordering-key": (
            base64.b64encode(meta.ordering_key).decode() if meta.HasField("ordering_key") else None
        ),
        "X-Pulsar-Base64-schema-version-b64encoded": (
            base64.b64encode(meta.schema_version).decode() if meta.HasField("schema_version") else None
        ),
        "X-Pulsar-null-value": "true" if meta.null_value else None,
        "X-Pulsar-uuid": meta.uuid if meta.HasField("uuid") else None,
        "X-Pulsar-num-chunks-from-msg": meta.num_chunks_from_msg
        if meta.HasField("num_chunks_from_msg")
        else None,
        "X-Pulsar-total-chunk-msg-size": (
            meta.total_chunk_msg_size if meta.HasField("total_chunk_msg_size") else None
        ),
        "X-Pulsar-chunk-id": meta.chunk_id if meta.HasField("chunk_id") else None,
        "X-Pulsar-highest-sequence-id": meta.highest_sequence_id if meta.highest_sequence_id else None,
        "X-Pulsar-marker-type": meta.marker_type if meta.HasField("marker_type") else None,
    }
    if meta.HasField("num_messages_in_batch"):
        optional["X-Pulsar-num-batch-message"] = meta.num_messages_in_batch
        optional["X-Pulsar-batch-size"] = len(parsed.payload)
    bem = parsed.broker_entry_metadata
    if bem is not None:
        optional["X-Pulsar-Broker-Entry-METADATA-timestamp"] = (
            bem.broker_timestamp if bem.HasField("broker_timestamp") else None
        )
        optional["X-Pulsar-Broker-Entry-METADATA-index"] = bem.index if bem.HasField("index") else None
    for key, value in optional.items():
        if value is not None and _header_safe(str(value)):
            headers[key] = str(value)
    for prop in meta.properties:
        if _TOKEN.fullmatch(prop.key) and _header_safe(prop.value):
            headers[f"X-Pulsar-PROPERTY-{prop.key}"] = prop.value
    payload: bytes | memoryview = parsed.payload
    if CompressionType(meta.compression) is not CompressionType.NONE:
        if meta.uncompressed_size > MAX_PEEK_BYTES:
            raise NotAllowedError(
                f"message payload of {meta.uncompressed_size} bytes uncompressed is past the peek bound"
                f" ({MAX_PEEK_BYTES})"
            )
        payload = decompress(meta.compression, payload, meta.uncompressed_size)
    return web.Response(body=bytes(payload), headers=headers, content_type="application/octet-stream")
