"""The store's replication path (RocketMQ HA, reference/cluster.md sections 3-4): the master's raw commit log
reads, the replica's byte-for-byte appends, replica mode and epoch truncation: the :class:`StoreReplica`
object :class:`~quasar.storage.message_store.MessageStore` owns and delegates to.

- master: :meth:`StoreReplica.read_commit_log` hands out whole records from an offset (RocketMQ
  ``HAConnection.WriteSocketService`` reading ``getCommitLogData``), one segment at a time;
- replica: :meth:`StoreReplica.append_replicated` writes them at the same offsets in segments of the same
  names (RocketMQ ``HAClient.dispatchReadRequest`` -> ``appendToCommitLog``), builds the consume queue units
  inline as ``put`` does and wakes the reput thread for the index, so a replica's files equal its master's;
- :meth:`StoreReplica.set_replica_mode` gates ``put`` (a slave's ``putMessage`` answers
  SERVICE_NOT_AVAILABLE) and, on promotion, resyncs the write path from the consume queues;
- :meth:`StoreReplica.truncate_commit_log`: RocketMQ 5 ``DefaultMessageStore.truncateFiles`` after an epoch
  comparison (:func:`~quasar.storage.epoch_file.find_consistent_point`), in
  :mod:`quasar.storage.replica_truncate`.
"""

from __future__ import annotations

import errno
import logging
import struct
from dataclasses import dataclass

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.clean_service import StoreRetention
from quasar.storage.dispatch import Dispatcher, DispatchRequest
from quasar.storage.epoch_file import EpochFile
from quasar.storage.errors import (
    CorruptRecordError,
    DiskFullError,
    OffsetOutOfRangeError,
    ReplicaOffsetMismatchError,
    StoreClosedError,
    StoreNotWritableError,
)
from quasar.storage.mapped_file import MappedFile, fsync_dir
from quasar.storage.record import (
    BLANK_MAGIC_CODE,
    BODY_POSITION,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    PREFIX,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    CheckStatus,
    check_record,
    decode_record,
)
from quasar.storage.replica_truncate import TruncateParts, truncate_store
from quasar.storage.reput import ReputMessageService
from quasar.storage.store_flushing import StoreFlusher
from quasar.storage.store_parts import StoreParts
from quasar.storage.store_state import StoreState

log = logging.getLogger("quasar.storage.message_store")

__all__ = ["ReplicaFacade", "StoreReplica"]

_OFFSET = struct.Struct(">q")
"""PHYSICALOFFSET."""


@dataclass(slots=True)
class _Segment:
    """What :meth:`StoreReplica._scan` found valid for one segment: ``length`` bytes of ``data`` from its
    start, the dispatch requests of its records, the zero tail after a blank record that need not be copied
    (``skip_tail``), and the error that ended it early (None: the whole chunk is valid)."""

    length: int
    requests: list[DispatchRequest]
    skip_tail: int
    error: CorruptRecordError | None


class StoreReplica:
    """The replication path of one store: given the store's parts (commit log, consume queues, index,
    writer, shared :class:`StoreState`), the inline dispatchers (the store's list), the flushing (paused by a
    truncation, asked for a round after an append), the retention (its clean lock pauses the clean thread)
    and the segment allocator; owns the epoch file; the checkpoint and the reput service come at
    :meth:`open`."""

    def __init__(
        self,
        parts: StoreParts,
        dispatchers: list[Dispatcher],
        flusher: StoreFlusher,
        retention: StoreRetention,
        allocator: AllocateMappedFileService,
    ) -> None:
        self._parts = parts
        self._commit_log = parts.commit_log
        self._consume_queues = parts.consume_queues
        self._writer = parts.writer
        self._state = parts.state
        self._dispatchers = dispatchers
        self._flusher = flusher
        self._clean_lock = retention.clean_lock
        self._allocator = allocator
        self.epoch_file = EpochFile(parts.config.root_dir / "epoch")
        """``<store root>/epoch``, loaded by :meth:`open`."""
        self._checkpoint: StoreCheckpoint | None = None
        self._reput: ReputMessageService | None = None

    def open(self, checkpoint: StoreCheckpoint, reput: ReputMessageService) -> None:
        """Take the checkpoint and the reput service, load the epoch file and drop its entries starting past
        the recovered commit log's end (a torn tail; an entry starting exactly there is a master's fresh
        epoch and stays). The store's ``open()``, after recovery; blocking. Raises StoreLoadError for a bad
        epoch file."""
        self._checkpoint = checkpoint
        self._reput = reput
        self.epoch_file.load()
        self.epoch_file.truncate_from(self._commit_log.max_offset + 1)

    # -- master side ---------------------------------------------------------------------------------------

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw commit log bytes from ``offset`` for a replica: whole records only, up to about ``max_bytes``
        (bytes; at least one whole record, however big), never past the end of the segment holding
        ``offset``. When the next thing is the segment's blank end-of-file record, it comes with the rest of
        the segment up to its size (the replica's segment becomes byte-identical and the next read starts at
        the next segment's first offset); a blank after other records is added only when it fits in
        ``max_bytes``. ``b""`` when ``offset`` is the max offset. One copy (RocketMQ
        ``CommitLog.getData`` + ``HAConnection`` batches of ``haTransferBatchSize``).

        Loop thread. ``offset`` must be a record boundary in ``[min, max]`` commit log offset. Raises
        :class:`OffsetOutOfRangeError` outside that range, :class:`CorruptRecordError` when no valid record
        prefix (size, magic) starts at ``offset``, ValueError for ``max_bytes < 1``, :class:`StoreClosedError`.
        """
        if not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")
        if type(max_bytes) is not int or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive int: {max_bytes!r}")
        commit_log = self._commit_log
        low, high = commit_log.min_offset, commit_log.max_offset
        if type(offset) is not int or not low <= offset <= high:
            raise OffsetOutOfRangeError(f"commit log offset {offset!r} is outside [{low}, {high}]")
        if offset == high:
            return b""
        mapped_file = commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:  # retention removed it meanwhile
            raise OffsetOutOfRangeError(f"commit log offset {offset} has no segment file")
        buffer = mapped_file.buffer
        base = mapped_file.file_from_offset
        limit = mapped_file.wrote_position
        start = position = offset - base
        while position + PREFIX.size <= limit:
            size, magic = PREFIX.unpack_from(buffer, position)
            if magic == BLANK_MAGIC_CODE and size == mapped_file.file_size - position:
                if position == start or position + size - start <= max_bytes:
                    position += size
                break
            if (
                (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
                or size < BODY_POSITION + 3
                or size > limit - position
            ):
                break
            if position > start and position + size - start > max_bytes:
                break
            position += size
            if position - start >= max_bytes:
                break
        if position == start:
            raise CorruptRecordError(f"no valid record starts at commit log offset {offset}", offset=offset)
        return bytes(buffer[start:position])

    # -- replica mode ----------------------------------------------------------------------------------------

    def set_replica_mode(self, enabled: bool) -> None:
        """Enter (True) or leave (False) replica mode; loop thread, after ``open()``. Leaving it (promotion)
        resyncs the write path: the dispatch mark from the commit log's end and the consume queues' unit
        counts; each queue's next queue offset is read from its files by every put, so the next put of a queue
        continues right after its last replicated unit. Raises :class:`StoreClosedError` when not open."""
        state = self._state
        if not state.is_open:
            raise StoreClosedError(f"the message store is {state.phase}")
        if state.replica and not enabled:
            self.resync_writer()
        state.replica = bool(enabled)

    def truncate_commit_log(self, offset: int) -> None:
        """Drop every record at and after commit log ``offset`` (bytes, a record boundary in ``[min, max]``)
        with its consume queue units, index items and epoch entries (``start_offset >= offset``), durably;
        nothing before it changes (RocketMQ 5 ``DefaultMessageStore.truncateFiles``;
        :func:`~quasar.storage.replica_truncate.truncate_store` lists the steps and the crash cases).

        Blocking: run it in an executor while nothing appends. Loop-thread readers (``get``, ``query``) should
        be paused too: one racing with the cut may read a file being shrunk. Replica mode only. Raises
        :class:`StoreNotWritableError` outside replica mode, :class:`OffsetOutOfRangeError` /
        :class:`CorruptRecordError` for an offset outside ``[min, max]`` or not on a record boundary
        (nothing changed), :class:`StoreClosedError`, OSError (the store then refuses writes until reopened)."""
        if self._checkpoint is None or self._reput is None or not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")
        parts = self._parts
        truncate_store(
            TruncateParts(
                parts.commit_log,
                parts.consume_queues,
                parts.index_service,
                self._checkpoint,
                self._reput,
                self._flusher,
                self._clean_lock,
                self._allocator,
                self.resync_writer,
                self.epoch_file,
                self._state,
            ),
            offset,
        )

    def request_flush(self) -> None:
        """A flush round now, not waited for (:meth:`StoreFlusher.request_flush
        <quasar.storage.store_flushing.StoreFlusher.request_flush>`)."""
        self._flusher.request_flush()

    def resync_writer(self) -> None:
        """Point the writer's dispatch mark at the commit log's end and the units the consume queues hold."""
        units = self._consume_queues.total_units()
        writer = self._writer
        writer.resume(self._commit_log.max_offset, units, writer.last_store_timestamp)

    # -- replica side ----------------------------------------------------------------------------------------

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append bytes read from the master by :meth:`read_commit_log` at the same commit log ``offset``;
        returns the new max commit log offset (bytes). RocketMQ ``HAClient`` -> ``appendToCommitLog``.

        ``offset`` must equal the max commit log offset (an empty commit log, no segment at all, also accepts
        any segment-aligned offset: its first segment is named by it, as a RocketMQ 4.x slave starting from
        its master's last file). ``data``: whole records, possibly ending with a blank end-of-file record and
        the rest of its segment, possibly running into the following segments. Each record is validated
        before it is written (prefix, magic, size, layout, body and ``__CRC32#`` CRCs, its PHYSICALOFFSET
        field equal to where it goes, room for the blank record after it, its queue offset continuing its
        consume queue); records go into the mapping byte for byte, a segment boundary rolls to a new segment
        named by it, and each record's consume queue unit is built inline by the store's dispatchers (the tag
        hash from the TAG_HASH property, as recovery does), so the units equal the master's. The reput thread
        is woken for the index; a SYNC_FLUSH group commit round is requested (not waited for: a replica
        reports its written offset).

        Loop thread, replica mode only. Raises :class:`ReplicaOffsetMismatchError` (nothing written) for
        another offset; :class:`CorruptRecordError` at the first invalid record: the valid records of the
        same call before it ARE appended (and dispatched), nothing at or after it; :class:`DiskFullError`
        when no disk blocks can be reserved for a segment's records or their units, OSError when a segment
        cannot be created (the records of earlier segments of the call stay appended, nothing of that
        segment is written); :class:`StoreNotWritableError` outside replica mode or after an I/O failure, or
        when a dispatcher fails (the store then refuses writes until reopened; recovery rebuilds the units);
        :class:`StoreClosedError`; TypeError for ``data`` that is not bytes-like.
        """
        state = self._state
        if not state.is_open:
            raise StoreClosedError(f"the message store is {state.phase}")
        if not state.replica:
            raise StoreNotWritableError("append_replicated needs replica mode (set_replica_mode(True))")
        if not state.writable:
            raise StoreNotWritableError("the store refuses writes after an I/O failure until reopened")
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        commit_log = self._commit_log
        file_queue = commit_log.mapped_file_queue
        expected = commit_log.max_offset
        if type(offset) is not int or (
            offset != expected
            and not (
                file_queue.last_mapped_file is None
                and offset >= 0
                and offset % file_queue.mapped_file_size == 0
            )
        ):
            raise ReplicaOffsetMismatchError(expected, offset if type(offset) is int else -1)
        consumed = 0
        try:
            while consumed < len(view):
                mapped_file = file_queue.last_mapped_file
                if mapped_file is None or mapped_file.is_full():
                    mapped_file = self._new_segment(offset + consumed)
                segment = self._scan(view, consumed, mapped_file)
                if segment.length:
                    self._write(view, consumed, mapped_file, segment)
                    consumed += segment.length
                if segment.error is not None:
                    raise segment.error
        finally:
            if consumed:
                if self._reput is not None:
                    self._reput.wakeup()
                self._flusher.request_flush()
        return commit_log.max_offset

    def _new_segment(self, start: int) -> MappedFile:
        """The segment named by ``start`` (the end of the last one, or an aligned start of an empty log)."""
        file_queue = self._commit_log.mapped_file_queue
        if (
            file_queue.last_mapped_file is None and start
        ):  # segment 0 was pre-allocated: it would precede a gap
            self._allocator.cancel_all()
            fsync_dir(file_queue.store_path)
        try:
            mapped_file = file_queue.get_last_mapped_file(start)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"no space left for commit log segment {start}: {exc}") from exc
            raise
        assert mapped_file is not None and mapped_file.file_from_offset + mapped_file.wrote_position == start
        return mapped_file

    def _scan(self, view: memoryview, begin: int, mapped_file: MappedFile) -> _Segment:
        """Validate the records of ``view[begin:]`` that go into ``mapped_file`` at its written position."""
        file_size = mapped_file.file_size
        base = mapped_file.file_from_offset
        position = mapped_file.wrote_position
        cursor = begin
        end = len(view)
        requests: list[DispatchRequest] = []
        next_queue_offsets: dict[tuple[str, int], int] = {}
        skip_tail = 0
        error: CorruptRecordError | None = None
        while cursor < end:
            here = base + position
            if end - cursor < PREFIX.size:
                error = CorruptRecordError(f"replicated data ends inside a record at {here}", offset=here)
                break
            size, magic = PREFIX.unpack_from(view, cursor)
            if magic == BLANK_MAGIC_CODE:
                if size != file_size - position or end - cursor < size:
                    error = CorruptRecordError(
                        f"blank record at {here}: size {size}, {file_size - position} bytes left in the "
                        f"segment, {end - cursor} given",
                        offset=here,
                    )
                    break
                tail = view[cursor + PREFIX.size : cursor + size]
                if tail == bytes(len(tail)):
                    skip_tail = len(tail)
                cursor += size
                position += size
                break
            status, _ = check_record(view, cursor, min(end, cursor + max(size, 0)), check_crc=True)
            if status is not CheckStatus.VALID or position + size + END_FILE_MIN_BLANK_LENGTH > file_size:
                reason = status.value if status is not CheckStatus.VALID else "no room for the blank record"
                error = CorruptRecordError(f"replicated record at {here}: {reason}", offset=here)
                break
            if _OFFSET.unpack_from(view, cursor + PHYSICAL_OFFSET_POSITION)[0] != here:
                error = CorruptRecordError(f"replicated record at {here} names another offset", offset=here)
                break
            try:
                request = DispatchRequest.from_record(decode_record(view, cursor, cursor + size))
            except CorruptRecordError as exc:
                error = CorruptRecordError(f"replicated record at {here}: {exc}", offset=here)
                break
            request.body = None  # a view of the caller's buffer: not kept
            problem = self._queue_offset_problem(request, next_queue_offsets)
            if problem is not None:
                error = CorruptRecordError(f"replicated record at {here}: {problem}", offset=here)
                break
            requests.append(request)
            cursor += size
            position += size
        return _Segment(cursor - begin, requests, skip_tail, error)

    def _queue_offset_problem(
        self, request: DispatchRequest, next_offsets: dict[tuple[str, int], int]
    ) -> str | None:
        """Why the record's queue offset does not continue its consume queue (None when it does, or when the
        record gets no unit: a prepared or rolled back transaction)."""
        transaction_type = request.sys_flag & TRANSACTION_TYPE_MASK
        if transaction_type != TRANSACTION_NOT_TYPE and transaction_type != TRANSACTION_COMMIT_TYPE:
            return None
        key = (request.topic, request.queue_id)
        expected = next_offsets.get(key)
        if expected is None:
            queue = self._consume_queues.get(*key)
            if queue is not None and queue.max_offset > queue.min_offset:
                expected = queue.max_offset
            elif request.queue_offset < (queue.max_offset if queue is not None else 0):
                return f"queue offset {request.queue_offset} is below its empty queue's start"
            else:
                expected = request.queue_offset  # an empty queue may start anywhere (pre-blank fill)
        if request.queue_offset != expected:
            return f"queue offset {request.queue_offset} of {key[0]!r}/{key[1]}, expected {expected}"
        next_offsets[key] = expected + 1
        return None

    def _write(self, view: memoryview, begin: int, mapped_file: MappedFile, segment: _Segment) -> None:
        """Reserve, copy and dispatch one validated segment chunk (see :meth:`append_replicated`)."""
        position = mapped_file.wrote_position
        length = segment.length
        written = length - segment.skip_tail
        counts: dict[tuple[str, int], list[int]] = {}  # (topic, queue id) -> [first queue offset, count]
        for request in segment.requests:
            key = (request.topic, request.queue_id)
            if key in counts:
                counts[key][1] += 1
            else:
                counts[key] = [request.queue_offset, 1]
        try:
            mapped_file.reserve(position + written)
            for (topic, queue_id), (first, count) in counts.items():
                queue = self._consume_queues.find_or_create(topic, queue_id)
                if first == queue.max_offset:  # a queue starting later is pre-blank filled by its first unit
                    queue.prepare_write(count)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(
                    f"no space left for replicated records at {mapped_file.file_from_offset + position}: {exc}"
                ) from exc
            raise
        mapped_file.buffer[position : position + written] = view[begin : begin + written]
        mapped_file.wrote_position = mapped_file.committed_position = position + length
        writer = self._writer
        try:
            for request in segment.requests:
                for dispatcher in self._dispatchers:
                    dispatcher.dispatch(request)
        except Exception as exc:  # the derived stores are behind the commit log now
            self._state.writable = False
            raise StoreNotWritableError(
                f"dispatch of replicated records at {mapped_file.file_from_offset + position} failed; the store "
                f"refuses writes until reopened (recovery rebuilds the consume queues): {exc!r}"
            ) from exc
        end = mapped_file.file_from_offset + position + length
        units = writer.dispatch_mark[1] + len(segment.requests)
        last = max((r.store_timestamp for r in segment.requests), default=0)
        writer.dispatch_mark = (end, units)
        writer.last_store_timestamp = max(writer.last_store_timestamp, last)


class ReplicaFacade:
    """The replication methods of ``MessageStore`` (a base class of it), each delegating to its
    :class:`StoreReplica` (``_replica``); ``append_replicated`` is also bound onto the instance."""

    _replica: StoreReplica
    _state: StoreState

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """:meth:`StoreReplica.read_commit_log`: whole records from commit log ``offset`` for a replica, about
        ``max_bytes`` bytes, one segment at most; ``b""`` at the max offset."""
        return self._replica.read_commit_log(offset, max_bytes)

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """:meth:`StoreReplica.append_replicated`: append the master's bytes at ``offset`` (the max commit
        log offset); returns the new max commit log offset."""
        return self._replica.append_replicated(offset, data)

    def flush_replicated_async(self) -> None:
        """Ask for a flush round without waiting (:meth:`append_replicated` already does)."""
        self._replica.request_flush()

    @property
    def epoch_file(self) -> EpochFile:
        """``<store root>/epoch``: which master epoch wrote which part of the commit log (loaded at
        ``open()``, cut by :meth:`truncate_commit_log`; the replication layer appends to it)."""
        return self._replica.epoch_file

    @property
    def replica_mode(self) -> bool:
        """The store follows a master: puts answer SERVICE_NOT_AVAILABLE, :meth:`append_replicated` writes."""
        return self._state.replica

    def set_replica_mode(self, enabled: bool) -> None:
        """:meth:`StoreReplica.set_replica_mode`: enter or leave (promotion) replica mode. Loop thread, after
        ``open()``."""
        self._replica.set_replica_mode(enabled)

    def truncate_commit_log(self, offset: int) -> None:
        """:meth:`StoreReplica.truncate_commit_log`: drop every record at and after ``offset`` with its units,
        index items and epoch entries. Blocking; replica mode only."""
        self._replica.truncate_commit_log(offset)
