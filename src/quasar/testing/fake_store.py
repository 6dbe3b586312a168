"""In-memory stand-ins for ``MessageStore`` and ``MetadataStore``, with fault injection, for ledger tests.

``FakeMessageStore`` satisfies :class:`~quasar.storage.port.MessageStorePort`, the port the managed ledger
uses (``put``, ``wait_flushed``, ``get``, ``query``, ``min_queue_offset``, ``max_queue_offset``,
``set_queue_min_offset``; also ``put_and_wait`` and ``queues``), with the real store's result types and
statuses (``quasar.storage.results``, ``quasar.storage.status``) and its property encoding (an illegal property
is MESSAGE_ILLEGAL, a non-zero tag hash is the ``TAG_HASH`` property). Faults, after Pulsar's
``PulsarMockBookKeeper`` (``failNow``, ``failAfter``, ``delay``):

- ``fail_now(status)``: the next put fails with ``status``. ``FLUSH_DISK_TIMEOUT`` and ``UNKNOWN_ERROR`` are
  flush failures (the entry is written, its ``wait_flushed`` returns the status); the others refuse the put
  (nothing written), as in RocketMQ.
- ``fail_after(n, status)``: the same, after ``n`` more successful puts.
- ``delay(seconds)``: every flush completes ``seconds`` after its ``wait_flushed`` call, in order.
- ``pause_flush()`` / ``resume_flush()``: hold every flush until resumed (deterministic ordering tests).
- ``crash()``: forget every entry whose flush did not complete (a machine crash with SYNC flush).
- ``remove_before(topic, queue_id, offset)``: retention clean-up of a queue's head.

``FakeMetadataStore`` is the in-memory metadata backend (``quasar.metadata.memory.MemoryMetadataStore``, the
full async port) plus ``fail_writes(n)``: the next ``n`` writes raise ``FakeStoreError`` (a
``MetadataStoreError``), and ``keys(prefix)``: the stored paths, for assertions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quasar.metadata.errors import MetadataStoreError
from quasar.metadata.memory import MemoryMetadataStore
from quasar.storage.errors import InvalidMessageError
from quasar.storage.record import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, encode_properties
from quasar.storage.results import GetResult, PutResult, StoredMessage
from quasar.storage.status import GetStatus, PutStatus

if TYPE_CHECKING:
    from quasar.storage.port import MessageStorePort

__all__ = [
    "FakeMessageStore",
    "FakeMetadataStore",
    "FakeStoreError",
    "GetResult",
    "GetStatus",
    "PutResult",
    "PutStatus",
    "StoredMessage",
]

_FLUSH_FAILURES = frozenset({PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.UNKNOWN_ERROR})
RECORD_OVERHEAD_BYTES = 91
"""Bytes a fake commit log record adds to the body (roughly RocketMQ's fixed record prefix)."""


class FakeStoreError(MetadataStoreError):
    """An injected failure of the fake metadata store."""


@dataclass(slots=True)
class _Queue:
    messages: list[StoredMessage] = field(default_factory=list)
    min_offset: int = 0  # offsets below were removed

    @property
    def max_offset(self) -> int:
        return self.min_offset + len(self.messages)


class FakeMessageStore:
    """An in-memory MessageStore with SYNC-flush semantics and fault injection (see the module docstring)."""

    def __init__(self, *, max_message_size: int = 4 * 1024 * 1024) -> None:
        self.max_message_size = max_message_size
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._commit_log_offset = 0
        self._flushed_offset = 0
        self._flush_failures: dict[int, PutStatus] = {}  # commit log end offset -> injected flush status
        self._fail_countdown: int | None = None
        self._fail_status = PutStatus.UNKNOWN_ERROR
        self._delay_s = 0.0
        self._paused = False
        self._held: list[tuple[asyncio.Future[PutStatus], int]] = []
        self.put_count = 0
        self.queue_min_offsets: dict[tuple[str, int], int] = {}
        """What ``set_queue_min_offset`` was told, per (topic, queue id)."""

    # ------------------------------------------------------------------ fault injection
    def fail_now(self, status: PutStatus = PutStatus.UNKNOWN_ERROR) -> None:
        """Make the next put fail with ``status``."""
        self.fail_after(0, status)

    def fail_after(self, n: int, status: PutStatus = PutStatus.UNKNOWN_ERROR) -> None:
        """Make the put after the next ``n`` successful ones fail with ``status``."""
        if n < 0:
            raise ValueError("n must be >= 0")
        if status is PutStatus.PUT_OK:
            raise ValueError("inject a failure status, not PUT_OK")
        self._fail_countdown = n
        self._fail_status = status

    def delay(self, seconds: float) -> None:
        """Complete every later flush ``seconds`` after it is awaited (0 = at the next loop iteration)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self._delay_s = seconds

    def pause_flush(self) -> None:
        """Hold every flush until ``resume_flush``."""
        self._paused = True

    def resume_flush(self) -> None:
        """Complete the held flushes, in order."""
        self._paused = False
        held, self._held = self._held, []
        for future, end in held:
            self._complete(future, end)

    def crash(self) -> None:
        """Drop every entry not covered by a completed flush (queue offsets are reused after that)."""
        for queue in self._queues.values():
            while queue.messages and queue.messages[-1].commit_log_offset >= self._flushed_offset:
                queue.messages.pop()
        self._commit_log_offset = self._flushed_offset
        for future, _ in self._held:
            future.cancel()
        self._held.clear()
        self._paused = False

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """The ledger no longer needs units below ``queue_offset`` (trimming); the fake drops them at once
        (the real store deletes commit-log segments that no queue needs and that are expired)."""
        self.queue_min_offsets[(topic, queue_id)] = max(
            queue_offset, self.queue_min_offsets.get((topic, queue_id), 0)
        )
        self.remove_before(topic, queue_id, queue_offset)

    def remove_before(self, topic: str, queue_id: int, offset: int) -> None:
        """Retention: drop the messages of a queue below ``offset``."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return
        count = max(0, min(offset, queue.max_offset) - queue.min_offset)
        del queue.messages[:count]
        queue.min_offset += count

    async def delete_queue(self, topic: str, queue_id: int) -> int:
        """Drop every message of the queue; its offsets stay taken (the real store's ``delete_queue``)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return 0
        self.remove_before(topic, queue_id, queue.max_offset)
        return queue.max_offset

    # ------------------------------------------------------------------ facade
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
        """Append one message (synchronous). Returns a PutResult; the entry is durable after
        ``wait_flushed(commit_log_offset + wrote_bytes)`` returns PUT_OK."""
        now = int(time.time() * 1000)
        injected = None
        if self._fail_countdown is not None:
            if self._fail_countdown == 0:
                injected = self._fail_status
                self._fail_countdown = None
            else:
                self._fail_countdown -= 1
        if injected is not None and injected not in _FLUSH_FAILURES:
            return PutResult(injected, -1, -1, 0, now)
        if len(body) > self.max_message_size:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, now)
        try:
            encoded = encode_properties(properties, tag_hash)
        except InvalidMessageError:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, now)
        queue = self._queues.setdefault((topic, queue_id), _Queue())
        data = bytes(body)
        wrote = len(data) + len(encoded) + RECORD_OVERHEAD_BYTES
        commit_log_offset = self._commit_log_offset
        message = StoredMessage(
            queue.max_offset,
            commit_log_offset,
            wrote,
            now,
            memoryview(data),
            born_timestamp=now if born_timestamp_ms is None else born_timestamp_ms,
            queue_id=queue_id,
            properties_raw=memoryview(encoded),
        )
        queue.messages.append(message)
        self._commit_log_offset += wrote
        self.put_count += 1
        if injected is not None:
            self._flush_failures[commit_log_offset + wrote] = injected
        return PutResult(PutStatus.PUT_OK, commit_log_offset, message.queue_offset, wrote, now)

    def wait_flushed(self, commit_log_offset_end: int) -> asyncio.Future[PutStatus]:
        """A future resolved with PUT_OK once the flush covers ``commit_log_offset_end`` (or an injected
        failure status)."""
        future: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
        if self._paused:
            self._held.append((future, commit_log_offset_end))
        elif self._delay_s > 0:
            asyncio.get_running_loop().call_later(
                self._delay_s, self._complete, future, commit_log_offset_end
            )
        else:
            asyncio.get_running_loop().call_soon(self._complete, future, commit_log_offset_end)
        return future

    def on_flushed(self, commit_log_offset_end: int, callback: Callable[[PutStatus], None]) -> None:
        """:meth:`wait_flushed` as a callback: ``callback(status)`` when its future resolves (paused, delayed
        and injected failures apply alike)."""
        self.wait_flushed(commit_log_offset_end).add_done_callback(lambda future: callback(future.result()))

    def _complete(self, future: asyncio.Future[PutStatus], end: int) -> None:
        if future.done():
            return
        status = self._flush_failures.pop(end, PutStatus.PUT_OK)
        if status is PutStatus.PUT_OK and end > self._flushed_offset:
            self._flushed_offset = end
        future.set_result(status)

    async def put_and_wait(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutResult:
        """``put`` then ``wait_flushed``; the result carries the flush status."""
        result = self.put(
            topic,
            queue_id,
            body,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )
        if result.status is not PutStatus.PUT_OK:
            return result
        status = await self.wait_flushed(result.commit_log_offset + result.wrote_bytes)
        return result._replace(status=status)

    def get(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int = 4 * 1024 * 1024
    ) -> GetResult:
        """Up to ``max_count`` messages from ``queue_offset`` within ``max_bytes`` of bodies (at least one),
        with RocketMQ's statuses."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, [], 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if high == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, low, high)
        if queue_offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
        if queue_offset == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], queue_offset, low, high)
        if queue_offset > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], high, low, high)
        out: list[StoredMessage] = []
        total = 0
        for message in queue.messages[queue_offset - low : queue_offset - low + max(max_count, 0)]:
            if out and total + message.body.nbytes > max_bytes:
                break
            out.append(message)
            total += message.body.nbytes
        if not out:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, [], queue_offset, low, high)
        return GetResult(GetStatus.FOUND, out, out[-1].queue_offset + 1, low, high)

    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_num: int = 32
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose ``KEYS`` words or ``UNIQ_KEY`` property is ``key``, stored in
        ``[begin_ms, end_ms]`` (ms), the newest ``max_num`` (capped at 64) oldest first, as the real store's
        index answers (without its indexing lag and without a ``key_extractor``). Raises ValueError for
        ``max_num < 1``."""
        if max_num < 1:
            raise ValueError(f"max_num must be >= 1: {max_num}")
        found = [
            message
            for (queue_topic, _), queue in self._queues.items()
            if queue_topic == topic
            for message in queue.messages
            if begin_ms <= message.store_timestamp <= end_ms and key in _keys_of(message)
        ]
        found.sort(key=lambda message: message.commit_log_offset)
        return found[-min(max_num, 64) :]

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.max_offset

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The lowest queue offset still held (0 for an unknown queue)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.min_offset

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)


def _keys_of(message: StoredMessage) -> set[str]:
    """The keys the real store indexes a record under: its ``KEYS`` words and its ``UNIQ_KEY``."""
    properties = message.properties
    keys = set(properties.get(PROPERTY_KEYS, "").split())
    if properties.get(PROPERTY_UNIQ_KEY):
        keys.add(properties[PROPERTY_UNIQ_KEY])
    return keys


if TYPE_CHECKING:

    def _satisfies_the_port(store: FakeMessageStore) -> MessageStorePort:
        return store  # mypy checks FakeMessageStore against MessageStorePort here


class FakeMetadataStore(MemoryMetadataStore):
    """The in-memory metadata store with ``fail_writes`` (see the module docstring)."""

    def fail_writes(self, n: int = 1) -> None:
        """Make the next ``n`` write calls (put, delete, delete_recursive, multi) raise ``FakeStoreError``."""
        self.fail_next_writes(n, FakeStoreError("injected metadata write failure"))

    def keys(self, prefix: str = "/") -> list[str]:
        """Every stored path equal to or below ``prefix``, sorted (synchronous; for assertions)."""
        return sorted(self.data.subtree(prefix))
