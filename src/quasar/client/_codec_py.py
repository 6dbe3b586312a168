"""The client's per-message codec, pure Python: the twin of the compiled ``quasar.client._codec_c`` (same API,
same results, same exception classes; DESIGN.md "Compiled hot paths"). :mod:`quasar.client.codec` picks one.

What it does (reference/pulsar-protocol.md §1, §7; every layout below is what protobuf and the C++ client write,
fields in field-number order):

* :func:`encode_metadata`: a serialized ``MessageMetadata``; :func:`encode_send`: a whole SEND frame
  ``[totalSize][commandSize][BaseCommand{type SEND, send}][0x0e01][crc32c][metadataSize][metadata][payload]``
  (C++ ``Commands::newSend``), its CRC-32C over ``[metadataSize][metadata][payload]``.
* :class:`BatchContainer`: the open batch of a producer (Java ``BatchMessageContainerImpl``): items
  ``[u32 size][SingleMessageMetadata][payload]`` appended to one buffer, one waiter per item, seed 000's room rule.
* :func:`encode_ack`: a grouped ACK frame of many entries (C++ ``Commands::newMultiMessageAck``).

Errors: a value of the wrong type raises TypeError; an integer outside its protobuf field's range, or a
malformed batch, raises ValueError (a UnicodeEncodeError, a ValueError, for a str that is not encodable).
"""

from __future__ import annotations

import struct
from typing import Any

from quasar.protocol import crc32c

__all__ = [
    "BatchContainer",
    "encode_ack",
    "encode_metadata",
    "encode_send",
    "encode_single_metadata",
]

_U32 = struct.Struct(">I")
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_COMPRESSION_MAX = 4  # CompressionType: NONE 0, LZ4 1, ZLIB 2, ZSTD 3, SNAPPY 4


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is out of range [{low}, {high}]")
    return int(value)


def _varint(value: int) -> bytes:
    """Base-128 varint of a value in [-2**63, 2**64): negatives as their 64-bit two's complement (protobuf)."""
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _str(name: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode()


def _bytes(name: str, value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    return value


def _contiguous(name: str, value: Any) -> bytes:
    """The raw bytes of a C-contiguous bytes-like object (BufferError when it is not contiguous)."""
    if isinstance(value, bytes):
        return value
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}") from None
    if not view.c_contiguous:
        raise BufferError(f"{name} is not C-contiguous")
    return view.tobytes()


def _delimited(field: int, data: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(data)) + data


def _properties(field: int, properties: Any) -> list[bytes]:
    if not isinstance(properties, dict):
        properties = dict(properties)
    parts = []
    for key, value in properties.items():
        kv = _delimited(1, _str("property key", key)) + _delimited(2, _str("property value", value))
        parts.append(_delimited(field, kv))
    return parts


def _numbers_and_keys(
    compression: int | None,
    uncompressed_size: int | None,
    num_messages_in_batch: int | None,
    event_time: int | None,
    schema_version: bytes | None,
    ordering_key: bytes | None,
    deliver_at_time: int | None,
    highest_sequence_id: int | None,
) -> list[bytes]:
    """MessageMetadata fields 8 to 24 (see :func:`encode_metadata`)."""
    parts = []
    if compression is not None:
        parts.append(b"\x40" + _varint(_check_int("compression", compression, 0, _COMPRESSION_MAX)))
    if uncompressed_size is not None:
        parts.append(b"\x48" + _varint(_check_int("uncompressed_size", uncompressed_size, 0, _U32_MAX)))
    if num_messages_in_batch is not None:
        value = _check_int("num_messages_in_batch", num_messages_in_batch, _I32_MIN, _I32_MAX)
        parts.append(b"\x58" + _varint(value))
    if event_time is not None:
        parts.append(b"\x60" + _varint(_check_int("event_time", event_time, 0, _U64_MAX)))
    if schema_version is not None and _bytes("schema_version", schema_version):
        parts.append(_delimited(16, schema_version))
    if ordering_key is not None:
        parts.append(_delimited(18, _bytes("ordering_key", ordering_key)))
    if deliver_at_time is not None:
        value = _check_int("deliver_at_time", deliver_at_time, _I64_MIN, _I64_MAX)
        parts.append(_tag(19, 0) + _varint(value))
    if highest_sequence_id is not None:
        value = _check_int("highest_sequence_id", highest_sequence_id, 0, _U64_MAX)
        parts.append(_tag(24, 0) + _varint(value))
    return parts


def encode_metadata(
    producer_name: str,
    sequence_id: int,
    publish_time: int,
    properties: Any,
    partition_key: str | None,
    replicate_to: list[str] | None,
    compression: int | None,
    uncompressed_size: int | None,
    num_messages_in_batch: int | None,
    event_time: int | None,
    schema_version: bytes | None,
    ordering_key: bytes | None,
    deliver_at_time: int | None,
    highest_sequence_id: int | None,
    uuid: str | None,
    num_chunks_from_msg: int | None,
    total_chunk_msg_size: int | None,
    chunk_id: int | None,
) -> bytes:
    """A serialized ``MessageMetadata`` (PulsarApi.proto), byte-identical to protobuf's ``SerializeToString``.

    Every argument after ``publish_time`` is optional: None leaves the field out (``properties`` may also be
    empty, ``schema_version`` ``b""``: left out too). Ranges (the proto types): ``sequence_id``,
    ``publish_time``, ``event_time``, ``highest_sequence_id`` uint64; ``uncompressed_size`` uint32;
    ``num_messages_in_batch``, ``num_chunks_from_msg``, ``total_chunk_msg_size``, ``chunk_id`` int32;
    ``deliver_at_time`` int64; ``compression`` 0..4. ``properties``: a dict (or anything ``dict()`` takes) of
    str to str; ``replicate_to``: a list of str.

    Raises:
        TypeError: a value of the wrong type. ValueError: an int out of range, or a str not encodable as UTF-8.
    """
    parts = [
        _delimited(1, _str("producer_name", producer_name)),
        b"\x10" + _varint(_check_int("sequence_id", sequence_id, 0, _U64_MAX)),
        b"\x18" + _varint(_check_int("publish_time", publish_time, 0, _U64_MAX)),
    ]
    if properties is not None:
        parts += _properties(4, properties)
    if partition_key is not None:
        parts.append(_delimited(6, _str("partition_key", partition_key)))
    if replicate_to is not None:
        if not isinstance(replicate_to, list):
            raise TypeError(f"replicate_to must be a list, got {type(replicate_to).__name__}")
        parts += [_delimited(7, _str("replicate_to item", cluster)) for cluster in replicate_to]
    parts += _numbers_and_keys(
        compression, uncompressed_size, num_messages_in_batch, event_time, schema_version, ordering_key,
        deliver_at_time, highest_sequence_id,
    )  # fmt: skip
    if uuid is not None:
        parts.append(_delimited(26, _str("uuid", uuid)))
    for field, name, value in (
        (27, "num_chunks_from_msg", num_chunks_from_msg),
        (28, "total_chunk_msg_size", total_chunk_msg_size),
        (29, "chunk_id", chunk_id),
    ):
        if value is not None:
            parts.append(_tag(field, 0) + _varint(_check_int(name, value, _I32_MIN, _I32_MAX)))
    return b"".join(parts)


def encode_single_metadata(
    payload_size: int,
    sequence_id: int,
    properties: Any,
    partition_key: str | None,
    event_time: int | None,
    ordering_key: bytes | None,
) -> bytes:
    """A serialized ``SingleMessageMetadata`` of a batch item, byte-identical to protobuf's output: properties
    (1), partition_key (2), payload_size (3, int32), event_time (5, uint64), ordering_key (7), sequence_id
    (8, uint64, always written, as the C++ producer). None leaves an optional field out.

    Raises:
        TypeError / ValueError: as :func:`encode_metadata`.
    """
    size = _check_int("payload_size", payload_size, _I32_MIN, _I32_MAX)
    sid = _check_int("sequence_id", sequence_id, 0, _U64_MAX)
    parts = _properties(1, properties) if properties is not None else []
    if partition_key is not None:
        parts.append(_delimited(2, _str("partition_key", partition_key)))
    parts.append(b"\x18" + _varint(size))
    if event_time is not None:
        parts.append(b"\x28" + _varint(_check_int("event_time", event_time, 0, _U64_MAX)))
    if ordering_key is not None:
        parts.append(_delimited(7, _bytes("ordering_key", ordering_key)))
    parts.append(b"\x40" + _varint(sid))
    return b"".join(parts)


def encode_send(
    producer_id: int,
    sequence_id: int,
    num_messages: int | None,
    highest_sequence_id: int | None,
    is_chunk: bool,
    metadata: bytes,
    payload: bytes | bytearray | memoryview,
) -> bytes:
    """A whole SEND frame with checksum (see the module docstring); byte-identical to
    ``commands.new_send(producer_id, sequence_id, encode_headers_and_payload(metadata, payload), num_messages,
    highest_sequence_id=..., is_chunk=...)``.

    Args:
        producer_id, sequence_id: uint64. num_messages: int32 or None (batches only, as the C++ client).
        highest_sequence_id: uint64 or None. is_chunk: written only when true. metadata: a serialized
            MessageMetadata (:func:`encode_metadata`). payload: the (possibly compressed) payload, any
            C-contiguous bytes-like object (e.g. a memoryview of a chunk).

    Raises:
        TypeError / ValueError: as :func:`encode_metadata`; ValueError when the frame exceeds 4 GiB;
        BufferError: ``payload`` is not C-contiguous.
    """
    send = [
        b"\x08" + _varint(_check_int("producer_id", producer_id, 0, _U64_MAX)),
        b"\x10" + _varint(_check_int("sequence_id", sequence_id, 0, _U64_MAX)),
    ]
    if num_messages is not None:
        send.append(b"\x18" + _varint(_check_int("num_messages", num_messages, _I32_MIN, _I32_MAX)))
    if highest_sequence_id is not None:
        value = _check_int("highest_sequence_id", highest_sequence_id, 0, _U64_MAX)
        send.append(b"\x30" + _varint(value))
    if is_chunk:
        send.append(b"\x38\x01")
    metadata = _bytes("metadata", metadata)
    payload = _contiguous("payload", payload)
    body = b"".join(send)
    command = b"\x08\x06\x32" + _varint(len(body)) + body
    size_and_metadata = _U32.pack(len(metadata)) + metadata
    total = 4 + len(command) + 10 + len(metadata) + len(payload)
    if total > _U32_MAX:
        raise ValueError(f"frame of {total} bytes does not fit the u32 totalSize field")
    crc = crc32c(payload, crc32c(size_and_metadata))
    head = _U32.pack(total) + _U32.pack(len(command)) + command + b"\x0e\x01" + _U32.pack(crc)
    return b"".join((head, size_and_metadata, payload))


def encode_ack(consumer_id: int, ack_type: int, entries: list[tuple[int, int]]) -> bytes:
    """A whole ACK frame ``[totalSize][commandSize][BaseCommand{type ACK, ack{consumer_id, ack_type, message_id
    {ledgerId, entryId} per entry}}]``, byte-identical to ``commands.new_ack(consumer_id, entries, ack_type)``
    (no ack sets, request id or validation error: the C++ client's grouped ACK).

    Args:
        consumer_id: uint64. ack_type: 0 Individual, 1 Cumulative. entries: a list of ``(ledger_id, entry_id)``
            tuples, each id an int64 (a negative one goes out as its uint64 two's complement) or a uint64.

    Raises:
        TypeError: not a list of 2-tuples of ints. ValueError: a value out of range.
    """
    body = [
        b"\x08" + _varint(_check_int("consumer_id", consumer_id, 0, _U64_MAX)),
        b"\x10" + _varint(_check_int("ack_type", ack_type, 0, 1)),
    ]
    if not isinstance(entries, list):
        raise TypeError(f"entries must be a list, got {type(entries).__name__}")
    for item in entries:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("each entry must be a (ledger_id, entry_id) tuple")
        ledger_id = _check_int("ledger_id", item[0], _I64_MIN, _U64_MAX)
        entry_id = _check_int("entry_id", item[1], _I64_MIN, _U64_MAX)
        ids = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
        body.append(b"\x1a" + _varint(len(ids)) + ids)
    ack = b"".join(body)
    command = b"\x08\x0a\x52" + _varint(len(ack)) + ack
    if len(command) + 4 > _U32_MAX:
        raise ValueError("ACK frame does not fit the u32 totalSize field")
    return _U32.pack(len(command) + 4) + _U32.pack(len(command)) + command


class BatchContainer:
    """The open batch of a producer (the base of :class:`quasar.client.batch.BatchMessageContainer`).

    Args:
        max_messages: ``batching_max_messages`` (<= 0: unlimited).
        max_bytes: ``batching_max_allowed_size_in_bytes`` (<= 0: bounded by ``max_message_size`` only).
        max_message_size: the broker's max message size in bytes.

    Room rule (seed 000 ``haveEnoughSpace``, sizes are payload bytes)::

        size + current_bytes <= (max_bytes if max_bytes > 0 else max_message_size)
        and (max_messages <= 0 or num_messages < max_messages)

    Attributes (read-only): num_messages, current_bytes (payload bytes), sequence_id / highest_sequence_id
    (first and last item's, -1 when empty), max_messages, max_bytes, max_message_size, size_limit.
    """

    __slots__ = (
        "_first",
        "_parts",
        "_waiters",
        "current_bytes",
        "highest_sequence_id",
        "max_bytes",
        "max_message_size",
        "max_messages",
        "num_messages",
        "sequence_id",
        "size_limit",
    )  # fmt: skip

    def __init__(self, max_messages: int, max_bytes: int, max_message_size: int) -> None:
        self.max_messages = _check_int("max_messages", max_messages, _I64_MIN, _I64_MAX)
        self.max_bytes = _check_int("max_bytes", max_bytes, _I64_MIN, _I64_MAX)
        self.max_message_size = _check_int("max_message_size", max_message_size, _I64_MIN, _I64_MAX)
        self.size_limit = max_message_size if max_bytes <= 0 else max_bytes
        self._reset()

    def _reset(self) -> None:
        self._parts: list[bytes] = []
        self._waiters: list[Any] = []
        self._first: Any = None
        self.num_messages = 0
        self.current_bytes = 0
        self.sequence_id = -1
        self.highest_sequence_id = -1

    @property
    def is_empty(self) -> bool:
        """True when no message is waiting."""
        return self.num_messages == 0

    def has_enough_space(self, size: int) -> bool:
        """The room rule for a message of ``size`` payload bytes."""
        size = _check_int("size", size, _I64_MIN // 4, _I64_MAX // 4)
        return size + self.current_bytes <= self.size_limit and (
            self.max_messages <= 0 or self.num_messages < self.max_messages
        )

    def _append(self, single: bytes, payload: bytes, sequence_id: int, waiter: Any, first: Any) -> bool:
        self._parts += (_U32.pack(len(single)), single, payload)
        self._waiters.append(waiter)
        if not self.num_messages:
            self._first = first
            self.sequence_id = sequence_id
        self.highest_sequence_id = sequence_id
        self.num_messages += 1
        self.current_bytes += len(payload)
        return (0 < self.max_messages <= self.num_messages) or (0 < self.max_bytes <= self.current_bytes)

    def add(self, message: Any, sequence_id: int, waiter: Any) -> bool:
        """Append ``message`` (an object with ``payload`` (bytes), ``properties``, ``partition_key``,
        ``event_timestamp`` and ``ordering_key`` attributes, e.g. an OutgoingMessage) without a room check;
        returns True when the batch is full afterwards (``num_messages >= max_messages > 0`` or
        ``current_bytes >= max_bytes > 0``). ``waiter`` is kept for :meth:`take`.

        Raises:
            TypeError / ValueError: as :func:`encode_single_metadata` (nothing is added).
        """
        payload = _bytes("payload", message.payload)
        single = encode_single_metadata(
            len(payload),
            sequence_id,
            message.properties,
            message.partition_key,
            message.event_timestamp,
            message.ordering_key,
        )
        return self._append(single, payload, sequence_id, waiter, message)

    def add_plain(self, payload: bytes, sequence_id: int, waiter: Any, force: bool = False) -> bool | None:
        """Append a message that is only payload bytes (its SingleMessageMetadata is ``payload_size`` and
        ``sequence_id``), with the room check unless ``force``.

        Returns:
            None (nothing added) when the batch is not empty and the room rule refuses it (unless ``force``);
            else True when the batch is now full, False otherwise.

        Raises:
            TypeError: ``payload`` is not bytes. ValueError: ``sequence_id`` is not a uint64.
        """
        payload = _bytes("payload", payload)
        size = len(payload)
        single = encode_single_metadata(size, sequence_id, None, None, None, None)
        count = self.num_messages
        if (
            count
            and not force
            and (self.current_bytes + size > self.size_limit or 0 < self.max_messages <= count)
        ):
            return None
        return self._append(single, payload, sequence_id, waiter, None)

    def take(self) -> tuple[bytes, int, int, int, list[Any], Any]:
        """Close the batch: ``(payload, num_messages, sequence_id, highest_sequence_id, waiters, first)``, where
        ``first`` is the first item given to :meth:`add`, or None when it came through :meth:`add_plain`. The
        container is empty afterwards.

        Raises:
            ValueError: the container is empty.
        """
        if not self.num_messages:
            raise ValueError("cannot build an empty batch")
        taken = (
            b"".join(self._parts),
            self.num_messages,
            self.sequence_id,
            self.highest_sequence_id,
            self._waiters,
            self._first,
        )
        self._reset()
        return taken

    def discard(self) -> list[Any]:
        """Empty the container; returns the waiters of the dropped messages (to fail them)."""
        waiters = self._waiters
        self._reset()
        return waiters
