"""Cutting a replica's commit log back to the last offset it shares with its new master (RocketMQ 5
``DefaultMessageStore.truncateFiles`` after ``AutoSwitchHAClient`` compared epochs; reference/cluster.md
section 4): :func:`truncate_store`, called by ``MessageStore.truncate_commit_log``.

Everything at and after the cut goes, nothing before it changes, and a restart (clean or after a crash at any
step) never brings the tail back. The steps, in this order, with the flush threads, the reput thread and the
clean thread paused:

1. the commit log and the consume queues are flushed (what stays is durable before its positions are reset);
2. the checkpoint's ``logics_flushed_offset`` / ``logics_flushed_units`` and ``index_flushed_offset`` move
   back to the cut at most, durably (recovery never starts past the cut);
3. the index forgets items pointing at or past the cut (:meth:`IndexService.truncate
   <quasar.storage.index_service.IndexService.truncate>`), durably;
4. the consume queues drop the units of records at or past the cut (``truncate_dirty``);
5. the pre-allocated next segment is deleted (it would lie past a gap), then the commit log is cut: later
   segments deleted, the tail of the segment holding the cut zeroed (``truncate_dirty_files``);
6. the reput position, the writer's dispatch mark and the epoch file (:meth:`EpochFile.truncate_from
   <quasar.storage.epoch_file.EpochFile.truncate_from>`) follow; the next segment is pre-allocated again.

A crash before step 5 leaves the old tail in the commit log: recovery re-dispatches it (the checkpoint is
below the cut) and the store is as before the call, so the caller truncates again. A crash after it leaves the
cut in place; ``open()`` drops epoch entries starting past the commit log's end.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.commit_log import CommitLog
from quasar.storage.dispatch import ConsumeQueueStore
from quasar.storage.epoch_file import EpochFile
from quasar.storage.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreClosedError,
    StoreNotWritableError,
)
from quasar.storage.index_service import IndexService
from quasar.storage.mapped_file import fsync_dir, offset_to_file_name
from quasar.storage.record import PHYSICAL_OFFSET_POSITION, CheckStatus, check_record
from quasar.storage.reput import ReputMessageService
from quasar.storage.store_flushing import StoreFlusher
from quasar.storage.store_state import StoreState

log = logging.getLogger("quasar.storage.message_store")

__all__ = ["TruncateParts", "truncate_store"]

_OFFSET = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class TruncateParts:
    """What a truncation touches: the store's files, the services it pauses, the epoch file and the state."""

    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    index_service: IndexService
    checkpoint: StoreCheckpoint
    reput: ReputMessageService
    flusher: StoreFlusher
    clean_lock: threading.Lock
    allocator: AllocateMappedFileService
    resync_writer: Callable[[], None]
    epoch_file: EpochFile
    state: StoreState


def check_boundary(commit_log: CommitLog, offset: int) -> None:
    """Raise unless ``offset`` is in ``[min, max]`` commit log offset (:class:`OffsetOutOfRangeError`) and a
    record boundary: the max offset, a blank end-of-file record, or a record whose PHYSICALOFFSET field names
    ``offset`` (:class:`CorruptRecordError`)."""
    low, high = commit_log.min_offset, commit_log.max_offset
    if type(offset) is not int or not low <= offset <= high:
        raise OffsetOutOfRangeError(f"commit log offset {offset!r} is outside [{low}, {high}]")
    if offset == high:
        return
    mapped_file = commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
    if mapped_file is not None:
        position = offset - mapped_file.file_from_offset
        status, _ = check_record(mapped_file.buffer, position, mapped_file.wrote_position, check_crc=False)
        if status is CheckStatus.END_OF_FILE:
            return
        if (
            status is CheckStatus.VALID
            and _OFFSET.unpack_from(mapped_file.buffer, position + PHYSICAL_OFFSET_POSITION)[0] == offset
        ):
            return
    raise CorruptRecordError(f"commit log offset {offset} is not a record boundary", offset=offset)


def truncate_store(parts: TruncateParts, offset: int) -> None:
    """Drop every record at and after commit log ``offset`` (see the module docstring). Blocking.

    Raises :class:`StoreClosedError` when the store is not open, :class:`StoreNotWritableError` outside
    replica mode, :class:`OffsetOutOfRangeError` / :class:`CorruptRecordError` (nothing changed) for an offset
    that is not a record boundary in ``[min, max]``, OSError when a file operation fails (the store then
    refuses writes until reopened; recovery makes it consistent).
    """
    state = parts.state
    if not state.is_open:
        raise StoreClosedError(f"the message store is {state.phase}")
    if not state.replica:
        raise StoreNotWritableError("truncate_commit_log needs replica mode (set_replica_mode(True))")
    commit_log = parts.commit_log
    check_boundary(commit_log, offset)
    before = commit_log.max_offset
    try:
        with parts.clean_lock, parts.flusher.paused(), parts.reput.lock:
            _truncate(parts, offset)
    except BaseException:
        state.writable = False
        raise
    log.warning(
        "commit log truncated from %d back to %d (epoch file: %s)", before, offset, parts.epoch_file.entries
    )


def _truncate(parts: TruncateParts, offset: int) -> None:
    commit_log, consume_queues, checkpoint = parts.commit_log, parts.consume_queues, parts.checkpoint
    commit_log.flush(0)
    consume_queues.flush(0)
    if checkpoint.logics_flushed_offset > offset:
        checkpoint.logics_flushed_offset = offset
        checkpoint.logics_flushed_units = consume_queues.count_units_below_all(offset)
    checkpoint.index_flushed_offset = min(checkpoint.index_flushed_offset, offset)
    checkpoint.flush()
    parts.index_service.truncate(offset)
    consume_queues.truncate_dirty(offset)
    store_path = commit_log.mapped_file_queue.store_path
    parts.allocator.cancel_all()
    fsync_dir(store_path)
    holding = commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
    if holding is not None:  # readers checking the written position stop short of the tail from now on
        holding.wrote_position = holding.committed_position = min(
            holding.wrote_position, offset - holding.file_from_offset
        )
    commit_log.truncate_dirty_files(offset)
    reput = parts.reput
    reput.reput_from_offset = min(reput.reput_from_offset, offset)
    parts.resync_writer()
    parts.epoch_file.truncate_from(offset)
    last = commit_log.mapped_file_queue.last_mapped_file
    if last is not None:
        parts.allocator.pre_allocate(store_path / offset_to_file_name(last.end_offset))
