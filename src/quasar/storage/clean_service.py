"""Retention and the disk guard (RocketMQ ``DefaultMessageStore.CleanCommitLogService``,
``CleanConsumeQueueService`` and ``MappedFileQueue.deleteExpiredFileByTime``, semantics.md A8).

Every ``clean_resource_interval_ms`` the :class:`CleanService` thread:

1. reads the disk use of the store's file system (``used / total`` from ``statvfs``; a seam for tests) and
   sets the **disk guard**: above ``disk_space_warning_level_ratio`` (90 %) the store is *disk full* and puts
   answer ``SERVICE_NOT_AVAILABLE`` (the broker turns that into a SEND_ERROR) until the ratio is back under it.
   Independently, a put that cannot reserve disk blocks (``ENOSPC`` from ``posix_fallocate``) is refused the
   same way (that put only: the next one tries again, the flag stays the guard's) and counted in
   ``disk_full_refusals``. Nothing is ever half-written: space is reserved before bytes go into a mapping.
2. deletes **commit log segments**, oldest first, at most ``delete_file_batch_max`` per round, never the
   current (last) one, stopping at the first segment that must stay. A segment may go when every record in it
   is
   - no longer needed by any queue: below the commit log offset of each queue's first needed unit (a queue
     needs its units from ``max(min offset, the offset given to set_queue_min_offset)`` on; a queue never
     told needs everything it holds; a queue not loaded since the open needs everything from its first unit),
   - already flushed and dispatched to the index,
   - and expired: its last write is older than ``file_reserved_time_h``; deletion of expired segments runs
     at the ``delete_when`` hours or when disk use passes ``disk_max_used_space_ratio``; past
     ``disk_space_clean_forcibly_ratio`` (with ``clean_file_forcibly_enable``) age does not matter.
3. deletes **consume queue files** wholly below the queue's needed offset or pointing only below the commit
   log's new minimum (never a queue's last file; loaded queues only: the others wait until first used), and
   index files whose records are all gone.

Files leave the segment lists on the event loop thread (the store reads them there) and are unmapped and
unlinked afterwards on this thread.

:class:`StoreRetention` is the part of :class:`~quasar.storage.message_store.MessageStore` that owns this:
the clean thread (started with the store, stopped at close), the per-queue needed offsets and the disk guard
(the ``disk_full`` flag of the shared :class:`~quasar.storage.store_state.StoreState`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from quasar.storage.config import parse_delete_when
from quasar.storage.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from quasar.storage.errors import StoreClosedError
from quasar.storage.flush import ServiceThread
from quasar.storage.mapped_file import MappedFile, fsync_dir
from quasar.storage.reput import ReputMessageService
from quasar.storage.store_parts import StoreParts

log = logging.getLogger(__name__)

DiskUsage = Callable[[Path], float]
"""``disk_usage(path) -> ratio`` in [0, 1] of the file system holding ``path``."""

NO_LIMIT = 2**63 - 1
T = TypeVar("T")


def statvfs_disk_usage(path: Path) -> float:
    """Used fraction of the file system of ``path`` (RocketMQ ``UtilAll.getDiskPartitionSpaceUsedPercent``)."""
    stat = os.statvfs(path)
    total = stat.f_blocks * stat.f_frsize
    if total <= 0:
        return 0.0
    free = stat.f_bavail * stat.f_frsize
    return max(0.0, min(1.0, (total - free) / total))


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one clean round did: the disk use it saw and how many files of each kind it deleted."""

    disk_ratio: float
    disk_full: bool
    commit_log_files: int
    consume_queue_files: int
    index_files: int


class CleanService(ServiceThread):
    """Runs ``clean_round()`` (:meth:`StoreRetention.clean_once`) every ``interval_ms`` (milliseconds); an
    OSError is logged and the round retried at the next interval."""

    def __init__(self, clean_round: Callable[[], object], interval_ms: int) -> None:
        super().__init__("quasar-clean", self._report)
        self._clean_round = clean_round
        self._interval_s = interval_ms / 1000

    def _report(self, exc: BaseException) -> None:
        log.error("clean service stopped: %r", exc)

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(self._interval_s)
            self._wakeup.clear()
            if self._stopped.is_set():
                return
            try:
                self._clean_round()
            except OSError as exc:  # retried next round
                log.error("clean round failed: %r", exc)


def call_on_loop(loop: asyncio.AbstractEventLoop | None, action: Callable[[], T]) -> T:
    """Run ``action`` on ``loop``'s thread and return its result (or raise its exception); directly when there
    is no loop or this is its thread. Blocking from another thread (30 s at most); raises
    :class:`StoreClosedError` when the loop is closed."""
    if loop is None:
        return action()
    try:
        if asyncio.get_running_loop() is loop:
            return action()
    except RuntimeError:
        pass

    async def run() -> T:
        return action()

    coroutine = run()
    try:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coroutine, loop)
    except RuntimeError:
        coroutine.close()
        raise StoreClosedError("the event loop of the store is closed") from None
    return future.result(30)


def queue_needed_commit_log_offset(queue: ConsumeQueue, min_needed_queue_offset: int) -> int:
    """Commit log offset of the first record ``queue`` still needs (its unit at ``min_needed_queue_offset``,
    clamped to what it holds), or :data:`NO_LIMIT` when it needs none."""
    offset = max(queue.min_offset, min_needed_queue_offset)
    if offset >= queue.max_offset:
        return NO_LIMIT
    unit = queue.get_unit(offset)
    return unit.commit_log_offset if unit is not None else NO_LIMIT


def is_delete_hour(delete_when: str, now_s: float) -> bool:
    """RocketMQ ``UtilAll.isItTimeToDo``: the local hour of ``now_s`` is one of ``delete_when``."""
    return time.localtime(now_s).tm_hour in parse_delete_when(delete_when)


def deletable_commit_log_files(
    files: list[MappedFile],
    *,
    limit_offset: int,
    expired: Callable[[MappedFile], bool],
    batch_max: int,
) -> list[MappedFile]:
    """The oldest files (never the last) that end at or below ``limit_offset`` and are ``expired``, stopping
    at the first one that is not, at most ``batch_max``."""
    result: list[MappedFile] = []
    for mapped_file in files[:-1]:
        if len(result) >= batch_max or mapped_file.end_offset > limit_offset or not expired(mapped_file):
            break
        result.append(mapped_file)
    return result


def deletable_consume_queue_files(
    queue: ConsumeQueue, min_needed_queue_offset: int, commit_log_min: int
) -> int:
    """How many leading files of ``queue`` (never the last) hold only units below ``min_needed_queue_offset``
    or only units of records below ``commit_log_min``."""
    files = queue.mapped_file_queue.mapped_files
    count = 0
    for mapped_file in files[:-1]:
        last_queue_offset = mapped_file.end_offset // CQ_STORE_UNIT_SIZE - 1
        unit = queue.get_unit(last_queue_offset)
        below_needed = last_queue_offset < min_needed_queue_offset
        below_log = unit is not None and unit.commit_log_offset + unit.size <= commit_log_min
        if not (below_needed or below_log or last_queue_offset < queue.min_offset):
            break
        count += 1
    return count


def destroy_files(files: list[MappedFile], directory: Path) -> None:
    """Unmap and unlink detached files, then fsync their directory. Blocking."""
    for mapped_file in files:
        log.info("retention: deleting %s", mapped_file.path)
        mapped_file.destroy()
    if files and directory.is_dir():
        fsync_dir(directory)


class StoreRetention:
    """Retention and the disk guard of one store: the clean thread, the per-queue needed offsets
    (``set_queue_min_offset``) and :meth:`clean_once`.

    Given the commit log, the consume queues, the index, the writer (its dispatch mark bounds what may go),
    the reput thread's dispatchers, the shared :class:`StoreState` (the disk guard sets ``disk_full``) and
    ``disk_usage``; the reput service comes at :meth:`open`, the event loop (where segment lists change) at
    :meth:`start`.
    """

    def __init__(self, parts: StoreParts, disk_usage: DiskUsage) -> None:
        self._config = parts.config
        self._commit_log = parts.commit_log
        self._consume_queues = parts.consume_queues
        self._index_service = parts.index_service
        self._writer = parts.writer
        self._async_dispatchers = parts.async_dispatchers
        self._state = parts.state
        self.disk_usage = disk_usage
        self.queue_min_offsets: dict[tuple[str, int], int] = {}
        """Per (topic, queue id): units below this queue offset are not needed (``set_queue_min_offset``)."""
        self.clean_lock = threading.Lock()
        """Serializes clean rounds (the clean thread and a caller of :meth:`clean_once`)."""
        self._reput: ReputMessageService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._service = CleanService(self.clean_once, parts.config.clean_resource_interval_ms)

    def open(self, reput: ReputMessageService) -> None:
        """Take the reput service: records it has not indexed yet stay (the store's ``open()``)."""
        self._reput = reput

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the clean thread; segment lists are changed on ``loop``'s thread."""
        self._loop = loop
        self._service.start()

    def shutdown(self) -> None:
        """Stop the clean thread (a round in progress finishes). Blocking."""
        self._service.shutdown()

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Consume queue units of (topic, queue id) below ``queue_offset`` are no longer needed by the managed
        ledger: retention may delete them and the commit log records only they point at. Never moves back (a
        lower value than before is ignored). Not persisted: after a restart every unit is needed until this
        is called again. Loop thread."""
        key = (topic, queue_id)
        if queue_offset > self.queue_min_offsets.get(key, 0):
            self.queue_min_offsets[key] = queue_offset

    def run_on_loop(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the store's event loop thread (where segment lists are read) and return its
        result (:func:`call_on_loop`)."""
        return call_on_loop(self._loop, action)

    def clean_once(self, *, now_s: float | None = None, force: bool = False) -> CleanResult:
        """One clean round at wall-clock ``now_s`` (seconds; now by default); see the module docstring.
        ``force`` deletes expired files at any hour (RocketMQ's manual deletion). Rounds are serialized.
        Blocking: the clean thread, or a test. Raises OSError when a file cannot be deleted."""
        with self.clean_lock:
            return self._clean(time.time() if now_s is None else now_s, force)

    def _clean(self, now_s: float, force: bool) -> CleanResult:
        config = self._config
        ratio = self.disk_usage(config.root_dir)
        full = self._guard(ratio)
        forcibly = config.clean_file_forcibly_enable and ratio > config.clean_forcibly_ratio
        time_to_delete = force or forcibly or ratio > config.disk_max_used_space_ratio / 100
        time_to_delete = time_to_delete or is_delete_hour(config.delete_when, now_s)
        commit_log_deleted = consume_queue_deleted = 0
        if time_to_delete and self._state.is_open:
            commit_log_deleted = self._delete_commit_log_files(now_s, forcibly)
        if self._state.is_open:
            consume_queue_deleted = self._delete_consume_queue_files()
        index_deleted = self._index_service.delete_expired(self._commit_log.min_offset)
        return CleanResult(ratio, full, commit_log_deleted, consume_queue_deleted, index_deleted)

    def _guard(self, ratio: float) -> bool:
        """Set the disk guard from the disk use ``ratio``; True when the disk counts as full."""
        config = self._config
        full = ratio > config.warning_level_ratio
        if full != self._state.disk_full:
            if full:
                log.error(
                    "disk use %.1f%% is above %.0f%%: refusing writes",
                    ratio * 100,
                    config.warning_level_ratio * 100,
                )
            else:
                log.warning("disk use %.1f%%: accepting writes again", ratio * 100)
            self._state.disk_full = full
        return full

    def _delete_commit_log_files(self, now_s: float, forcibly: bool) -> int:
        file_queue = self._commit_log.mapped_file_queue
        reserved_s = self._config.file_reserved_time_h * 3600

        def expired(mapped_file: MappedFile) -> bool:
            return forcibly or now_s >= os.stat(mapped_file.path).st_mtime + reserved_s

        candidates = deletable_commit_log_files(
            file_queue.mapped_files,
            limit_offset=self.needed_commit_log_offset(),
            expired=expired,
            batch_max=self._config.delete_file_batch_max,
        )
        if not candidates:
            return 0

        def detach() -> list[MappedFile]:  # only if they are still the oldest files
            if file_queue.mapped_files[: len(candidates)] != candidates:
                return []
            return file_queue.detach_first(len(candidates))

        detached = self.run_on_loop(detach)
        destroy_files(detached, file_queue.store_path)
        return len(detached)

    def _delete_consume_queue_files(self) -> int:
        commit_log_min = self._commit_log.min_offset
        deleted = 0
        for queue in self._consume_queues:
            needed = self.queue_min_offsets.get((queue.topic, queue.queue_id), 0)
            count = deletable_consume_queue_files(queue, needed, commit_log_min)
            if count:
                detached = self.run_on_loop(functools.partial(queue.delete_first_files, count))
                destroy_files(detached, queue.mapped_file_queue.store_path)
                deleted += len(detached)
        return deleted

    def needed_commit_log_offset(self) -> int:
        """Commit log offset below which no queue needs a record, and everything is flushed and dispatched
        (to the consume queues inline, to the index by the reput thread)."""
        limit = min(self._commit_log.flushed_offset, self._writer.dispatch_mark[0])
        if self._reput is not None and self._async_dispatchers:
            limit = min(limit, self._reput.reput_from_offset)
        # queues not loaded since the open first (one loading meanwhile is then seen at least once)
        unloaded = self._consume_queues.unloaded_first_commit_log_offset()
        if unloaded is not None:
            limit = min(limit, unloaded)
        for queue in self._consume_queues:
            needed = self.queue_min_offsets.get((queue.topic, queue.queue_id), 0)
            limit = min(limit, queue_needed_commit_log_offset(queue, needed))
        return limit
