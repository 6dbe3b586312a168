"""Chunked messages: the producer's split and the consumer's reassembly (reference/pulsar-protocol.md §7.4).

Producer (seed 000, Java ``ProducerImpl.sendAsync``): a message that cannot be batched and whose (compressed)
payload is larger than the chunk size is sent as ``N = ceil(max(1, size) / chunk_size)`` chunks (the seed's
formula ``max(1,s) / m + (max(1,s) % m == 0 ? 0 : 1)``), chunk ``i`` carrying bytes
``[i * chunk_size, (i + 1) * chunk_size)``. Every chunk is its own SEND with the same sequence id and
``is_chunk``; its metadata has ``uuid = "<producer_name>-<sequence_id>"``, ``chunk_id = i``,
``num_chunks_from_msg = N`` and ``total_chunk_msg_size = size``.

Consumer (C++ ``ConsumerImpl::processMessageChunk``, Java ``ConsumerImpl.processMessageChunk``): chunks are
collected by uuid; they must arrive in order from chunk 0. At most ``max_pending_chunked_message`` (10)
incomplete messages are kept: a new one evicts the oldest. Incomplete messages expire after
``expire_time_of_incomplete_chunked_message_ms`` (60 s). Evicted, expired and out-of-order chunks are
reported to the caller (their message ids), which acks them (``auto_ack_oldest_chunked_message_on_queue_full``)
or leaves them for redelivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from quasar.protocol import MessageId

__all__ = ["ChunkAssembler", "ChunkedMessage", "chunk_count", "split_chunks"]


def chunk_count(payload_size: int, chunk_size: int) -> int:
    """Number of chunks for ``payload_size`` bytes at ``chunk_size`` bytes each (seed 000 formula).

    Raises:
        ValueError: ``chunk_size`` < 1 or ``payload_size`` < 0.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if payload_size < 0:
        raise ValueError(f"payload_size must be >= 0, got {payload_size}")
    size = max(1, payload_size)
    return size // chunk_size + (0 if size % chunk_size == 0 else 1)


def split_chunks(payload: bytes, chunk_size: int) -> list[memoryview]:
    """Split ``payload`` into ``chunk_count`` memoryview slices of ``chunk_size`` bytes (the last may be shorter;
    an empty payload gives one empty chunk)."""
    view = memoryview(payload)
    count = chunk_count(len(payload), chunk_size)
    return [view[i * chunk_size : (i + 1) * chunk_size] for i in range(count)]


@dataclass(slots=True)
class _Pending:
    num_chunks: int
    total_size: int
    created: float
    parts: list[bytes | memoryview] = field(default_factory=list)
    ids: list[MessageId] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ChunkedMessage:
    """A reassembled message: the whole payload and the ids of all its chunks (first to last)."""

    payload: bytes
    chunk_ids: list[MessageId]


class ChunkAssembler:
    """Reassembles chunked messages by uuid.

    Args:
        max_pending: ``max_pending_chunked_message``.
        expire_ms: ``expire_time_of_incomplete_chunked_message_ms``.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self, max_pending: int = 10, expire_ms: int = 60_000, clock: Callable[[], float] | None = None
    ):
        self.max_pending = max_pending
        self.expire_ms = expire_ms
        self._clock = clock or time.monotonic
        self._pending: dict[str, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self,
        uuid: str,
        chunk_id: int,
        num_chunks: int,
        total_size: int,
        payload: bytes | memoryview,
        message_id: MessageId,
    ) -> tuple[ChunkedMessage | None, list[MessageId]]:
        """Add one chunk.

        Returns:
            ``(message, dropped)``: ``message`` once the last chunk arrived (else None); ``dropped`` = ids of
            chunks given up (evicted oldest message, broken sequence, stray chunk) for the caller to ack or
            leave for redelivery.
        """
        dropped: list[MessageId] = []
        pending = self._pending.get(uuid)
        if pending is None:
            if chunk_id != 0:
                return None, [message_id]  # a chunk of a message whose start we never saw
            if len(self._pending) >= self.max_pending:
                oldest = next(iter(self._pending))
                dropped.extend(self._pending.pop(oldest).ids)
            pending = _Pending(num_chunks, total_size, self._clock())
            self._pending[uuid] = pending
        elif chunk_id < len(pending.ids):
            return None, []  # a duplicate of a chunk we have (redelivery); ignore it
        elif chunk_id != len(pending.ids) or num_chunks != pending.num_chunks:
            dropped.extend(self._pending.pop(uuid).ids)
            dropped.append(message_id)
            return None, dropped
        pending.parts.append(payload)
        pending.ids.append(message_id)
        if len(pending.ids) < pending.num_chunks:
            return None, dropped
        del self._pending[uuid]
        data = b"".join(pending.parts)
        return ChunkedMessage(data, pending.ids), dropped

    def expire(self) -> list[MessageId]:
        """Drop incomplete messages older than ``expire_ms``; returns the ids of their chunks."""
        limit = self._clock() - self.expire_ms / 1000
        dropped: list[MessageId] = []
        for uuid in [u for u, p in self._pending.items() if p.created <= limit]:
            dropped.extend(self._pending.pop(uuid).ids)
        return dropped
