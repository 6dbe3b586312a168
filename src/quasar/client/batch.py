"""BatchMessageContainer: collects messages into one batched entry (Java ``BatchMessageContainerImpl``).

Room rule, seed 000 ``haveEnoughSpace`` (sizes in bytes of the message payload)::

    ((max_bytes <= 0 and size + current_bytes <= max_message_size)
     or (max_bytes > 0 and size + current_bytes <= max_bytes))
    and (max_messages <= 0 or num_messages < max_messages)

``add`` returns True when the batch is full afterwards (``num_messages >= max_messages`` or
``current_bytes >= max_bytes``) so the producer sends it at once. The built payload is the uncompressed batch
layout of reference/pulsar-protocol.md §7.2 (``[u32 size][SingleMessageMetadata][payload]`` per item, see
:mod:`quasar.protocol.metadata`); the producer compresses it as a whole. The container itself is compiled
(``quasar.client._codec_c``, twin ``_codec_py``): one growing buffer and one waiter list per batch, no Python
object per message beyond the waiter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from quasar.protocol import pb

from .codec import BatchContainer
from .errors import InvalidMessageError
from .message import OutgoingMessage

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


class BatchMessageContainer(BatchContainer):
    """Messages waiting to go out as one entry: the compiled (or pure-Python) ``BatchContainer`` of
    :mod:`quasar.client.codec`, whose ``add_plain``, ``add``, ``has_enough_space``, ``discard`` and read-only
    counters it keeps, plus :meth:`build`.

    Args:
        max_messages: ``batching_max_messages`` (<= 0 = unlimited).
        max_bytes: ``batching_max_allowed_size_in_bytes`` (<= 0 = bounded by ``max_message_size`` only).
        max_message_size: the broker's max message size in bytes (from CONNECTED).

    ``add(message, sequence_id, waiter)`` appends an :class:`OutgoingMessage` and returns True when the batch is
    full afterwards; ``add_plain(payload, sequence_id, waiter, force=False)`` appends bare payload bytes (its
    SingleMessageMetadata is only ``payload_size`` and ``sequence_id``) after the room check and returns None
    when there is no room. ``waiter``: None, an asyncio Future or a ``callback(error, message_id)``, handed back
    by :meth:`build`.
    """

    __slots__ = ()

    def build(self) -> BuiltBatch:
        """Close the batch and return it; the container is empty afterwards.

        Raises:
            ValueError: the container is empty.
        """
        payload, count, first_sid, highest_sid, waiters, first = self.take()
        return BuiltBatch(payload, count, first_sid, highest_sid, waiters, PLAIN if first is None else first)


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
