"""BatchMessageContainer: collects messages into one batched entry (Java ``BatchMessageContainerImpl``).

Room rule, seed 000 ``haveEnoughSpace`` (sizes in bytes of the message payload)::

    ((max_bytes <= 0 and size + current_bytes <= max_message_size)
     or (max_bytes > 0 and size + current_bytes <= max_bytes))
    and (max_messages <= 0 or num_messages < max_messages)

``add`` returns True when the batch is full afterwards (``num_messages >= max_messages`` or
``current_bytes >= max_bytes``) so the producer sends it at once. The built payload is the uncompressed batch
layout of reference/pulsar-protocol.md §7.2 (``[u32 size][SingleMessageMetadata][payload]`` per item, see
:mod:`quasar.protocol.metadata`); the producer compresses it as a whole.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from quasar.protocol import pb

from .errors import InvalidMessageError
from .message import OutgoingMessage, encode_single_metadata

__all__ = ["BatchMessageContainer", "BuiltBatch", "split_batch"]

_U32 = struct.Struct(">I")


@dataclass(slots=True)
class BuiltBatch:
    """A closed batch: the uncompressed payload and what the producer needs for the entry metadata.

    Attributes:
        payload: uncompressed batch payload bytes. num_messages: items.
        sequence_id / highest_sequence_id: first and last item's sequence ids.
        waiters: one per item, in order: None, an asyncio Future or a ``callback(error, message_id)``
            (see :mod:`quasar.client.op_send`).
        first: the first item (its partition key goes into the entry metadata, as the C++ producer).
    """

    payload: bytes
    num_messages: int
    sequence_id: int
    highest_sequence_id: int
    waiters: list[Any]
    first: OutgoingMessage


PLAIN = OutgoingMessage(b"")
"""Stands for a message given as bare payload bytes (no key, properties or times) as the batch's first item."""


class BatchMessageContainer:
    """Messages waiting to go out as one entry.

    Args:
        max_messages: ``batching_max_messages`` (<= 0 = unlimited).
        max_bytes: ``batching_max_allowed_size_in_bytes`` (<= 0 = bounded by ``max_message_size`` only).
        max_message_size: the broker's max message size in bytes (from CONNECTED).
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
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self.size_limit = max_message_size if max_bytes <= 0 else max_bytes
        self._reset()

    def _reset(self) -> None:
        self._parts: list[bytes] = []
        self._waiters: list[Any] = []
        self._first: OutgoingMessage | None = None
        self.num_messages = 0
        self.current_bytes = 0
        self.sequence_id = -1
        self.highest_sequence_id = -1

    @property
    def is_empty(self) -> bool:
        """True when no message is waiting."""
        return self.num_messages == 0

    def has_enough_space(self, size: int) -> bool:
        """Seed 000 ``haveEnoughSpace`` for a message of ``size`` payload bytes."""
        return size + self.current_bytes <= self.size_limit and (
            self.max_messages <= 0 or self.num_messages < self.max_messages
        )

    def add(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> bool:
        """Append a message; returns True when the batch is now full and should be sent.

        ``waiter``: None, an asyncio Future or a ``callback(error, message_id)``, handed back by :meth:`build`.
        """
        payload = message.payload
        if (
            message.properties is None
            and message.partition_key is None
            and message.event_timestamp is None
            and message.ordering_key is None
        ):
            return self.add_plain(payload, sequence_id, waiter, True)  # type: ignore[return-value]
        single = encode_single_metadata(
            len(payload),
            sequence_id,
            properties=message.properties,
            partition_key=message.partition_key,
            event_time=message.event_timestamp,
            ordering_key=message.ordering_key,
        )
        self._parts += (_U32.pack(len(single)), single, payload)
        self._waiters.append(waiter)
        if self._first is None:
            self._first = message
            self.sequence_id = sequence_id
        self.highest_sequence_id = sequence_id
        self.num_messages += 1
        self.current_bytes += len(payload)
        return (self.max_messages > 0 and self.num_messages >= self.max_messages) or (
            self.max_bytes > 0 and self.current_bytes >= self.max_bytes
        )

    def add_plain(self, payload: bytes, sequence_id: int, waiter: Any, force: bool = False) -> bool | None:
        """:meth:`add` of a message that is only payload bytes (its SingleMessageMetadata holds only
        ``payload_size`` and ``sequence_id``), with the room check included.

        Returns:
            None (nothing added) when the batch is not empty and has no room for it (``has_enough_space``),
            unless ``force``; else True when the batch is now full, False otherwise.
        """
        size = len(payload)
        count = self.num_messages
        if (
            count
            and not force
            and (self.current_bytes + size > self.size_limit or 0 < self.max_messages <= count)
        ):
            return None
        head = _PLAIN_HEADS.get(size)
        if head is None:
            head = _plain_head(size)
        if sequence_id < 0x80:
            sid = _BYTES[sequence_id]
        elif sequence_id < 0x4000:
            sid = bytes((sequence_id & 0x7F | 0x80, sequence_id >> 7))
        elif sequence_id < 0x200000:
            sid = bytes((sequence_id & 0x7F | 0x80, (sequence_id >> 7) & 0x7F | 0x80, sequence_id >> 14))
        else:
            sid = _varint(sequence_id)
        self._parts += (head[len(sid)], sid, payload)
        self._waiters.append(waiter)
        if self._first is None:
            self._first = PLAIN
            self.sequence_id = sequence_id
        self.highest_sequence_id = sequence_id
        self.num_messages = count = count + 1
        self.current_bytes = total = self.current_bytes + size
        return (0 < self.max_messages <= count) or (0 < self.max_bytes <= total)

    def build(self) -> BuiltBatch:
        """Close the batch and return it; the container is empty afterwards.

        Raises:
            ValueError: the container is empty.
        """
        if self._first is None:
            raise ValueError("cannot build an empty batch")
        built = BuiltBatch(
            b"".join(self._parts),
            self.num_messages,
            self.sequence_id,
            self.highest_sequence_id,
            self._waiters,
            self._first,
        )
        self._reset()
        return built

    def discard(self) -> list[Any]:
        """Empty the container; returns the waiters of the dropped messages (to fail them)."""
        waiters = self._waiters
        self._reset()
        return waiters


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _BYTES[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_BYTES = [bytes((i,)) for i in range(0x80)]
_PLAIN_HEADS: dict[int, list[bytes]] = {}
_PLAIN_HEADS_MAX = 1024  # distinct payload sizes remembered


def _plain_head(size: int) -> list[bytes]:
    """``[u32 metadata size][0x18 payload_size varint][0x40]`` for a plain item of ``size`` bytes, indexed by
    the length of the sequence id varint that follows (1..10 bytes)."""
    middle = b"\x18" + _varint(size) + b"\x40"
    heads = [b""] + [_U32.pack(len(middle) + n) + middle for n in range(1, 11)]
    if len(_PLAIN_HEADS) < _PLAIN_HEADS_MAX:
        _PLAIN_HEADS[size] = heads
    return heads


_parse_single = pb.SingleMessageMetadata.FromString
_unpack_u32 = _U32.unpack_from


def split_batch(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split an uncompressed batch payload into ``count`` ``(SingleMessageMetadata, item bytes)`` pairs.

    The consumer's hot path: like :func:`quasar.protocol.decode_batch` but on ``bytes`` (one slice per item,
    which the message keeps) and without the UTF-8 re-check of string fields.

    Raises:
        InvalidMessageError: a size runs past the payload, a metadata does not parse, or bytes are left over.
    """
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    total = len(payload)
    pos = 0
    items = []
    try:
        for _ in range(count):
            size = _unpack_u32(payload, pos)[0]
            start = pos + 4
            end = start + size
            single = _parse_single(payload[start:end])
            pos = end + single.payload_size
            if end > total or pos > total:
                raise InvalidMessageError(f"batch item runs past the {total}-byte payload")
            items.append((single, payload[end:pos]))
    except (struct.error, DecodeError) as exc:
        raise InvalidMessageError(f"malformed batch payload: {exc}") from None
    if pos != total:
        raise InvalidMessageError(f"{total - pos} bytes left over after {count} batch items")
    return items
