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
``wait_flushed`` complete in commit log offset order.

**Read visibility guarantee** (what the managed ledger relies on): when ``wait_flushed(end)`` resolves for a
put, that put's consume queue unit exists and ``get`` returns the record (the unit is written before ``put``
returns, so before the future can exist). Query by key may lag by a few milliseconds (reput thread).

Read path and query by key: :mod:`quasar.storage.read_path`. Recovery at ``open()``:
:func:`quasar.storage.recovery.recover` (semantics.md A6) for the commit log and consume queues, then the
index resumes from :meth:`IndexService.recover_from`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import os
import threading
import time
from collections.abc import Awaitable, Mapping

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.checkpoint import StoreCheckpoint, create_abort_file, remove_abort_file
from quasar.storage.clean_service import CleanService, DiskUsage, StoreRetention, statvfs_disk_usage
from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher, DispatchRequest
from quasar.storage.errors import (
    DiskFullError,
    InvalidMessageError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
)
from quasar.storage.flush import FlushDiskType, GroupCommitService, PeriodicFlushService
from quasar.storage.index_service import IndexService, KeyExtractor
from quasar.storage.mapped_file import fsync_dir, offset_to_file_name
from quasar.storage.read_path import StoreReader
from quasar.storage.record import (
    MAX_INT,
    MAX_TOPIC_LENGTH,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    encode_properties,
    ipv4_host,
)
from quasar.storage.recovery import RecoveryResult, recover
from quasar.storage.reput import ReputMessageService
from quasar.storage.results import (
    GetResult,
    PutResult,
    StoredMessage,
    StoreStatistics,
)
from quasar.storage.status import AppendMessageStatus, GetStatus, PutStatus
from quasar.storage.store_flushing import StoreFlushing

__all__ = [
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreStatistics",
    "StoredMessage",
]

log = logging.getLogger(__name__)

_APPEND_TO_PUT = {
    AppendMessageStatus.MESSAGE_SIZE_EXCEEDED: PutStatus.MESSAGE_ILLEGAL,
    AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED: PutStatus.PROPERTIES_SIZE_EXCEEDED,
    AppendMessageStatus.CREATE_MAPPED_FILE_FAILED: PutStatus.CREATE_MAPPED_FILE_FAILED,
}


class _State:
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class MessageStore(StoreReader, StoreRetention, StoreFlushing):
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
        self._topic_bytes: dict[str, bytes] = {}
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

    # -- write path ------------------------------------------------------------------------------------------

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
        """Append one record for (topic, queue id) and build its consume queue unit; does not wait for the
        disk.

        Loop thread only. Returns PUT_OK with the record's commit log offset and queue offset; MESSAGE_ILLEGAL
        for a bad topic / queue id (0..2^31-1) / body (over ``max_message_size`` bytes or too big for a
        segment) / property; PROPERTIES_SIZE_EXCEEDED past 32767 encoded property bytes;
        CREATE_MAPPED_FILE_FAILED; SERVICE_NOT_AVAILABLE after an I/O failure. Raises
        :class:`StoreClosedError` when not open and :class:`StoreNotWritableError` when a dispatcher fails
        (the store then refuses writes).
        """
        if self._state is not _State.OPEN:
            raise StoreClosedError(f"the message store is {self._state}")
        if not self._writable or self.disk_full:
            if self.disk_full:
                self.disk_full_refusals += 1
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, -1, -1, 0, 0)
        topic_bytes = self._topic_bytes.get(topic) if type(topic) is str else None
        if topic_bytes is None:
            topic_bytes = self._encode_topic(topic)
            if topic_bytes is None:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        if type(queue_id) is not int or not 0 <= queue_id <= MAX_INT:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        if type(body) is memoryview:
            if body.ndim != 1 or body.itemsize != 1:
                body = body.cast("B")
        elif not isinstance(body, bytes | bytearray):
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        if len(body) > self.config.max_message_size or type(tag_hash) is not int:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        store_timestamp = time.time_ns() // 1_000_000
        if born_timestamp_ms is None:
            born_timestamp_ms = store_timestamp
        elif type(born_timestamp_ms) is not int:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        try:
            encoded_properties = encode_properties(properties, tag_hash)
            queue = self.consume_queues.find_or_create(topic, queue_id)
            queue_offset = queue.max_offset
            last_unit_file = queue.mapped_file_queue.last_mapped_file
            if (
                last_unit_file is None
                or last_unit_file.wrote_position + 20 > last_unit_file.reserved_position
            ):
                queue.prepare_write()  # a new consume queue file, or more disk blocks, before the append
            result = self.commit_log.append(
                topic=topic_bytes,
                queue_id=queue_id,
                queue_offset=queue_offset,
                body=body,
                properties=encoded_properties,
                store_timestamp=store_timestamp,
                born_timestamp=born_timestamp_ms,
            )
        except InvalidMessageError:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
        except (DiskFullError, OSError) as exc:  # no space for the record or its unit: nothing was written
            self.disk_full_refusals += 1
            log.error("message store: put refused, disk full: %s", exc)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, -1, -1, 0, 0)
        if result.status is not AppendMessageStatus.PUT_OK:
            return PutResult(_APPEND_TO_PUT.get(result.status, PutStatus.UNKNOWN_ERROR), -1, -1, 0, 0)
        try:
            if len(self.dispatchers) == 1 and self.dispatchers[0] is self._consume_queue_dispatcher:
                # the common case: only the consume queue is dispatched inline; skip the request object
                queue.put_unit(queue_offset, result.wrote_offset, result.wrote_bytes, tag_hash)
            else:
                request = DispatchRequest(
                    topic=topic,
                    queue_id=queue_id,
                    commit_log_offset=result.wrote_offset,
                    size=result.wrote_bytes,
                    tag_hash=tag_hash,
                    store_timestamp=store_timestamp,
                    queue_offset=queue_offset,
                    keys=properties.get(PROPERTY_KEYS, "") if properties else "",
                    uniq_key=properties.get(PROPERTY_UNIQ_KEY, "") if properties else "",
                )
                for dispatcher in self.dispatchers:
                    dispatcher.dispatch(request)
        except Exception as exc:
            self._writable = False
            raise StoreNotWritableError(
                f"dispatch of commit log offset {result.wrote_offset} failed; the store refuses writes "
                f"until reopened (recovery rebuilds the consume queues): {exc!r}"
            ) from exc
        self._dispatch_mark = (result.wrote_offset + result.wrote_bytes, self._dispatch_mark[1] + 1)
        self._last_store_timestamp = store_timestamp
        return PutResult(
            PutStatus.PUT_OK, result.wrote_offset, queue_offset, result.wrote_bytes, store_timestamp
        )

    def _encode_topic(self, topic: object) -> bytes | None:
        if not isinstance(topic, str) or not topic:
            return None
        try:
            encoded = topic.encode()
        except UnicodeEncodeError:
            return None
        if len(encoded) > MAX_TOPIC_LENGTH:
            return None
        self._topic_bytes[topic] = encoded
        return encoded

    def wait_flushed(self, commit_log_offset_end: int) -> Awaitable[PutStatus]:
        """A future of PUT_OK once the commit log is durable up to ``commit_log_offset_end`` (bytes).

        SYNC_FLUSH: after the group commit's fdatasync covers it (FLUSH_DISK_TIMEOUT after
        ``sync_flush_timeout_ms``, UNKNOWN_ERROR if the fdatasync failed); ASYNC_FLUSH: at once. Futures
        complete in offset order. Loop thread only, after ``start()``; raises :class:`StoreClosedError`
        otherwise.
        """
        self._check_open()
        loop = self._loop
        if loop is None:
            raise StoreClosedError("the message store is not started (await start() first)")
        if self._group_commit is not None:
            return self._group_commit.submit(commit_log_offset_end)
        future: asyncio.Future[PutStatus] = loop.create_future()
        future.set_result(PutStatus.PUT_OK)
        return future

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
        """:meth:`put`, then :meth:`wait_flushed` of its end; the result carries the flush status."""
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
        status = await self.wait_flushed(result.end_offset)
        return result if status is PutStatus.PUT_OK else dataclasses.replace(result, status=status)

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
