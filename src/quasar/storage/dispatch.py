"""Dispatch: how derived stores learn about commit log records (RocketMQ ``DispatchRequest`` and
``CommitLogDispatcher``).

Derived stores register a :class:`Dispatcher` with the store instead of the commit log knowing them
(apache/rocketmq PR #10012 review). In this first cut the store dispatches inline right after each append, so
a record's consume queue unit exists as soon as ``put`` returns; on recovery the same dispatchers get every
record past the checkpoint again, so ``dispatch`` must be idempotent (an existing unit is left as is).

:class:`~quasar.storage.consume_queue_store.ConsumeQueueStore` owns every consume queue (re-exported here);
:class:`ConsumeQueueDispatcher` is the first dispatcher (RocketMQ ``CommitLogDispatcherBuildConsumeQueue``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from quasar.storage.consume_queue_store import ConsumeQueueStore
from quasar.storage.errors import CorruptRecordError
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

__all__ = ["ConsumeQueueDispatcher", "ConsumeQueueStore", "DispatchRequest", "Dispatcher"]


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


class ConsumeQueueDispatcher:
    """Builds consume queue units (RocketMQ ``CommitLogDispatcherBuildConsumeQueue``).

    Only non-transactional and committed-transaction records get a unit (SYSFLAG transaction bits 0x0 or 0x8).
    """

    def __init__(self, consume_queues: ConsumeQueueStore) -> None:
        self.consume_queues = consume_queues
        self.units_dispatched = 0
        """Records given a unit (new or already there) so far: recovery counts the units past the
        checkpoint with it."""
        self.allow_pre_blank = True
        """Whether an empty queue may start past queue offset 0. Recovery turns it off while re-dispatching
        from the checkpoint, so a queue whose files were lost is noticed (a gap) instead of silently starting
        late."""

    def dispatch(self, request: DispatchRequest) -> None:
        transaction_type = request.sys_flag & TRANSACTION_TYPE_MASK
        if transaction_type != TRANSACTION_NOT_TYPE and transaction_type != TRANSACTION_COMMIT_TYPE:
            return
        self.units_dispatched += 1
        queue = self.consume_queues.find_or_create(request.topic, request.queue_id)
        queue.put_unit(
            request.queue_offset,
            request.commit_log_offset,
            request.size,
            request.tag_hash,
            allow_pre_blank=self.allow_pre_blank,
        )
