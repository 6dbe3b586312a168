"""The store's flushing: commit log fdatasync, consume queue and index flush, checkpoint (RocketMQ
``FlushRealTimeService`` / ``FlushConsumeQueueService``), as a base class of
:class:`~quasar.storage.message_store.MessageStore` (split out to keep the facade readable, like
:mod:`quasar.storage.read_path`). Everything here blocks: flush threads, ``close`` and ``flush()`` only, never
the event loop.
"""

from __future__ import annotations

import logging
import threading

from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.commit_log import CommitLog
from quasar.storage.dispatch import ConsumeQueueStore, Dispatcher
from quasar.storage.errors import StoreNotWritableError
from quasar.storage.index_service import IndexService
from quasar.storage.reput import ReputMessageService

log = logging.getLogger("quasar.storage.message_store")


class StoreFlushing:
    """Flush methods of the store; the subclass provides the attributes below and ``_check_open``."""

    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    index_service: IndexService
    checkpoint: StoreCheckpoint | None
    reput: ReputMessageService | None
    async_dispatchers: list[Dispatcher]
    _flush_lock: threading.Lock
    _consume_queue_flush_lock: threading.Lock
    _dispatch_mark: tuple[int, int]
    _last_store_timestamp: int
    _reput_failed: bool
    _writable: bool

    def _check_open(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _flush_commit_log(self, least_pages: int = 0) -> int:
        """fdatasync the commit log; returns the flushed offset. Flush threads / close only."""
        timestamp = self._last_store_timestamp
        end = self.commit_log.max_offset
        with self._flush_lock:
            flushed = self.commit_log.flush(least_pages)
        if flushed >= end and self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, timestamp)
        return flushed

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Flush consume queues (RocketMQ ``FlushConsumeQueueService``). A thorough round (``least_pages == 0``)
        first flushes the commit log up to what was dispatched, then every consume queue, then writes that offset
        and unit count to the checkpoint. Blocking: the consume queue flush thread, :meth:`flush` and close.
        """
        with self._consume_queue_flush_lock:
            if least_pages:
                self.consume_queues.flush(least_pages)
                return
            dispatched, units = self._dispatch_mark  # every unit of a record below is in the mapped files
            timestamp = self._last_store_timestamp
            reput = self.reput
            if reput is not None and self.async_dispatchers and not self._reput_failed:
                self.index_service.flush(reput.reput_from_offset)
            if self._flush_commit_log(0) < dispatched:
                raise StoreNotWritableError(f"commit log flush stopped short of offset {dispatched}")
            self.consume_queues.flush(0)
            checkpoint = self.checkpoint
            if checkpoint is not None and dispatched >= checkpoint.logics_flushed_offset:
                checkpoint.logics_flushed_offset = dispatched
                checkpoint.logics_flushed_units = units
                checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, timestamp)
                checkpoint.flush()

    def flush(self) -> int:
        """fdatasync the commit log, then every consume queue, then write the checkpoint; returns the flushed
        commit log offset (bytes). Blocking: call it off the event loop (``loop.run_in_executor``).
        Raises :class:`StoreClosedError` when not open, OSError when a sync fails.
        """
        self._check_open()
        self.flush_consume_queues(0)
        return self.commit_log.flushed_offset

    def _on_flush_error(self, exc: BaseException) -> None:
        log.error("message store: flush failed, the store refuses writes from now on: %r", exc)
        self._writable = False
