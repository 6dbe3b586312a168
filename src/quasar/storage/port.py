"""MessageStorePort: the typed seam between the managed ledger and the message store.

``quasar.ledger`` (and, later, replication) talks to the store only through this Protocol, so the real
:class:`~quasar.storage.message_store.MessageStore` and the in-memory ``quasar.testing.fake_store``
stand-in are interchangeable and type-checked. The methods are RocketMQ's ``MessageStore`` facade
(``putMessage``, ``getMessage``, ``queryMessage``, ``getMinOffsetInQueue`` / ``getMaxOffsetInQueue``) with
the result types of ``quasar.storage.results``; every method runs on the event-loop thread and never blocks
it (the disk wait is the awaitable of :meth:`wait_flushed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from quasar.storage.results import GetResult, PutResult, StoredMessage
from quasar.storage.status import PutStatus

__all__ = ["MessageStorePort"]


class MessageStorePort(Protocol):
    """What a managed ledger needs from the store. Queue = ``(topic, queue_id)``; offsets are queue offsets
    (consecutive per queue) unless named ``commit_log_offset`` (bytes in the commit log)."""

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutResult:
        """Append one record; does not wait for the disk. A refused put returns a non-OK status."""
        ...

    def wait_flushed(self, commit_log_offset_end: int) -> Awaitable[PutStatus]:
        """Resolves to PUT_OK once the commit log is durable up to ``commit_log_offset_end`` (bytes)."""
        ...

    def on_flushed(self, commit_log_offset_end: int, callback: Callable[[PutStatus], None]) -> None:
        """``callback(status)`` once, on the loop thread and never before this returns, when the commit log
        is durable up to ``commit_log_offset_end`` (or a flush timeout/failure status); in offset order."""
        ...

    def get(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int = ...
    ) -> GetResult:
        """Up to ``max_count`` messages from ``queue_offset`` on (bodies are zero-copy memoryviews)."""
        ...

    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = ..., max_num: int = 32
    ) -> list[StoredMessage]:
        """Messages of ``topic`` indexed under ``key`` with a store time in ``[begin_ms, end_ms]`` (ms)."""
        ...

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still held (0 for an unknown queue)."""
        ...

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        ...

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Units below ``queue_offset`` are no longer needed (retention may reclaim them); never moves back."""
        ...

    async def delete_queue(self, topic: str, queue_id: int) -> int:
        """Delete the queue's units; its queue offsets stay taken (returns where the empty queue starts)."""
        ...
