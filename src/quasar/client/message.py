"""Messages: what a producer sends (:class:`OutgoingMessage`) and what a consumer hands out (:class:`Message`).

:func:`encode_single_metadata` writes a ``SingleMessageMetadata`` (reference/pulsar-protocol.md §7.2) field by
field in field-number order exactly as protobuf would (compiled: ``quasar.client._codec_c``), because it runs
once per batched message on the publish hot path. The fields written (tag bytes in hex)::

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

import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import DecodeError

from quasar.protocol import MessageId, pb

from .codec import encode_single_metadata as _encode_single
from .codec import split_batch as _split_batch
from .config import check_properties
from .errors import InvalidMessageError
from .op_send import message_id as _message_id

__all__ = [
    "Message",
    "OutgoingMessage",
    "ReceivedEntry",
    "encode_single_metadata",
    "encode_varint",
    "unpack_batch",
]


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


def encode_single_metadata(
    payload_size: int,
    sequence_id: int,
    *,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    event_time: int | None = None,
    ordering_key: bytes | None = None,
) -> bytes:
    """Serialized ``SingleMessageMetadata`` (see the module docstring), byte-identical to protobuf's output
    (``encode_single_metadata`` of the compiled codec, twin ``quasar.client._codec_py``).

    Raises:
        TypeError / ValueError: a value of the wrong type or out of its field's range.
    """
    return _encode_single(payload_size, sequence_id, properties, partition_key, event_time, ordering_key)


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
    payload = _payload(content)
    if properties is not None:
        check_properties("properties", properties)
        if not properties:
            properties = None
    if partition_key is not None and not isinstance(partition_key, str):
        raise TypeError(f"partition_key must be a str, got {type(partition_key).__name__}")
    if ordering_key is not None:
        ordering_key = _ordering_key(ordering_key)
    for name, value in (("sequence_id", sequence_id), ("event_timestamp", event_timestamp)):
        if value is not None:
            _check_non_negative_int(name, value)
    if deliver_after is not None:
        deliver_at = _deliver_at_after(deliver_after)
    if deliver_at is not None and (not isinstance(deliver_at, int) or isinstance(deliver_at, bool)):
        raise TypeError(f"deliver_at must be an int (ms since the epoch), got {type(deliver_at).__name__}")
    if replication_clusters is not None:
        replication_clusters = _cluster_list(replication_clusters)
    if disable_replication:
        replication_clusters = ["__local__"]
    return OutgoingMessage(
        payload, properties, partition_key, ordering_key, event_timestamp, sequence_id, deliver_at,
        replication_clusters,
    )  # fmt: skip


def _payload(content: Any) -> bytes:
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, bytes):
        return content
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)
    raise TypeError(f"content must be bytes, got {type(content).__name__}")


def _ordering_key(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if not isinstance(value, bytes):
        raise TypeError(f"ordering_key must be bytes or str, got {type(value).__name__}")
    return value


def _check_non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _deliver_at_after(deliver_after: Any) -> int:
    """``deliver_after`` (a timedelta or int ms from now) as an absolute time in ms since the epoch."""
    if isinstance(deliver_after, datetime.timedelta):
        delay_ms = int(deliver_after.total_seconds() * 1000)
    elif isinstance(deliver_after, int) and not isinstance(deliver_after, bool):
        delay_ms = deliver_after
    else:
        raise TypeError(f"deliver_after must be a timedelta or int ms, got {type(deliver_after).__name__}")
    return int(time.time() * 1000) + delay_ms


def _cluster_list(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise TypeError("replication_clusters must be a list of str")
    return list(value)


class ReceivedEntry:
    """What the messages of one received entry share (one per MESSAGE frame; the incoming side's own record).

    Attributes:
        ledger_id, entry_id: the entry's position (signed int64). key: ``(ledger_id, entry_id)``, the key of
            the ack trackers. partition: partition index, -1 if the topic is not partitioned. batch_size:
            items of a batched entry, 0 when not batched. topic: full topic (partition) name. metadata: the
            entry's ``MessageMetadata``. redelivery_count: from CommandMessage. consumer: the single-topic
            consumer that received it (acks go there). flow: that consumer's flow control, told when a message
            is handed out (:meth:`~quasar.client.consumer_flow.FlowControl.handed_out`).
    """

    __slots__ = (
        "_metadata",
        "batch_size",
        "consumer",
        "entry_id",
        "flow",
        "key",
        "ledger_id",
        "partition",
        "redelivery_count",
        "topic",
    )

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        partition: int,
        batch_size: int,
        topic: str,
        metadata: pb.MessageMetadata | bytes,
        redelivery_count: int,
        consumer: Any,
        flow: Any = None,
    ) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.key = (ledger_id, entry_id)
        self.partition = partition
        self.batch_size = batch_size
        self.topic = topic
        self._metadata = metadata
        self.redelivery_count = redelivery_count
        self.consumer = consumer
        self.flow = flow

    @property
    def metadata(self) -> pb.MessageMetadata:
        """The entry's ``MessageMetadata`` (parsed on the first read when it was given as bytes)."""
        metadata = self._metadata
        if isinstance(metadata, bytes):
            metadata = self._metadata = _parse_metadata(metadata)
        return metadata


class Message:
    """A received message (accessors shaped like ``pulsar.Message``).

    Built by the consumer, one per delivered item: ``Message(data, entry, index, single)`` where ``entry`` is
    the shared :class:`ReceivedEntry`, ``index`` the batch index (-1 when not batched) and ``single`` the
    item's serialized ``SingleMessageMetadata`` (bytes, parsed on the first accessor that needs it), the parsed
    message, or None when not batched. The :class:`MessageId` is built on first use and kept.

    Attributes (Quasar's own, beyond ``pulsar.Message``; read-only by convention):
        entry: the :class:`ReceivedEntry` (position, metadata, and the consumer that received it: acks go to
            ``entry.consumer``).
        batch_index: index of the message in its batched entry, -1 when the entry is not batched.
    """

    __slots__ = ("_data", "_mid", "_single", "batch_index", "entry")

    _mid: MessageId

    def __init__(self, data: bytes, entry: ReceivedEntry, index: int = -1, single: Any = None) -> None:
        self._data = data
        self.entry = entry
        self.batch_index = index
        self._single = single  # _mid stays unset until message_id() (one store less per message)

    def _single_metadata(self) -> pb.SingleMessageMetadata:
        """The item's parsed ``SingleMessageMetadata`` (None when not batched)."""
        single = self._single
        if single.__class__ is bytes:
            single = self._single = _parse_single(single)
        parsed: pb.SingleMessageMetadata = single
        return parsed

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> bytes:
        """The payload (bytes schema)."""
        return self._data

    def properties(self) -> dict[str, str]:
        """User properties (a new dict on every call)."""
        source = self._single_metadata() if self.batch_index >= 0 else self.entry.metadata
        return {kv.key: kv.value for kv in source.properties} if source.properties else {}

    def partition_key(self) -> str:
        """Partition key, ``""`` if none (as ``pulsar.Message``)."""
        source = self._single_metadata() if self.batch_index >= 0 else self.entry.metadata
        return source.partition_key

    def ordering_key(self) -> bytes:
        """Ordering key, ``b""`` if none."""
        source = self._single_metadata() if self.batch_index >= 0 else self.entry.metadata
        return source.ordering_key

    def publish_timestamp(self) -> int:
        """Publish time, ms since the epoch (set by the producer)."""
        return self.entry.metadata.publish_time

    def event_timestamp(self) -> int:
        """Event time in ms, 0 when not set."""
        source = self._single_metadata() if self.batch_index >= 0 else self.entry.metadata
        return source.event_time

    def message_id(self) -> MessageId:
        """The message id (ledger, entry, partition, batch index)."""
        try:
            return self._mid
        except AttributeError:
            entry = self.entry
            index = self.batch_index
            size = entry.batch_size if index >= 0 else 0
            mid = self._mid = _message_id(entry.ledger_id, entry.entry_id, entry.partition, index, size)
            return mid

    def topic_name(self) -> str:
        """Full name of the topic (partition) it came from."""
        return self.entry.topic

    def redelivery_count(self) -> int:
        """How many times the broker redelivered it."""
        return self.entry.redelivery_count

    def producer_name(self) -> str:
        """Name of the producer that published it."""
        return self.entry.metadata.producer_name

    def sequence_id(self) -> int:
        """The producer's sequence id of this message (a batch item without its own: entry's + index)."""
        index = self.batch_index
        if index >= 0:
            single = self._single_metadata()
            if single.HasField("sequence_id"):
                return single.sequence_id
            return self.entry.metadata.sequence_id + index
        return self.entry.metadata.sequence_id

    def schema_version(self) -> bytes:
        """Schema version from the metadata (``b""`` when none)."""
        return self.entry.metadata.schema_version

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, topic={self.entry.topic!r}, {len(self._data)} bytes)"


_parse_single = pb.SingleMessageMetadata.FromString
_parse_metadata = pb.MessageMetadata.FromString


def unpack_batch(
    payload: bytes | memoryview,
    entry: ReceivedEntry,
    keep: Callable[[int], bool] | None = None,
    offset: int = 0,
) -> tuple[list[Message], int]:
    """Split an uncompressed batch payload (``[u32 size][SingleMessageMetadata][item]`` x ``entry.batch_size``,
    reference/pulsar-protocol.md §7.2) into Messages; items for which ``keep(index)`` is False are skipped.
    The batch is ``payload[offset:]`` (so a frame's buffer is read without copying it first); anything but
    bytes is copied into bytes first.

    The consumer's hot path, compiled (``split_batch`` of ``quasar.client._codec_c``, twin ``_codec_py``): the
    Messages are built there without ``__init__``. A metadata that holds only ``payload_size`` and
    ``sequence_id`` (what the C++, Java and Quasar producers write without properties / keys / event time) is
    kept as bytes, parsed only if an accessor needs it; any other metadata is parsed with protobuf here.

    Returns:
        ``(messages, skipped)``.

    Raises:
        InvalidMessageError: a size runs past the payload, a metadata does not parse, or bytes are left over.
    """
    if payload.__class__ is not bytes:
        payload = bytes(payload)
    try:
        messages: list[Message]
        messages, skipped = _split_batch(
            payload, offset, entry.batch_size, keep, entry, Message, _parse_single
        )
    except (ValueError, DecodeError) as exc:
        raise InvalidMessageError(f"malformed batch payload: {exc}") from None
    return messages, skipped
