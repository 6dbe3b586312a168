"""Recovery at open (RocketMQ ``DefaultMessageStore.recover``, ``CommitLog.recoverNormally`` /
``recoverAbnormally``, semantics.md A6; first cut).

1. Consume queues: each finds its end (units while ``offset >= 0 and size > 0``, from the third-last file)
   when it is loaded: at open none is (:mod:`quasar.storage.consume_queue_store`), re-dispatch loads the queues
   that have records past the start point, the others load when first used.
2. Commit log: scanned with CRC checks (body CRC and the ``__CRC32#`` record CRC) from a start point to the first
   invalid record; that end is the *process offset*. The start point is the checkpoint's
   ``logics_flushed_offset`` (everything below it is on disk in the commit log and in the consume queues).
   Without a usable one: the third-last segment after a clean exit (RocketMQ 4.9), the first segment after an
   unclean one (the ``abort`` file was there) or when the checkpoint file is missing.
3. Consume queue units of records at or past the process offset are cut (``truncateDirtyLogicFiles``), then the
   commit log itself (``truncateDirtyFiles``: later segments deleted, the tail zeroed).
4. Every record from the start point to the process offset is re-dispatched to every dispatcher (idempotent:
   existing units are left as is), which rebuilds the consume queues.

Consume queue files lost or cut *below* the checkpoint are caught two ways, and both re-dispatch from the first
segment instead: the queues hold fewer units below the checkpoint than ``logics_flushed_units`` says, or
re-dispatch meets a gap (a queue that would skip queue offsets). Counting every queue's units opens every queue,
so it is done only when a queue deletion was interrupted (its marker file is left in ``consumequeue/``, see
:mod:`quasar.storage.queue_deletion`): consume queue units below the checkpoint were fsynced before it was
written, so otherwise only files removed by hand could be missing, and of those only a ``consumequeue``
directory with no queue at all is noticed at open (remove the ``checkpoint`` file to force a rebuild).
With no commit log file at all, every consume queue is destroyed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.commit_log import CommitLog
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher, DispatchRequest
from quasar.storage.errors import ConsumeQueueGapError, StoreLoadError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """Where recovery left the store: ``process_offset`` (end of the valid commit log, bytes), ``units`` (consume
    queue units present), ``last_store_timestamp`` (ms, of the last re-dispatched record, else 0), and the scan
    ``start`` offset with the ``reason`` it was chosen."""

    process_offset: int
    units: int
    last_store_timestamp: int
    start: int
    reason: str


def recover(
    commit_log: CommitLog,
    consume_queues: ConsumeQueueStore,
    checkpoint: StoreCheckpoint,
    dispatchers: Sequence[Dispatcher],
    consume_queue_dispatcher: ConsumeQueueDispatcher,
    *,
    last_exit_ok: bool,
    check_crc: bool = True,
    require_prop_crc: bool = True,
) -> RecoveryResult:
    """Recover loaded commit log and consume queues as described in the module docstring. Blocking.

    Raises :class:`StoreLoadError` when the consume queues cannot be made to match the commit log, OSError on
    I/O failure.
    """
    consume_queues.recover()
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        if len(consume_queues):
            log.warning("no commit log file: destroying %d consume queues", len(consume_queues))
            consume_queues.destroy()
        checkpoint.logics_flushed_offset = checkpoint.logics_flushed_units = 0
        return RecoveryResult(0, 0, 0, 0, "empty")
    min_offset = commit_log.min_offset
    confirmed = checkpoint.logics_flushed_offset
    if checkpoint.existed and min_offset <= confirmed <= files[-1].end_offset:
        start, reason = confirmed, "checkpoint"
    elif last_exit_ok and checkpoint.existed:
        start, reason = commit_log.recovery_start_offset(3), "third-last segment"
    else:
        start, reason = min_offset, "first segment"
    process_offset = commit_log.find_valid_end(start, check_crc=check_crc, require_prop_crc=require_prop_crc)
    log.info(
        "recovering %s store from commit log offset %d (%s): valid data ends at %d",
        "a cleanly closed" if last_exit_ok else "an abnormally exited",
        start,
        reason,
        process_offset,
    )
    consume_queues.truncate_dirty(process_offset)
    commit_log.truncate_dirty_files(process_offset)
    recorded = below = checkpoint.logics_flushed_units
    if reason == "checkpoint" and start > min_offset:
        if consume_queues.deletion_markers:  # a queue deletion was interrupted: count every queue
            present = below = consume_queues.count_units_below_all(start)
        else:  # flushed before the checkpoint: only a missing directory would be short (queues stay unloaded)
            present = recorded if len(consume_queues) or not recorded else 0
        if present < recorded:
            log.warning(
                "consume queues hold %d units below the checkpoint, which recorded %d: rebuilding them from "
                "the first commit log segment",
                present,
                recorded,
            )
            start, reason = min_offset, "consume queues short of the checkpoint"
    last_store_timestamp = 0
    try:
        # an empty queue may start past queue offset 0 only if nothing precedes it in the commit log, which
        # only a scan from the first segment can tell
        consume_queue_dispatcher.allow_pre_blank = start == min_offset
        consume_queue_dispatcher.units_dispatched = 0
        last_store_timestamp = _redispatch(commit_log, dispatchers, start, process_offset)
    except ConsumeQueueGapError as exc:
        log.warning("%s: rebuilding consume queues from the first commit log segment", exc)
        start, reason = min_offset, "gap in a consume queue"
        consume_queue_dispatcher.allow_pre_blank = True
        try:
            last_store_timestamp = _redispatch(commit_log, dispatchers, start, process_offset)
        except ConsumeQueueGapError as again:
            raise StoreLoadError(f"consume queues do not match the commit log: {again}") from again
    finally:
        consume_queue_dispatcher.allow_pre_blank = True
    if checkpoint.logics_flushed_offset > process_offset:
        checkpoint.logics_flushed_offset = checkpoint.logics_flushed_units = 0
    consume_queues.clear_deletion_markers()
    if reason == "checkpoint":  # units below the checkpoint as recorded, plus the ones re-dispatched after it
        units = below + consume_queue_dispatcher.units_dispatched
    else:
        units = consume_queues.total_units()
    return RecoveryResult(process_offset, units, last_store_timestamp, start, reason)


def _redispatch(commit_log: CommitLog, dispatchers: Sequence[Dispatcher], start: int, end: int) -> int:
    """Hand every record in ``[start, end)`` to every dispatcher; returns the last record's store timestamp."""
    count = 0
    last_store_timestamp = 0
    for record in commit_log.iter_records(start, end):
        request = DispatchRequest.from_record(record)
        for dispatcher in dispatchers:
            dispatcher.dispatch(request)
        last_store_timestamp = record.store_timestamp
        count += 1
    if count:
        log.info("re-dispatched %d records from commit log offset %d to %d", count, start, end)
    return last_store_timestamp
