"""Dispatch: how derived stores learn about commit log records (RocketMQ ``DispatchRequest`` and
``CommitLogDispatcher``).

Derived stores register a :class:`Dispatcher` with the store instead of the commit log knowing them
(apache/rocketmq PR #10012 review). In this first cut the store dispatches inline right after each append, so
a record's consume queue unit exists as soon as ``put`` returns; on recovery the same dispatchers get every
record past the checkpoint again, so ``dispatch`` must be idempotent (an existing unit is left as is).

:class:`ConsumeQueueStore` owns every consume queue; :class:`ConsumeQueueDispatcher` is the first dispatcher
(RocketMQ ``CommitLogDispatcherBuildConsumeQueue``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from quasar.storage.consume_queue import ConsumeQueue, decode_topic_dir
from quasar.storage.errors import ConsumeQueueDeletingError, CorruptRecordError, StoreLoadError
from quasar.storage.record import (
    PROPERTY_KEYS,
    PROPERTY_TAG_HASH,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    StoredRecord,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class DispatchRequest:
    """One commit log record as the dispatchers see it (RocketMQ ``DispatchRequest``). Not frozen (built per
    record on the reput path, where a frozen dataclass's ``__init__`` costs too much); treat it as read-only.

    ``commit_log_offset`` and ``size`` are in bytes, ``store_timestamp`` / ``born_timestamp`` in ms since the
    epoch, ``queue_offset`` a message count. ``keys`` is the ``KEYS`` property (space-separated), ``uniq_key``
    the ``UNIQ_KEY`` property (both for the key index, a later issue).
    """

    topic: str
    queue_id: int
    commit_log_offset: int
    size: int
    tag_hash: int
    store_timestamp: int
    queue_offset: int
    keys: str = ""
    uniq_key: str = ""
    sys_flag: int = 0
    born_timestamp: int = 0
    body: memoryview | None = None
    """The record's body (a view of the mapped commit log) for dispatchers that read it (the key extractor
    of the index); None on the inline put path."""

    @classmethod
    def from_record(cls, record: StoredRecord) -> DispatchRequest:
        """Rebuild the request of a stored record (recovery); the tag hash comes from the ``TAG_HASH``
        property."""
        try:
            properties = record.properties
            tag_hash = int(properties.get(PROPERTY_TAG_HASH, "0"))
        except (CorruptRecordError, ValueError) as exc:
            log.warning(
                "record at %d: unreadable properties (%s); dispatched without", record.physical_offset, exc
            )
            properties, tag_hash = {}, 0
        return cls(
            topic=record.topic,
            queue_id=record.queue_id,
            commit_log_offset=record.physical_offset,
            size=record.total_size,
            tag_hash=tag_hash,
            store_timestamp=record.store_timestamp,
            queue_offset=record.queue_offset,
            keys=properties.get(PROPERTY_KEYS, ""),
            uniq_key=properties.get(PROPERTY_UNIQ_KEY, ""),
            sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp,
            body=record.body,
        )


class Dispatcher(Protocol):
    """A derived store fed from the commit log (RocketMQ ``CommitLogDispatcher``)."""

    def dispatch(self, request: DispatchRequest) -> None:
        """Apply one record. Must be idempotent: recovery re-dispatches records that may already be
        applied."""
        ...


class ConsumeQueueStore:
    """Every consume queue of the store, under ``root`` (``<store root>/consumequeue``), keyed by (topic,
    queue id)."""

    def __init__(self, root: Path, mapped_file_size: int) -> None:
        self.root = root
        self.mapped_file_size = mapped_file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._deleting: set[tuple[str, int]] = set()
        """Queues being deleted (:mod:`quasar.storage.queue_deletion`): not created again meanwhile."""

    def __len__(self) -> int:
        return len(self._queues)

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue id), created empty (no file yet) when missing. Raises
        :class:`ConsumeQueueDeletingError` while that queue is being deleted."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            if (topic, queue_id) in self._deleting:
                raise ConsumeQueueDeletingError(f"consume queue {topic}/{queue_id} is being deleted")
            queue = ConsumeQueue(self.root, topic, queue_id, self.mapped_file_size)
            self._queues[(topic, queue_id)] = queue
        return queue

    def mark_deleting(self, key: tuple[str, int]) -> bool:
        """Start deleting queue ``key``; False when a deletion of it is already running. Loop thread."""
        if key in self._deleting:
            return False
        self._deleting.add(key)
        return True

    def unmark_deleting(self, key: tuple[str, int]) -> None:
        self._deleting.discard(key)

    def detach(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Take queue (topic, queue id) out (None when absent). Loop thread."""
        return self._queues.pop((topic, queue_id), None)

    def attach(self, queue: ConsumeQueue) -> None:
        """Put ``queue`` in (after :meth:`detach`). Loop thread."""
        self._queues[(queue.topic, queue.queue_id)] = queue

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id), sorted."""
        return sorted(self._queues)

    def load(self) -> None:
        """Map every consume queue found under ``root`` (blocking).

        Raises :class:`StoreLoadError` for a queue directory whose name is not a queue id, or bad files.
        """
        if not self.root.is_dir():
            return
        for topic_path in sorted(self.root.iterdir()):
            if not topic_path.is_dir():
                continue
            topic = decode_topic_dir(topic_path)
            for queue_path in sorted(topic_path.iterdir()):
                if not queue_path.is_dir():
                    continue
                if not queue_path.name.isdigit():
                    raise StoreLoadError(f"{queue_path}: not a queue id directory")
                queue = ConsumeQueue(self.root, topic, int(queue_path.name), self.mapped_file_size)
                queue.load()
                self._queues[(topic, queue.queue_id)] = queue

    def recover(self) -> None:
        """Recover every queue's end (RocketMQ ``ConsumeQueue.recover``). Blocking."""
        for queue in self._queues.values():
            queue.recover()

    def truncate_dirty(self, commit_log_offset: int) -> None:
        """Drop units of records at or past ``commit_log_offset`` in every queue. Blocking."""
        for queue in self._queues.values():
            queue.truncate_dirty(commit_log_offset)

    def flush(self, least_pages: int = 0) -> None:
        """fdatasync every queue with enough dirty pages. Blocking; safe on a thread while the loop
        dispatches."""
        for queue in list(self._queues.values()):
            queue.flush(least_pages)

    def destroy(self) -> None:
        """Delete every consume queue (A6: when the commit log has no file at all). Blocking."""
        for queue in self._queues.values():
            queue.destroy()
        self._queues.clear()

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()


class ConsumeQueueDispatcher:
    """Builds consume queue units (RocketMQ ``CommitLogDispatcherBuildConsumeQueue``).

    Only non-transactional and committed-transaction records get a unit (SYSFLAG transaction bits 0x0 or 0x8).
    """

    def __init__(self, consume_queues: ConsumeQueueStore) -> None:
        self.consume_queues = consume_queues
        self.allow_pre_blank = True
        """Whether an empty queue may start past queue offset 0. Recovery turns it off while re-dispatching
        from the checkpoint, so a queue whose files were lost is noticed (a gap) instead of silently starting
        late."""

    def dispatch(self, request: DispatchRequest) -> None:
        transaction_type = request.sys_flag & TRANSACTION_TYPE_MASK
        if transaction_type != TRANSACTION_NOT_TYPE and transaction_type != TRANSACTION_COMMIT_TYPE:
            return
        queue = self.consume_queues.find_or_create(request.topic, request.queue_id)
        queue.put_unit(
            request.queue_offset,
            request.commit_log_offset,
            request.size,
            request.tag_hash,
            allow_pre_blank=self.allow_pre_blank,
        )
