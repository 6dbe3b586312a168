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

import asyncio
import struct
from dataclasses import dataclass

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
        futures: one per item, in order (resolved with the item's MessageId).
        first: the first item (its partition key goes into the entry metadata, as the C++ producer).
    """

    payload: bytes
    num_messages: int
    sequence_id: int
    highest_sequence_id: int
    futures: list[asyncio.Future[object] | None]
    first: OutgoingMessage


class BatchMessageContainer:
    """Messages waiting to go out as one entry.

    Args:
        max_messages: ``batching_max_messages`` (<= 0 = unlimited).
        max_bytes: ``batching_max_allowed_size_in_bytes`` (<= 0 = bounded by ``max_message_size`` only).
        max_message_size: the broker's max message size in bytes (from CONNECTED).
    """

    __slots__ = (
        "_first",
        "_futures",
        "_parts",
        "current_bytes",
        "highest_sequence_id",
        "max_bytes",
        "max_message_size",
        "max_messages",
        "num_messages",
        "sequence_id",
    )  # fmt: skip

    def __init__(self, max_messages: int, max_bytes: int, max_message_size: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self._reset()

    def _reset(self) -> None:
        self._parts: list[bytes] = []
        self._futures: list[asyncio.Future[object] | None] = []
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
        total = size + self.current_bytes
        fits = total <= (self.max_message_size if self.max_bytes <= 0 else self.max_bytes)
        return fits and (self.max_messages <= 0 or self.num_messages < self.max_messages)

    def add(self, message: OutgoingMessage, sequence_id: int, future: asyncio.Future[object] | None) -> bool:
        """Append a message; returns True when the batch is now full and should be sent."""
        payload = message.payload
        if (
            message.properties is None
            and message.partition_key is None
            and message.event_timestamp is None
            and message.ordering_key is None
        ):
            single = b"\x18" + _varint(len(payload)) + b"\x40" + _varint(sequence_id)
        else:
            single = encode_single_metadata(
                len(payload),
                sequence_id,
                properties=message.properties,
                partition_key=message.partition_key,
                event_time=message.event_timestamp,
                ordering_key=message.ordering_key,
            )
        parts = self._parts
        parts.append(_U32.pack(len(single)))
        parts.append(single)
        parts.append(payload)
        self._futures.append(future)
        if self._first is None:
            self._first = message
            self.sequence_id = sequence_id
        self.highest_sequence_id = sequence_id
        self.num_messages += 1
        self.current_bytes += len(payload)
        return (self.max_messages > 0 and self.num_messages >= self.max_messages) or (
            self.max_bytes > 0 and self.current_bytes >= self.max_bytes
        )

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
            self._futures,
            self._first,
        )
        self._reset()
        return built

    def discard(self) -> list[asyncio.Future[object] | None]:
        """Empty the container; returns the futures of the dropped messages (to fail them)."""
        futures = self._futures
        self._reset()
        return futures


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
