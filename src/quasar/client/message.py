"""Messages: what a producer sends (:class:`OutgoingMessage`) and what a consumer hands out (:class:`Message`).

:func:`encode_single_metadata` writes a ``SingleMessageMetadata`` (reference/pulsar-protocol.md §7.2) by hand,
field by field in field-number order exactly as protobuf would, because it runs once per batched message on the
publish hot path. The fields written (tag bytes in hex)::

    | Field              | #  | Tag  | Wire type | When                              |
    |--------------------|----|------|-----------|-----------------------------------|
    | properties         | 1  | 0a   | bytes     | each property: KeyValue{1 key, 2 value} |
    | partition_key      | 2  | 12   | bytes     | key given                         |
    | payload_size       | 3  | 18   | varint    | always (required)                 |
    | event_time         | 5  | 28   | varint    | event_timestamp given (ms)        |
    | ordering_key       | 7  | 3a   | bytes     | ordering_key given                |
    | sequence_id        | 8  | 40   | varint    | always (as the C++ producer)      |

For 3 items "m0".."m2" this yields ``18 02 40 00`` etc., the bytes the C++ client sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quasar.protocol import MessageId

__all__ = ["Message", "OutgoingMessage", "encode_single_metadata", "encode_varint"]


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (uint64)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + encode_varint(len(data)) + data


def encode_single_metadata(
    payload_size: int,
    sequence_id: int,
    *,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    event_time: int | None = None,
    ordering_key: bytes | None = None,
) -> bytes:
    """Serialized ``SingleMessageMetadata`` (see the module docstring), byte-identical to protobuf's output."""
    if properties is None and partition_key is None and event_time is None and ordering_key is None:
        return b"\x18" + encode_varint(payload_size) + b"\x40" + encode_varint(sequence_id)
    parts: list[bytes] = []
    if properties:
        for key, value in properties.items():
            kv = _length_delimited(0x0A, key.encode()) + _length_delimited(0x12, value.encode())
            parts.append(_length_delimited(0x0A, kv))
    if partition_key is not None:
        parts.append(_length_delimited(0x12, partition_key.encode()))
    parts.append(b"\x18" + encode_varint(payload_size))
    if event_time is not None:
        parts.append(b"\x28" + encode_varint(event_time))
    if ordering_key is not None:
        parts.append(_length_delimited(0x3A, ordering_key))
    parts.append(b"\x40" + encode_varint(sequence_id))
    return b"".join(parts)


class OutgoingMessage:
    """A message given to ``send`` (validated by :func:`make_outgoing`).

    Attributes:
        payload: the content bytes. properties: str -> str or None. partition_key: routing / Key_Shared key.
        ordering_key: bytes. event_timestamp: ms or None. sequence_id: user-chosen sequence id or None.
        deliver_at: absolute delivery time in ms or None (such messages are never batched).
        replication_clusters: list of cluster names or None.
    """

    __slots__ = (
        "deliver_at",
        "event_timestamp",
        "ordering_key",
        "partition_key",
        "payload",
        "properties",
        "replication_clusters",
        "sequence_id",
    )

    def __init__(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | None = None,
        event_timestamp: int | None = None,
        sequence_id: int | None = None,
        deliver_at: int | None = None,
        replication_clusters: list[str] | None = None,
    ) -> None:
        self.payload = payload
        self.properties = properties
        self.partition_key = partition_key
        self.ordering_key = ordering_key
        self.event_timestamp = event_timestamp
        self.sequence_id = sequence_id
        self.deliver_at = deliver_at
        self.replication_clusters = replication_clusters

    def data(self) -> bytes:
        """The payload (same accessor as :class:`Message`, for custom routers)."""
        return self.payload

    def has_key(self) -> bool:
        """True when a partition key is set."""
        return bool(self.partition_key)


def make_outgoing(
    content: Any,
    properties: Any = None,
    partition_key: Any = None,
    ordering_key: Any = None,
    sequence_id: Any = None,
    replication_clusters: Any = None,
    disable_replication: Any = False,
    event_timestamp: Any = None,
    deliver_at: Any = None,
    deliver_after: Any = None,
) -> OutgoingMessage:
    """Validate the arguments of ``send`` (names of ``pulsar.Producer.send``) and build an OutgoingMessage.

    Args:
        content: bytes / bytearray / memoryview (a str is UTF-8 encoded, as ``pulsar`` does for StringSchema).
        deliver_at: absolute time, ms since the epoch; deliver_after: ``datetime.timedelta`` or ms from now.

    Raises:
        TypeError / ValueError: naming the parameter.
    """
    if isinstance(content, str):
        payload = content.encode()
    elif isinstance(content, bytes):
        payload = content
    elif isinstance(content, (bytearray, memoryview)):
        payload = bytes(content)
    else:
        raise TypeError(f"content must be bytes, got {type(content).__name__}")
    if properties is not None:
        if not isinstance(properties, Mapping):
            raise TypeError(f"properties must be a dict of str to str, got {type(properties).__name__}")
        for key, value in properties.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"properties must map str to str, got {key!r}: {value!r}")
        if not properties:
            properties = None
    if partition_key is not None and not isinstance(partition_key, str):
        raise TypeError(f"partition_key must be a str, got {type(partition_key).__name__}")
    if ordering_key is not None:
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        elif not isinstance(ordering_key, bytes):
            raise TypeError(f"ordering_key must be bytes or str, got {type(ordering_key).__name__}")
    for name, value in (("sequence_id", sequence_id), ("event_timestamp", event_timestamp)):
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
    if deliver_after is not None:
        import datetime
        import time

        if isinstance(deliver_after, datetime.timedelta):
            delay_ms = int(deliver_after.total_seconds() * 1000)
        elif isinstance(deliver_after, int) and not isinstance(deliver_after, bool):
            delay_ms = deliver_after
        else:
            raise TypeError(
                f"deliver_after must be a timedelta or int ms, got {type(deliver_after).__name__}"
            )
        deliver_at = int(time.time() * 1000) + delay_ms
    if deliver_at is not None and (not isinstance(deliver_at, int) or isinstance(deliver_at, bool)):
        raise TypeError(f"deliver_at must be an int (ms since the epoch), got {type(deliver_at).__name__}")
    if replication_clusters is not None:
        if not isinstance(replication_clusters, (list, tuple)) or not all(
            isinstance(c, str) for c in replication_clusters
        ):
            raise TypeError("replication_clusters must be a list of str")
        replication_clusters = list(replication_clusters)
    if disable_replication:
        replication_clusters = ["__local__"]
    return OutgoingMessage(
        payload, properties, partition_key, ordering_key, event_timestamp, sequence_id, deliver_at,
        replication_clusters,
    )  # fmt: skip


class Message:
    """A received message (accessors shaped like ``pulsar.Message``)."""

    __slots__ = (
        "_consumer",
        "_data",
        "_event_timestamp",
        "_message_id",
        "_ordering_key",
        "_partition_key",
        "_producer_name",
        "_properties",
        "_publish_timestamp",
        "_redelivery_count",
        "_schema_version",
        "_sequence_id",
        "_topic",
    )

    def __init__(
        self,
        data: bytes,
        message_id: MessageId,
        topic: str,
        *,
        properties: dict[str, str],
        partition_key: str | None,
        ordering_key: bytes | None,
        publish_timestamp: int,
        event_timestamp: int,
        redelivery_count: int,
        producer_name: str,
        sequence_id: int,
        schema_version: bytes = b"",
        consumer: Any = None,
    ) -> None:
        self._data = data
        self._message_id = message_id
        self._topic = topic
        self._properties = properties
        self._partition_key = partition_key
        self._ordering_key = ordering_key
        self._publish_timestamp = publish_timestamp
        self._event_timestamp = event_timestamp
        self._redelivery_count = redelivery_count
        self._producer_name = producer_name
        self._sequence_id = sequence_id
        self._schema_version = schema_version
        self._consumer = consumer

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> bytes:
        """The payload (bytes schema)."""
        return self._data

    def properties(self) -> dict[str, str]:
        """User properties."""
        return self._properties

    def partition_key(self) -> str:
        """Partition key, ``""`` if none (as ``pulsar.Message``)."""
        return self._partition_key or ""

    def ordering_key(self) -> bytes:
        """Ordering key, ``b""`` if none."""
        return self._ordering_key or b""

    def publish_timestamp(self) -> int:
        """Publish time, ms since the epoch (set by the producer)."""
        return self._publish_timestamp

    def event_timestamp(self) -> int:
        """Event time in ms, 0 when not set."""
        return self._event_timestamp

    def message_id(self) -> MessageId:
        """The message id (ledger, entry, partition, batch index)."""
        return self._message_id

    def topic_name(self) -> str:
        """Full name of the topic (partition) it came from."""
        return self._topic

    def redelivery_count(self) -> int:
        """How many times the broker redelivered it."""
        return self._redelivery_count

    def producer_name(self) -> str:
        """Name of the producer that published it."""
        return self._producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id of this message."""
        return self._sequence_id

    def schema_version(self) -> bytes:
        """Schema version from the metadata (``b""`` when none)."""
        return self._schema_version

    def __repr__(self) -> str:
        return f"Message(id={self._message_id}, topic={self._topic!r}, {len(self._data)} bytes)"
