"""MessageStore: the storage facade the managed ledger uses (RocketMQ ``DefaultMessageStore``).

Layout under ``config.root_dir`` (semantics.md A2)::

    commitlog/<20-digit start offset>                       CommitLog segments
    consumequeue/<topic dir>/<queue id>/<20-digit offset>   ConsumeQueue files (20-byte units)
    index/<yyyyMMddHHmmssSSS>                               IndexFiles (key -> commit log offset)
    checkpoint                                              StoreCheckpoint (4 KiB)
    abort                                                   present while open (unclean exit marker)
    lock                                                    flock'ed while open (one store per directory)

Life cycle: ``open()`` (blocking: load files, recover, log the recovery time) -> ``await start()`` (threads:
group commit or periodic flush, consume queue flush, reput, clean; the segment allocator starts at open) ->
``put`` / ``wait_flushed`` / ``get`` / ``query`` on the loop thread -> ``await close()``.

Threads: flush (``flush.py``), reput (``reput.py``: feeds the index, parses keys off the loop), allocate
(``allocate.py``: the next commit log segment is created before it is needed), clean (``clean_service.py``:
retention and the disk guard).

Write path: ``put`` assigns the queue's next queue offset, appends one record to the commit log (one memcpy of
the body into the mapped segment, after reserving disk blocks) and writes the consume queue unit inline, so
the unit exists when ``put`` returns; the index follows on the reput thread. ``put`` does not wait for the
disk: ``wait_flushed`` does (SYNC_FLUSH: the group commit's fdatasync; ASYNC_FLUSH: at once). Futures from
``wait_flushed`` complete in commit log offset order. ``put_batch`` appends many bodies as ordinary records in
one call (RocketMQ ``putMessages``). The write path lives in :mod:`quasar.storage.write_path`.

**Read visibility guarantee** (what the managed ledger relies on): when ``wait_flushed(end)`` resolves for a
put, that put's consume queue unit exists and ``get`` returns the record (the unit is written before ``put``
returns, so before the future can exist). Query by key may lag by a few milliseconds (reput thread).

Read path and query by key: :mod:`quasar.storage.read_path`. Recovery at ``open()``:
:func:`quasar.storage.recovery.recover` (semantics.md A6) for the commit log and consume queues, then the
index resumes from :meth:`IndexService.recover_from`.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.checkpoint import StoreCheckpoint, create_abort_file, remove_abort_file
from quasar.storage.clean_service import CleanService, DiskUsage, StoreRetention, statvfs_disk_usage
from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher
from quasar.storage.errors import (
    StoreClosedError,
    StoreLockedError,
)
from quasar.storage.flush import FlushDiskType, GroupCommitService, PeriodicFlushService
from quasar.storage.index_service import IndexService, KeyExtractor
from quasar.storage.mapped_file import fsync_dir, offset_to_file_name
from quasar.storage.read_path import StoreReader
from quasar.storage.record import (
    ipv4_host,
)
from quasar.storage.recovery import RecoveryResult, recover
from quasar.storage.reput import ReputMessageService
from quasar.storage.results import (
    GetResult,
    PutBatchResult,
    PutResult,
    StoredMessage,
    StoreStatistics,
)
from quasar.storage.status import GetStatus, PutStatus
from quasar.storage.store_flushing import StoreFlushing
from quasar.storage.write_path import StoreWriter, _QueueWriter

__all__ = [
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutBatchResult",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreStatistics",
    "StoredMessage",
]

log = logging.getLogger(__name__)


class _State:
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class MessageStore(StoreWriter, StoreReader, StoreRetention, StoreFlushing):
    """The RocketMQ-style store: one commit log, consume queues, checkpoint, flush services."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        key_extractor: KeyExtractor | None = None,
        disk_usage: DiskUsage = statvfs_disk_usage,
    ) -> None:
        """``key_extractor(topic, body) -> keys`` adds message keys found in a record's body to the index
        (called on the reput thread, never on the event loop; see :mod:`quasar.storage.index_service`).
        ``disk_usage(path) -> ratio`` measures the disk for the clean service and the disk guard
        (:mod:`quasar.storage.clean_service`; a seam for tests)."""
        self.config = config
        root = config.root_dir
        self.allocator = AllocateMappedFileService(
            config.commit_log_file_size, warm=config.warm_mapped_file_enable
        )
        self.commit_log = CommitLog(
            root / "commitlog",
            config.commit_log_file_size,
            store_host=ipv4_host(*config.store_host),
            append_prop_crc=config.enabled_append_prop_crc,
            allocator=self.allocator,
        )
        self.consume_queues = ConsumeQueueStore(root / "consumequeue", config.consume_queue_file_size)
        self._consume_queue_dispatcher = ConsumeQueueDispatcher(self.consume_queues)
        self.dispatchers: list[Dispatcher] = [self._consume_queue_dispatcher]
        """Derived stores fed inline by every put and by recovery; append more before ``open()``."""
        self.index_service = IndexService(
            root / "index",
            lambda: self.checkpoint,
            hash_slot_num=config.max_hash_slot_num,
            index_num=config.max_index_num,
            key_extractor=key_extractor,
        )
        self.async_dispatchers: list[Dispatcher] = [self.index_service] if config.message_index_enable else []
        """Derived stores fed by the reput thread (:mod:`quasar.storage.reput`); append more before
        ``open()``. Each must be idempotent and skip records it already holds."""
        self.reput: ReputMessageService | None = None
        self.disk_usage = disk_usage
        self.queue_min_offsets: dict[tuple[str, int], int] = {}
        """Per (topic, queue id): units below this queue offset are not needed (``set_queue_min_offset``)."""
        self.disk_full = False
        """The disk guard refuses puts (disk use above ``disk_space_warning_level_ratio``); set by the clean
        service."""
        self._clean_service = CleanService(self, config.clean_resource_interval_ms)
        self.clean_lock = threading.Lock()
        self.disk_full_refusals = 0
        """Puts refused because the disk is full (guard ratio or ENOSPC)."""
        self.checkpoint: StoreCheckpoint | None = None
        self.last_exit_ok: bool | None = None
        """After ``open()``: False when the abort file showed an unclean exit."""
        self.recovery: RecoveryResult | None = None
        """After ``open()``: what recovery did (scan start and why, process offset)."""
        self._state = _State.NEW
        self._writable = True
        self._lock_fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group_commit: GroupCommitService | None = None
        self._commit_log_flusher: PeriodicFlushService | None = None
        self._consume_queue_flusher: PeriodicFlushService | None = None
        self._writers: dict[tuple[str, int], _QueueWriter] = {}
        self._dispatch_mark = (0, 0)
        """(commit log offset up to which records are dispatched, consume queue units written so far): one
        tuple, replaced atomically by the loop thread and read by the flush thread."""
        self._last_store_timestamp = 0
        self._reput_failed = False
        self.corrupt_records_skipped = 0
        """Records skipped by ``get`` because their body CRC did not match (bit rot)."""
        self._flush_lock = threading.Lock()
        self._consume_queue_flush_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MessageStore({self.config.root_dir}, {self._state}, max_offset={self.commit_log.max_offset})"

    # -- life cycle ------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory, load the files and recover (normal or abnormal per the abort file). Blocking.

        Raises :class:`StoreLockedError` when another store has the directory open, :class:`StoreLoadError`
        when the files do not fit the configuration, OSError on I/O failure.
        """
        if self._state is not _State.NEW:
            raise StoreClosedError(f"open() called on a {self._state} store")
        root = self.config.root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StoreLockedError(f"{root} is already open in another MessageStore") from None
        try:
            for path in (self.commit_log.mapped_file_queue.store_path, self.consume_queues.root):
                path.mkdir(exist_ok=True)
            fsync_dir(root)
            self.last_exit_ok = not (root / "abort").exists()
            self.checkpoint = StoreCheckpoint(root / "checkpoint")
            self.commit_log.load()
            self.consume_queues.load()
            if self.config.message_index_enable:
                self.index_service.load(last_exit_ok=self.last_exit_ok)
            started = time.monotonic()
            self._recover()
            reput_from = self.index_service.recover_from(
                self.commit_log.min_offset, last_exit_ok=self.last_exit_ok
            )
            self.reput = ReputMessageService(
                self.commit_log,
                self.async_dispatchers,
                min(reput_from, self.commit_log.max_offset),
                on_error=self._on_reput_error,
            )
            log.info(
                "message store %s recovered in %.1f ms (%s exit; %s)",
                root,
                (time.monotonic() - started) * 1000,
                "clean" if self.last_exit_ok else "UNCLEAN",
                self.recovery,
            )
            create_abort_file(root / "abort")
            self.allocator.start()
            last = self.commit_log.mapped_file_queue.last_mapped_file
            if last is not None:
                self.allocator.pre_allocate(last.path.with_name(offset_to_file_name(last.end_offset)))
        except BaseException:
            self._release_files()
            raise
        self._state = _State.OPEN

    async def start(self) -> None:
        """Start the flush threads, bound to the running loop (where ``wait_flushed`` futures live)."""
        self._check_open()
        if self._loop is not None:
            raise RuntimeError("store already started")
        config = self.config
        loop = asyncio.get_running_loop()
        self._loop = loop
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(
                self._flush_commit_log,
                sync_flush_timeout_ms=config.sync_flush_timeout_ms,
                on_error=self._on_flush_error,
            )
            self._group_commit.start_on(loop, self.commit_log.flushed_offset)
        else:
            self._commit_log_flusher = PeriodicFlushService(
                "quasar-flush-commitlog",
                self._flush_commit_log,
                interval_ms=config.flush_interval_ms,
                least_pages=config.flush_least_pages,
                thorough_interval_ms=config.flush_thorough_interval_ms,
                on_error=self._on_flush_error,
            )
            self._commit_log_flusher.start()
        self._consume_queue_flusher = PeriodicFlushService(
            "quasar-flush-consumequeue",
            self.flush_consume_queues,
            interval_ms=config.flush_consume_queue_interval_ms,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval_ms=config.flush_consume_queue_thorough_interval_ms,
            on_error=self._on_flush_error,
        )
        self._consume_queue_flusher.start()
        if self.reput is not None and self.async_dispatchers:
            self.reput.start()
        self._clean_service.start()

    async def close(self) -> None:
        """Stop the flush threads, flush everything, write the checkpoint, remove the abort file (the blocking
        parts run in the default executor). Pending ``wait_flushed`` futures resolve. Idempotent.
        """
        if self._state is not _State.OPEN:
            return
        self._state = _State.CLOSING
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._shutdown_and_flush)
        finally:
            if self._group_commit is not None and self._loop is loop:
                self._group_commit.finish(self.commit_log.flushed_offset)
            await loop.run_in_executor(None, self._release_files)

    def close_sync(self) -> None:
        """Blocking :meth:`close`, for use without a running loop (or from a thread other than the loop's)."""
        if self._state is not _State.OPEN:
            return
        self._state = _State.CLOSING
        try:
            self._shutdown_and_flush()
        finally:
            group_commit, loop = self._group_commit, self._loop
            if group_commit is not None and loop is not None and not loop.is_closed():
                flushed = self.commit_log.flushed_offset
                try:
                    running = asyncio.get_running_loop()
                except RuntimeError:
                    running = None
                if running is loop:
                    group_commit.finish(flushed)
                else:
                    loop.call_soon_threadsafe(group_commit.finish, flushed)
            self._release_files()

    def _shutdown_and_flush(self) -> int:
        for service in (
            self._clean_service,
            self._group_commit,
            self._commit_log_flusher,
            self._consume_queue_flusher,
            self.reput,
        ):
            if service is not None:
                service.shutdown()
        if not self._writable:
            return self.commit_log.flushed_offset
        try:
            if self.reput is not None and self.async_dispatchers and not self._reput_failed:
                self.reput.do_reput()  # dispatch what is left (RocketMQ: dispatchBehindBytes() == 0)
            self.flush_consume_queues(0)
        except BaseException:
            self._writable = False  # the abort file stays: the next open recovers abnormally
            raise
        remove_abort_file(self.config.root_dir / "abort")
        return self.commit_log.flushed_offset

    def _release_files(self) -> None:
        self.allocator.shutdown()
        self.index_service.close()
        self.commit_log.close()
        self.consume_queues.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
        self._state = _State.CLOSED

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise StoreClosedError(f"the message store is {self._state}")

    def _on_reput_error(self, exc: BaseException) -> None:
        log.error("message store: the reput service failed; the index stops growing until reopened: %r", exc)
        self._reput_failed = True

    def _recover(self) -> None:
        checkpoint = self.checkpoint
        assert checkpoint is not None and self.last_exit_ok is not None
        result = recover(
            self.commit_log,
            self.consume_queues,
            checkpoint,
            self.dispatchers,
            self._consume_queue_dispatcher,
            last_exit_ok=self.last_exit_ok,
            check_crc=self.config.check_crc_on_recover,
            require_prop_crc=self.config.force_verify_prop_crc,
        )
        self.recovery = result
        self._dispatch_mark = (result.process_offset, result.units)
        self._last_store_timestamp = max(
            result.last_store_timestamp, checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp
        )

    @property
    def is_open(self) -> bool:
        return self._state is _State.OPEN

    @property
    def dispatched_commit_log_offset(self) -> int:
        """End of the records whose consume queue units are written (bytes)."""
        return self._dispatch_mark[0]

    @property
    def writable(self) -> bool:
        """False after an I/O failure: puts answer SERVICE_NOT_AVAILABLE until the store is reopened."""
        return self._writable

    def statistics(self) -> StoreStatistics:
        group_commit = self._group_commit
        return StoreStatistics(
            min_commit_log_offset=self.commit_log.min_offset,
            max_commit_log_offset=self.commit_log.max_offset,
            flushed_commit_log_offset=self.commit_log.flushed_offset,
            dispatched_commit_log_offset=self._dispatch_mark[0],
            consume_queues=len(self.consume_queues),
            group_commit_rounds=group_commit.flush_rounds if group_commit is not None else 0,
            pending_flush_waiters=group_commit.pending if group_commit is not None else 0,
            writable=self._writable,
            dispatch_behind_bytes=self.reput.dispatch_behind_bytes if self.reput is not None else 0,
            disk_full=self.disk_full,
        )
