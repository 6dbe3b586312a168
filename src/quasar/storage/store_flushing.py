"""The store's flushing: commit log fdatasync, consume queue and index flush, checkpoint, and the flush waits
of ``put`` (RocketMQ ``FlushRealTimeService`` / ``GroupCommitService`` / ``FlushConsumeQueueService``): the
:class:`StoreFlusher` object :class:`~quasar.storage.message_store.MessageStore` owns and delegates to.

The flush *threads* are :mod:`quasar.storage.flush`'s services; this object owns them (created in
:meth:`StoreFlusher.start`, stopped in :meth:`StoreFlusher.shutdown`) and gives them what they run. Everything
here that syncs blocks: flush threads, ``close`` and ``flush()`` only, never the event loop. The loop-thread
parts are :meth:`StoreFlusher.wait_flushed` and :meth:`StoreFlusher.release_waiters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Iterator

from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.errors import StoreClosedError, StoreNotWritableError
from quasar.storage.flush import (
    FlushCallback,
    FlushDiskType,
    FlushLatencyObserver,
    GroupCommitService,
    PeriodicFlushService,
)
from quasar.storage.reput import ReputMessageService
from quasar.storage.status import PutStatus
from quasar.storage.store_parts import StoreParts

log = logging.getLogger("quasar.storage.message_store")


class StoreFlusher:
    """When the store's files reach the disk. Given the commit log, the consume queues, the index, the writer
    (its dispatch mark and last store timestamp go into the checkpoint), the reput thread's dispatchers and the
    shared :class:`StoreState` (a failed flush clears ``writable``); the checkpoint and the reput service
    come at :meth:`open`, the event loop at :meth:`start`."""

    def __init__(self, parts: StoreParts) -> None:
        self._config = parts.config
        self._commit_log = parts.commit_log
        self._consume_queues = parts.consume_queues
        self._index_service = parts.index_service
        self._writer = parts.writer
        self._async_dispatchers = parts.async_dispatchers
        self._state = parts.state
        self._checkpoint: StoreCheckpoint | None = None
        self._reput: ReputMessageService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.group_commit: GroupCommitService | None = None
        """SYNC_FLUSH: the group commit thread (after :meth:`start`)."""
        self.commit_log_flusher: PeriodicFlushService | None = None
        """ASYNC_FLUSH: the periodic commit log flush thread (after :meth:`start`)."""
        self.consume_queue_flusher: PeriodicFlushService | None = None
        """The periodic consume queue flush thread (after :meth:`start`)."""
        self._flush_lock = threading.Lock()
        self._consume_queue_flush_lock = threading.Lock()
        self.latency_observer: FlushLatencyObserver | None = None
        """SYNC_FLUSH: told each group commit round's fdatasync duration (s), on the loop thread."""

    def open(self, checkpoint: StoreCheckpoint, reput: ReputMessageService) -> None:
        """Take the checkpoint to write and the reput service whose progress bounds the index flush (the
        store's ``open()``, after recovery)."""
        self._checkpoint = checkpoint
        self._reput = reput

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the flush threads; ``wait_flushed`` futures live on ``loop``. Raises RuntimeError when
        already started."""
        if self._loop is not None:
            raise RuntimeError("store already started")
        config = self._config
        self._loop = loop
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(
                self.flush_commit_log,
                sync_flush_timeout_ms=config.sync_flush_timeout_ms,
                on_error=self._on_flush_error,
            )
            self.group_commit.latency_observer = self._observe_latency
            self.group_commit.start_on(loop, self._commit_log.flushed_offset)
        else:
            self.commit_log_flusher = PeriodicFlushService(
                "quasar-flush-commitlog",
                self.flush_commit_log,
                interval_ms=config.flush_interval_ms,
                least_pages=config.flush_least_pages,
                thorough_interval_ms=config.flush_thorough_interval_ms,
                on_error=self._on_flush_error,
            )
            self.commit_log_flusher.start()
        self.consume_queue_flusher = PeriodicFlushService(
            "quasar-flush-consumequeue",
            self.flush_consume_queues,
            interval_ms=config.flush_consume_queue_interval_ms,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval_ms=config.flush_consume_queue_thorough_interval_ms,
            on_error=self._on_flush_error,
        )
        self.consume_queue_flusher.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop given to :meth:`start` (None before)."""
        return self._loop

    def shutdown(self) -> None:
        """Stop the flush threads (each finishes its round; nothing more is flushed here). Blocking."""
        for service in (self.group_commit, self.commit_log_flusher, self.consume_queue_flusher):
            if service is not None:
                service.shutdown()

    def release_waiters(self) -> None:
        """Resolve every pending ``wait_flushed`` future with what is flushed now (close). Safe from any
        thread: from another one the release is posted to the loop, unless that loop is closed."""
        group_commit, loop = self.group_commit, self._loop
        if group_commit is None or loop is None or loop.is_closed():
            return
        flushed = self._commit_log.flushed_offset
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            group_commit.finish(flushed)
        else:
            loop.call_soon_threadsafe(group_commit.finish, flushed)

    def wait_flushed(self, commit_log_offset_end: int) -> Awaitable[PutStatus]:
        """A future of PUT_OK once the commit log is durable up to ``commit_log_offset_end`` (bytes).

        SYNC_FLUSH: after the group commit's fdatasync covers it (FLUSH_DISK_TIMEOUT after
        ``sync_flush_timeout_ms``, UNKNOWN_ERROR if the fdatasync failed); ASYNC_FLUSH: at once. Futures
        complete in offset order. Loop thread only, after ``start()``; raises :class:`StoreClosedError`
        otherwise.
        """
        if not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")
        loop = self._loop
        if loop is None:
            raise StoreClosedError("the message store is not started (await start() first)")
        if self.group_commit is not None:
            return self.group_commit.submit(commit_log_offset_end)
        future: asyncio.Future[PutStatus] = loop.create_future()
        future.set_result(PutStatus.PUT_OK)
        return future

    def on_flushed(self, commit_log_offset_end: int, callback: FlushCallback) -> None:
        """:meth:`wait_flushed` as a callback (the publish path: no future per entry): ``callback(status)`` runs
        once on the loop thread, never before this returns, in commit log offset order with the other waiters
        (SYNC_FLUSH: after the group commit's fdatasync, FLUSH_DISK_TIMEOUT or UNKNOWN_ERROR as for
        :meth:`wait_flushed`; ASYNC_FLUSH: PUT_OK on the next loop iteration). Loop thread only, after
        ``start()``; raises :class:`StoreClosedError` otherwise."""
        if not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")
        loop = self._loop
        if loop is None:
            raise StoreClosedError("the message store is not started (await start() first)")
        if self.group_commit is not None:
            self.group_commit.submit_callback(commit_log_offset_end, callback)
        else:
            loop.call_soon(callback, PutStatus.PUT_OK)

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """fdatasync the commit log; returns the flushed offset. Flush threads / close only."""
        timestamp = self._writer.last_store_timestamp
        end = self._commit_log.max_offset
        with self._flush_lock:
            flushed = self._commit_log.flush(least_pages)
        checkpoint = self._checkpoint
        if flushed >= end and checkpoint is not None:
            checkpoint.physic_msg_timestamp = max(checkpoint.physic_msg_timestamp, timestamp)
        return flushed

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Flush consume queues (RocketMQ ``FlushConsumeQueueService``). A thorough round (``least_pages == 0``)
        first flushes the index up to what the reput thread dispatched and the commit log up to what was
        dispatched inline, then every consume queue, then writes that offset and unit count to the checkpoint.
        Blocking: the consume queue flush thread, ``flush()`` and close. Raises OSError when a sync fails,
        :class:`StoreNotWritableError` when the commit log flush stops short.
        """
        with self._consume_queue_flush_lock:
            if least_pages:
                self._consume_queues.flush(least_pages)
                return
            dispatched, units = self._writer.dispatch_mark  # every unit of a record below is in the files
            timestamp = self._writer.last_store_timestamp
            reput = self._reput
            if reput is not None and self._async_dispatchers and not self._state.reput_failed:
                self._index_service.flush(reput.reput_from_offset)
            if self.flush_commit_log(0) < dispatched:
                raise StoreNotWritableError(f"commit log flush stopped short of offset {dispatched}")
            self._consume_queues.flush(0)
            checkpoint = self._checkpoint
            if checkpoint is not None and dispatched >= checkpoint.logics_flushed_offset:
                checkpoint.logics_flushed_offset = dispatched
                checkpoint.logics_flushed_units = units
                checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, timestamp)
                checkpoint.flush()

    @contextlib.contextmanager
    def consume_queues_held(self) -> Iterator[None]:
        """Hold the consume queue flush lock: no flush touches a consume queue file meanwhile (a queue being
        deleted); commit log flushes go on. Blocking."""
        with self._consume_queue_flush_lock:
            yield

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the flush locks (consume queues, then commit log): no flush thread touches a file meanwhile
        (``MessageStore.truncate_commit_log`` deletes and cuts files). Blocking."""
        with self._consume_queue_flush_lock, self._flush_lock:
            yield

    def request_flush(self) -> None:
        """SYNC_FLUSH: start a group commit round now, without a waiter (replicated bytes: a replica reports
        its written offset, the disk follows within a round); ASYNC_FLUSH: nothing, the periodic flush takes
        them. Any thread."""
        if self.group_commit is not None:
            self.group_commit.wakeup()

    @property
    def group_commit_rounds(self) -> int:
        """fdatasync rounds of the group commit (0 with ASYNC_FLUSH or before ``start``)."""
        return self.group_commit.flush_rounds if self.group_commit is not None else 0

    @property
    def pending_waiters(self) -> int:
        """``wait_flushed`` futures not resolved yet."""
        return self.group_commit.pending if self.group_commit is not None else 0

    def _observe_latency(self, seconds: float) -> None:
        observer = self.latency_observer
        if observer is not None:
            observer(seconds)

    def _on_flush_error(self, exc: BaseException) -> None:
        log.error("message store: flush failed, the store refuses writes from now on: %r", exc)
        self._state.writable = False
