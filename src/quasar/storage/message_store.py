"""MessageStore: the storage facade the managed ledger uses (RocketMQ ``DefaultMessageStore``).

Layout under ``config.root_dir`` (semantics.md A2)::

    commitlog/<20-digit start offset>                       CommitLog segments
    consumequeue/<topic dir>/<queue id>/<20-digit offset>   ConsumeQueue files (20-byte units)
    index/<yyyyMMddHHmmssSSS>                               IndexFiles (key -> commit log offset)
    checkpoint                                              StoreCheckpoint (4 KiB)
    epoch                                                   EpochFile (master epochs; replication)
    abort                                                   present while open (unclean exit marker)
    lock                                                    flock'ed while open (one store per directory)

Life cycle: ``open()`` (blocking: load files, recover, log the recovery time) -> ``await start()`` (threads:
group commit or periodic flush, consume queue flush, reput, clean; the allocator starts at open) -> ``put`` /
``wait_flushed`` / ``get`` / ``query`` on the loop thread -> ``await close()``.

Threads: flush (``flush.py``), reput (``reput.py``: feeds the index), allocate (``allocate.py``: the next
commit log segment is made before it is needed), clean (``clean_service.py``: retention and the disk guard).
Consume queues load when first used, their files mapped within a budget (``consume_queue_store.py``).

Write path: ``put`` assigns the queue's next queue offset, appends one record to the commit log (one memcpy of
the body into the mapped segment, after reserving disk blocks) and writes the consume queue unit inline, so
the unit exists when ``put`` returns; the index follows on the reput thread. ``put`` does not wait for the
disk: ``wait_flushed`` does (SYNC_FLUSH: the group commit's fdatasync; ASYNC_FLUSH: at once), in commit log
offset order. ``put_batch`` appends many bodies as ordinary records in one call (RocketMQ ``putMessages``).
Every record's bytes come from one encoder, compiled (with a pure-Python twin):
:data:`quasar.storage.record.pack_record_into`, one record and its unit per C call, or
:data:`~quasar.storage.record.pack_records_into` for a batch.

Composition: the facade owns five parts and delegates to them; each gets what it needs in its constructor (the
files, and the one :class:`~quasar.storage.store_state.StoreState` holding the phase and the write gate), none
reaches into another through ``self``:

- :class:`~quasar.storage.write_path.StoreWriter`: ``put``, ``put_batch``;
- :class:`~quasar.storage.read_path.StoreReader`: ``get``, ``get_by_offset``, ``query``, queue offsets;
- :class:`~quasar.storage.store_flushing.StoreFlusher`: ``wait_flushed``, ``flush``, flush threads, checkpoint;
- :class:`~quasar.storage.clean_service.StoreRetention`: ``set_queue_min_offset``, ``clean_once``, disk guard;
- :class:`~quasar.storage.replica_path.StoreReplica`: ``read_commit_log``, ``append_replicated``, replica mode,
  ``truncate_commit_log`` (RocketMQ HA; the methods come from its :class:`ReplicaFacade` base class).
- :class:`~quasar.storage.queue_deletion.QueueDeletion`: ``delete_queue`` (a deleted topic's consume queue).

``put``, ``put_batch``, ``get`` and ``wait_flushed`` are bound onto the instance in ``__init__`` (the methods
below document them and give mypy their signatures): the publish and dispatch paths pay no delegation call.
The managed ledger sees the store only through :class:`~quasar.storage.port.MessageStorePort`.

**Read visibility guarantee** (what the managed ledger relies on): when ``wait_flushed(end)`` resolves for a
put, that put's consume queue unit exists and ``get`` returns the record (the unit is written before ``put``
returns, so before the future can exist). Query by key may lag a few ms (reput thread). Recovery: recovery.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.checkpoint import StoreCheckpoint, create_abort_file, remove_abort_file
from quasar.storage.clean_service import CleanResult, DiskUsage, StoreRetention, statvfs_disk_usage
from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig, consume_queue_file_budget
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher
from quasar.storage.errors import StoreClosedError, StoreLockedError
from quasar.storage.file_cache import MappedFileCache
from quasar.storage.flush import FlushCallback, FlushDiskType
from quasar.storage.index_service import IndexService, KeyExtractor
from quasar.storage.mapped_file import fsync_dir, offset_to_file_name
from quasar.storage.queue_deletion import QueueDeletion
from quasar.storage.read_path import DEFAULT_MAX_GET_BYTES, StoreReader
from quasar.storage.record import ipv4_host
from quasar.storage.recovery import RecoveryResult, recover
from quasar.storage.replica_path import ReplicaFacade, StoreReplica
from quasar.storage.reput import ReputMessageService
from quasar.storage.results import (
    GetResult,
    PutBatchResult,
    PutResult,
    StoredMessage,
    StoreStatistics,
)
from quasar.storage.status import GetStatus, PutStatus
from quasar.storage.store_flushing import StoreFlusher
from quasar.storage.store_parts import StoreParts
from quasar.storage.store_state import StorePhase, StoreState
from quasar.storage.write_path import StoreWriter

if TYPE_CHECKING:
    from quasar.storage.port import MessageStorePort

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

T = TypeVar("T")


class MessageStore(ReplicaFacade):
    """The RocketMQ-style store (commit log, consume queues, checkpoint, flush services; replication from its
    base :class:`~quasar.storage.replica_path.ReplicaFacade`); a :class:`~quasar.storage.port.MessageStorePort`."""

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
        self.file_cache = MappedFileCache(max(1, config.max_open_consume_queue_files))  # budget set at open
        cq_root, cq_file_size = root / "consumequeue", config.consume_queue_file_size
        self.consume_queues = ConsumeQueueStore(cq_root, cq_file_size, self.file_cache)
        self._consume_queue_dispatcher = ConsumeQueueDispatcher(self.consume_queues)
        self.dispatchers: list[Dispatcher] = [self._consume_queue_dispatcher]
        """Derived stores fed inline by every put and by recovery; append more before ``open()`` (the
        consume queue dispatcher stays first)."""
        self.checkpoint: StoreCheckpoint | None = None
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
        self.last_exit_ok: bool | None = None
        """After ``open()``: False when the abort file showed an unclean exit."""
        self.recovery: RecoveryResult | None = None
        """After ``open()``: what recovery did (scan start and why, process offset)."""
        self._state = StoreState()
        self._lock_fd = -1
        self._writer = StoreWriter(
            config,
            self.commit_log,
            self.consume_queues,
            self.dispatchers,
            self._consume_queue_dispatcher,
            self._state,
        )
        self._reader = StoreReader(
            config, self.commit_log, self.consume_queues, self.index_service, self._state
        )
        parts = StoreParts(
            config,
            self.commit_log,
            self.consume_queues,
            self.index_service,
            self._writer,
            self.async_dispatchers,
            self._state,
        )
        self.flusher = StoreFlusher(parts)
        self.retention = StoreRetention(parts, disk_usage)
        self._replica = StoreReplica(parts, self.dispatchers, self.flusher, self.retention, self.allocator)
        self.delete_queue = QueueDeletion(parts, self.retention.run_on_loop, self.flusher.consume_queues_held,
                                          self.retention.clean_lock, lambda: self.checkpoint).delete_queue  # fmt: skip
        # The publish and dispatch paths call the parts directly: no delegation frame per call.
        self.put = self._writer.put  # type: ignore[method-assign]  # same signature, bound once
        self.put_batch = self._writer.put_batch  # type: ignore[method-assign]  # same signature, bound once
        self.get = self._reader.get  # type: ignore[method-assign]  # same signature, bound once
        self.wait_flushed = self.flusher.wait_flushed  # type: ignore[method-assign]  # same signature
        self.on_flushed = self.flusher.on_flushed  # type: ignore[method-assign]  # same signature

    def __repr__(self) -> str:
        return f"MessageStore({self.config.root_dir}, {self._state.phase}, max_offset={self.commit_log.max_offset})"

    # -- life cycle ------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory, load the files and recover (normal or abnormal per the abort file). Blocking.

        Raises :class:`StoreLockedError` when another store has the directory open, :class:`StoreLoadError`
        when the files do not fit the configuration, OSError on I/O failure.
        """
        if self._state.phase is not StorePhase.NEW:
            raise StoreClosedError(f"open() called on a {self._state.phase} store")
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
            self._load_and_recover()
            create_abort_file(root / "abort")
            self.allocator.start()
            file_queue = self.commit_log.mapped_file_queue
            last = file_queue.last_mapped_file  # the next segment (or the first one) is created off the loop
            next_start = last.end_offset if last is not None else 0
            self.allocator.pre_allocate(file_queue.store_path / offset_to_file_name(next_start))
        except BaseException:
            self._release_files()
            raise
        self._state.phase = StorePhase.OPEN

    def _load_and_recover(self) -> None:
        """Map the files, recover (semantics.md A6) and hand the parts what recovery found. Blocking."""
        root = self.config.root_dir
        for path in (self.commit_log.mapped_file_queue.store_path, self.consume_queues.root):
            path.mkdir(exist_ok=True)
        fsync_dir(root)
        self.last_exit_ok = last_exit_ok = not (root / "abort").exists()
        self.checkpoint = checkpoint = StoreCheckpoint(root / "checkpoint")
        self.file_cache.set_owner(consume_queue_file_budget(self.config))  # recovery maps on this thread
        self.commit_log.load()
        self.consume_queues.load()
        if self.config.message_index_enable:
            self.index_service.load(last_exit_ok=last_exit_ok)
        started = time.monotonic()
        result = recover(
            self.commit_log,
            self.consume_queues,
            checkpoint,
            self.dispatchers,
            self._consume_queue_dispatcher,
            last_exit_ok=last_exit_ok,
            check_crc=self.config.check_crc_on_recover,
            require_prop_crc=self.config.force_verify_prop_crc,
        )
        self.recovery = result
        self._writer.resume(
            result.process_offset,
            result.units,
            max(
                result.last_store_timestamp, checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp
            ),
        )
        reput_from = self.index_service.recover_from(self.commit_log.min_offset, last_exit_ok=last_exit_ok)
        self.reput = ReputMessageService(
            self.commit_log,
            self.async_dispatchers,
            min(reput_from, self.commit_log.max_offset),
            on_error=self._on_reput_error,
        )
        self.flusher.open(checkpoint, self.reput)
        self._replica.open(checkpoint, self.reput)  # loads the epoch file
        self.retention.open(self.reput)
        log.info(
            "message store %s recovered in %.1f ms (%s exit; %s)",
            root,
            (time.monotonic() - started) * 1000,
            "clean" if last_exit_ok else "UNCLEAN",
            result,
        )

    async def start(self) -> None:
        """Start the flush threads, bound to the running loop (where ``wait_flushed`` futures live), the
        reput thread and the clean thread. Raises :class:`StoreClosedError` when not open, RuntimeError when
        already started."""
        self._check_open()
        loop = asyncio.get_running_loop()
        self.file_cache.set_owner()
        self.flusher.start(loop)
        if self.reput is not None and self.async_dispatchers:
            self.reput.start()
        self.retention.start(loop)

    async def close(self) -> None:
        """Stop the flush threads, flush everything, write the checkpoint, remove the abort file (the blocking
        parts run in the default executor). Pending ``wait_flushed`` futures resolve. Idempotent.
        """
        if self._state.phase is not StorePhase.OPEN:
            return
        self._state.phase = StorePhase.CLOSING
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._shutdown_and_flush)
        finally:
            if self.flusher.loop is loop:
                self.flusher.release_waiters()
            await loop.run_in_executor(None, self._release_files)

    def close_sync(self) -> None:
        """Blocking :meth:`close`, for use without a running loop (or from a thread other than the loop's)."""
        if self._state.phase is not StorePhase.OPEN:
            return
        self._state.phase = StorePhase.CLOSING
        try:
            self._shutdown_and_flush()
        finally:
            self.flusher.release_waiters()
            self._release_files()

    def _shutdown_and_flush(self) -> int:
        self.retention.shutdown()
        self.flusher.shutdown()
        if self.reput is not None:
            self.reput.shutdown()
        if not self._state.writable:
            return self.commit_log.flushed_offset
        try:
            if self.reput is not None and self.async_dispatchers and not self._state.reput_failed:
                self.reput.do_reput()  # dispatch what is left (RocketMQ: dispatchBehindBytes() == 0)
            self.flusher.flush_consume_queues(0)
        except BaseException:
            self._state.writable = False  # the abort file stays: the next open recovers abnormally
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
        self._state.phase = StorePhase.CLOSED

    def _check_open(self) -> None:
        if not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")

    def _on_reput_error(self, exc: BaseException) -> None:
        log.error("message store: the reput service failed; the index stops growing until reopened: %r", exc)
        self._state.reput_failed = True

    # -- write path (StoreWriter; put and put_batch are bound onto the instance in __init__) -----------------

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
        """:meth:`StoreWriter.put <quasar.storage.write_path.StoreWriter.put>`: append one record and its
        consume queue unit; does not wait for the disk."""
        return self._writer.put(
            topic,
            queue_id,
            body,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )

    def put_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutBatchResult:
        """:meth:`StoreWriter.put_batch <quasar.storage.write_path.StoreWriter.put_batch>`: one record per
        body, consecutive queue offsets, one segment; does not wait for the disk."""
        return self._writer.put_batch(
            topic,
            queue_id,
            bodies,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )

    def wait_flushed(self, commit_log_offset_end: int) -> Awaitable[PutStatus]:
        """:meth:`StoreFlusher.wait_flushed <quasar.storage.store_flushing.StoreFlusher.wait_flushed>`: PUT_OK
        once the commit log is durable up to ``commit_log_offset_end`` (bytes)."""
        return self.flusher.wait_flushed(commit_log_offset_end)

    def on_flushed(self, commit_log_offset_end: int, callback: FlushCallback) -> None:
        """:meth:`StoreFlusher.on_flushed <quasar.storage.store_flushing.StoreFlusher.on_flushed>`:
        ``callback(status)`` once the commit log is durable up to ``commit_log_offset_end`` (no future)."""
        self.flusher.on_flushed(commit_log_offset_end, callback)

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
        status = await self.wait_flushed(result.commit_log_offset + result.wrote_bytes)
        return result if status is PutStatus.PUT_OK else result._replace(status=status)

    async def put_batch_and_wait(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutBatchResult:
        """:meth:`put_batch`, then ONE :meth:`wait_flushed` of the batch's end (RocketMQ: one
        ``GroupCommitRequest`` per batch); the result carries the flush status."""
        result = self.put_batch(
            topic,
            queue_id,
            bodies,
            properties=properties,
            tag_hash=tag_hash,
            born_timestamp_ms=born_timestamp_ms,
        )
        if result.status is not PutStatus.PUT_OK:
            return result
        status = await self.wait_flushed(result.end_offset)
        return result if status is PutStatus.PUT_OK else dataclasses.replace(result, status=status)

    # -- read path (StoreReader; get is bound onto the instance in __init__) ----------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int = DEFAULT_MAX_GET_BYTES,
    ) -> GetResult:
        """:meth:`StoreReader.get <quasar.storage.read_path.StoreReader.get>`: up to ``max_count`` messages from
        ``queue_offset`` on, bodies as zero-copy memoryviews."""
        return self._reader.get(topic, queue_id, queue_offset, max_count, max_bytes)

    def get_by_offset(self, commit_log_offset: int, size: int) -> StoredMessage:
        """The record at ``commit_log_offset`` of ``size`` bytes (:meth:`~.read_path.StoreReader.get_by_offset`)."""
        return self._reader.get_by_offset(commit_log_offset, size)

    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_num: int = 32
    ) -> list[StoredMessage]:
        """Messages of ``topic`` under ``key`` stored in [begin_ms, end_ms] (:meth:`~.read_path.StoreReader.query`)."""
        return self._reader.query(topic, key, begin_ms, end_ms, max_num)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        return self._reader.max_queue_offset(topic, queue_id)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still held (0 for an unknown queue)."""
        return self._reader.min_queue_offset(topic, queue_id)

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a consume queue, sorted."""
        return self._reader.queues()

    @property
    def corrupt_records_skipped(self) -> int:
        """Records skipped by ``get`` because their body CRC did not match (bit rot)."""
        return self._reader.corrupt_records_skipped

    @property
    def min_commit_log_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_commit_log_offset(self) -> int:
        """End of the written commit log (bytes)."""
        return self.commit_log.max_offset

    @property
    def flushed_commit_log_offset(self) -> int:
        """End of the fdatasynced commit log (bytes)."""
        return self.commit_log.flushed_offset

    # -- flushing (StoreFlusher) ------------------------------------------------------------------------------

    def flush(self) -> int:
        """fdatasync the commit log, every consume queue, then the checkpoint; returns the flushed commit log
        offset (bytes). Blocking (off the event loop). Raises :class:`StoreClosedError`, OSError."""
        self._check_open()
        self.flusher.flush_consume_queues(0)
        return self.commit_log.flushed_offset

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Flush the consume queues; a thorough round (0) also the index, the commit log and the checkpoint
        (:meth:`~quasar.storage.store_flushing.StoreFlusher.flush_consume_queues`). Blocking."""
        self.flusher.flush_consume_queues(least_pages)

    # -- retention (StoreRetention) ---------------------------------------------------------------------------

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Units of (topic, queue id) below ``queue_offset`` are no longer needed (retention may reclaim them);
        never moves back (:meth:`~quasar.storage.clean_service.StoreRetention.set_queue_min_offset`)."""
        self.retention.set_queue_min_offset(topic, queue_id, queue_offset)

    @property
    def queue_min_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, queue id): the offset given to :meth:`set_queue_min_offset` (do not mutate)."""
        return self.retention.queue_min_offsets

    def clean_once(self, *, now_s: float | None = None, force: bool = False) -> CleanResult:
        """One round of the clean service; ``force`` deletes expired files at any hour (RocketMQ's manual
        deletion). Blocking: the clean thread, or a test."""
        return self.retention.clean_once(now_s=now_s, force=force)

    def run_on_loop(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the store's event loop thread and return its result (blocking from another
        thread; directly before ``start()``)."""
        return self.retention.run_on_loop(action)

    # -- state -------------------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._state.is_open

    @property
    def dispatched_commit_log_offset(self) -> int:
        """End of the records whose consume queue units are written (bytes)."""
        return self._writer.dispatch_mark[0]

    @property
    def writable(self) -> bool:
        """False after an I/O failure: puts answer SERVICE_NOT_AVAILABLE until the store is reopened."""
        return self._state.writable

    @property
    def disk_full(self) -> bool:
        """The disk guard refuses puts (disk use above ``disk_space_warning_level_ratio``)."""
        return self._state.disk_full

    @property
    def disk_full_refusals(self) -> int:
        """Puts refused because the disk is full (guard ratio or ENOSPC)."""
        return self._state.disk_full_refusals

    @property
    def open_files_refusals(self) -> int:
        """Puts refused, transiently, because the process had too many open files (EMFILE / ENFILE)."""
        return self._state.open_files_refusals

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            min_commit_log_offset=self.commit_log.min_offset,
            max_commit_log_offset=self.commit_log.max_offset,
            flushed_commit_log_offset=self.commit_log.flushed_offset,
            dispatched_commit_log_offset=self._writer.dispatch_mark[0],
            consume_queues=len(self.consume_queues),
            group_commit_rounds=self.flusher.group_commit_rounds,
            pending_flush_waiters=self.flusher.pending_waiters,
            writable=self._state.writable,
            dispatch_behind_bytes=self.reput.dispatch_behind_bytes if self.reput is not None else 0,
            disk_full=self._state.disk_full,
        )


if TYPE_CHECKING:

    def _satisfies_the_port(store: MessageStore) -> MessageStorePort:
        return store  # mypy checks MessageStore against the ledger's port here
