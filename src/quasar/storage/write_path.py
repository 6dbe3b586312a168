"""The store's write path: ``put`` / ``put_batch`` (RocketMQ ``DefaultMessageStore.putMessage`` /
``putMessages``), the :class:`StoreWriter` object :class:`~quasar.storage.message_store.MessageStore` owns and
delegates to. The flush waits are the flushing's (:mod:`quasar.storage.store_flushing`).

Hot path of one put (loop thread; ~1 µs of CPU for a 16-byte body, ~1.8 µs for 1 KiB on tmpfs on the development
VM, of which the kernel's page faults on the mapping are a growing share): everything constant per (topic, queue
id) is encoded once into a :class:`_QueueWriter` (topic bytes, MAGICCODE, the TOPIC + PROPERTIES tail when
there are no properties, the consume queue and its files); a put then validates its arguments, reads the clock
once, makes room for the consume queue unit, and calls :meth:`CommitLog.append_one`, whose bytes come from the
one record encoder :data:`~quasar.storage.record.pack_record_into`: compiled, one C call writes the header, the
body, the tail, both CRC-32 passes the format requires (BODYCRC and ``__CRC32#``) straight into the mapping,
and, when the consume queue is the only inline dispatcher (always, unless a test adds one), the record's
20-byte unit into the queue's file; the put then moves the unit file's positions itself.

``put_batch`` is RocketMQ's batch append (``CommitLog.putMessages`` with a ``MessageExtBatch``): every body
becomes its own ordinary record, with consecutive queue offsets, all in one segment, under one store
timestamp, with one flush wait; the per-put Python overhead is paid once per batch, and the records and their
consume queue units are written by one C call each (:data:`~quasar.storage.record.pack_records_into`,
:data:`~quasar.storage.consume_queue.pack_units_into`; the GIL is released for a batch of 64 KiB or more).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher, DispatchRequest
from quasar.storage.errors import (
    NO_FILE_DESCRIPTOR_ERRNOS,
    OUT_OF_MEMORY_ERRNOS,
    ConsumeQueueUnavailableError,
    DiskFullError,
    InvalidMessageError,
    StoreClosedError,
    StoreNotWritableError,
)
from quasar.storage.record import (
    CRC32_RESERVED_LEN,
    MAX_INT,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    QUEUE_FLAG,
    encode_properties,
    record_tail,
    topic_field,
)
from quasar.storage.results import PutBatchResult, PutResult
from quasar.storage.status import AppendMessageStatus, PutStatus
from quasar.storage.store_state import StoreState

if TYPE_CHECKING:
    from quasar.storage.consume_queue import ConsumeQueue

log = logging.getLogger("quasar.storage.message_store")

_APPEND_TO_PUT = {
    AppendMessageStatus.MESSAGE_SIZE_EXCEEDED: PutStatus.MESSAGE_ILLEGAL,
    AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED: PutStatus.PROPERTIES_SIZE_EXCEEDED,
    AppendMessageStatus.CREATE_MAPPED_FILE_FAILED: PutStatus.CREATE_MAPPED_FILE_FAILED,
}
_PUT_OK = PutStatus.PUT_OK
_APPEND_OK = AppendMessageStatus.PUT_OK
_ILLEGAL = PutResult(PutStatus.MESSAGE_ILLEGAL, -1, -1, 0, 0)
_NOT_AVAILABLE = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, -1, -1, 0, 0)
_CREATE_FAILED = PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, -1, -1, 0, 0)
_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_REFUSAL_LOG_INTERVAL_S = 1.0
"""At most one error line per this many seconds for puts refused by a failed file operation (the counters
count every one)."""
_PROPERTIES_TOO_LONG = PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, -1, -1, 0, 0)
_BYTES_TYPES = frozenset({bytes, bytearray})
_new_put_result = tuple.__new__


class _QueueWriter:
    """What one (topic, queue id) needs on every put, computed once."""

    __slots__ = ("magic", "queue", "queue_flag", "tail", "topic_field", "units")

    def __init__(self, topic_bytes: bytes, queue: ConsumeQueue, append_prop_crc: bool) -> None:
        self.queue_flag = QUEUE_FLAG.pack(queue.queue_id, 0)
        """QUEUEID and FLAG (always 0 here) as packed in the header."""
        self.magic, self.topic_field = topic_field(topic_bytes)
        self.tail = record_tail(self.topic_field, b"", append_prop_crc)
        """TOPIC and PROPERTIES fields of a record without properties."""
        self.queue = queue
        self.units = queue.mapped_file_queue
        """The consume queue's files (the put path reads their last one)."""


def _batch_result(status: PutStatus) -> PutBatchResult:
    return PutBatchResult(status, -1, -1, 0, 0)


class StoreWriter:
    """The write path of one store: ``put`` and ``put_batch`` on the loop thread.

    Owns the per-queue writers, the dispatch mark and the last store timestamp; given the commit log, the
    consume queues, the inline dispatchers (``dispatchers[0]`` is always ``consume_queue_dispatcher``; the
    list is the store's, so dispatchers appended to it later are seen) and the shared :class:`StoreState`.
    """

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueStore,
        dispatchers: list[Dispatcher],
        consume_queue_dispatcher: ConsumeQueueDispatcher,
        state: StoreState,
    ) -> None:
        if not dispatchers or dispatchers[0] is not consume_queue_dispatcher:
            raise ValueError("the consume queue dispatcher must be the first inline dispatcher")
        self._max_message_size = config.max_message_size
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._dispatchers = dispatchers
        self._state = state
        self._queue_writers: dict[tuple[str, int], _QueueWriter] = {}
        self.dispatch_mark = (0, 0)
        """(commit log offset up to which records are dispatched, consume queue units written so far): one
        tuple, replaced atomically by the loop thread and read by the flush thread."""
        self.last_store_timestamp = 0
        """Store timestamp (ms) of the last record appended."""
        self._refusal_log_after: dict[str, float] = {}
        """Per refusal reason, the ``time.monotonic()`` before which it is not logged again."""

    def resume(self, dispatched_offset: int, units: int, last_store_timestamp: int) -> None:
        """Continue after recovery: records up to ``dispatched_offset`` (bytes) and ``units`` consume queue
        units are dispatched; the last record was stored at ``last_store_timestamp`` (ms)."""
        self.dispatch_mark = (dispatched_offset, units)
        self.last_store_timestamp = last_store_timestamp

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
        CREATE_MAPPED_FILE_FAILED when a commit log or consume queue file cannot be created, extended or mapped,
        including when the process is out of file descriptors (EMFILE / ENFILE: transient, nothing is
        latched, the next put tries again); SERVICE_NOT_AVAILABLE after an I/O failure or while the disk is
        full (ENOSPC, or the disk guard). Raises :class:`StoreClosedError` when not open and
        :class:`StoreNotWritableError` when a dispatcher fails (the store then refuses writes).
        """
        # One frame for the whole put (a helper call costs ~60 ns of ~1 µs): checks are folded into few
        # statements, the rare cases (new queue, non-bytes body, properties) go to helpers.
        if self._state.refusing:
            return self._refuse()
        if type(queue_id) is not int:  # True or 1.0 would find queue 1's writer
            return _ILLEGAL
        try:
            writer = self._queue_writers.get((topic, queue_id))
        except TypeError:  # unhashable topic
            return _ILLEGAL
        if writer is None:
            try:
                writer = self._new_writer(topic, queue_id)
            except ConsumeQueueUnavailableError as exc:  # its files cannot be opened now: transient
                return self._refuse_failed_io(_os_error_of(exc))
            if writer is None:
                return _ILLEGAL
        checked = body if type(body) is bytes else _check_body(body)
        if (
            checked is None
            or len(checked) > self._max_message_size
            or type(tag_hash) is not int
            or (born_timestamp_ms is not None and type(born_timestamp_ms) is not int)
        ):
            return _ILLEGAL
        store_timestamp = time.time_ns() // 1_000_000
        queue = writer.queue
        try:
            tail = (
                self._tail_with_properties(writer, properties, tag_hash)
                if properties or tag_hash
                else writer.tail
            )
            if tail is None:
                return _PROPERTIES_TOO_LONG
            unit_file = writer.units.last_mapped_file
            if unit_file is None or unit_file.wrote_position + 20 > unit_file.reserved_position:
                # a new consume queue file, or disk blocks, before the append
                unit_file = queue.prepare_write()
            unit_position = unit_file.wrote_position
            queue_offset = (unit_file.file_from_offset + unit_position) // 20
            # the common case, only the consume queue dispatched inline: the unit is written by the record's
            # C call at the position prepare_write made room for (the positions are moved below), no request
            inline_unit = len(self._dispatchers) == 1
            status, offset, size = self._commit_log.append_one(
                writer.magic,
                writer.queue_flag,
                queue_offset,
                checked,
                tail,
                store_timestamp,
                store_timestamp if born_timestamp_ms is None else born_timestamp_ms,
                0,
                unit_file.buffer if inline_unit else None,
                unit_position,
                tag_hash,
            )
        except InvalidMessageError:
            return _ILLEGAL
        except (DiskFullError, OSError) as exc:  # no file or disk for the record or its unit: nothing written
            return self._refuse_failed_io(exc)
        if status is not _APPEND_OK:
            return self._not_appended(status)
        end = offset + size
        if inline_unit:
            unit_file.wrote_position = unit_file.committed_position = unit_position + 20
            queue.max_physic_offset = end
        else:
            self._dispatch(writer, [offset], end, queue_offset, tag_hash, store_timestamp, properties)
        self.dispatch_mark = (end, self.dispatch_mark[1] + 1)
        self.last_store_timestamp = store_timestamp
        return _new_put_result(PutResult, (_PUT_OK, offset, queue_offset, size, store_timestamp))

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
        """Append one ordinary record per body (same topic, queue id, properties, tag hash and timestamps) with
        consecutive queue offsets, and their consume queue units; does not wait for the disk (RocketMQ
        ``putMessages``: the batch goes into one commit log segment under one lock, rolling to the next
        segment as a whole when it does not fit; the records read back, and recover, like ``put``'s).

        Loop thread only. Returns PUT_OK with every record's offsets (:class:`PutBatchResult`);
        MESSAGE_ILLEGAL for an empty batch, a bad topic / queue id / body (each as in :meth:`put`) or a batch
        too big for one segment; PROPERTIES_SIZE_EXCEEDED; CREATE_MAPPED_FILE_FAILED (also for EMFILE /
        ENFILE, as in :meth:`put`); SERVICE_NOT_AVAILABLE.
        Nothing is written unless PUT_OK. Raises :class:`StoreClosedError` when not open and
        :class:`StoreNotWritableError` when a dispatcher fails, including when the units cross into a new
        consume queue file that cannot be created (a full disk or no free file descriptor at that moment:
        unlike ``put``, the next file is not created before the commit log append; recovery rebuilds the
        units at the next open).
        """
        if self._state.refusing:
            self._refuse()
            return _batch_result(PutStatus.SERVICE_NOT_AVAILABLE)
        try:
            writer = self._batch_writer(topic, queue_id, bodies, tag_hash, born_timestamp_ms)
        except ConsumeQueueUnavailableError as exc:
            return _batch_result(self._refuse_failed_io(_os_error_of(exc)).status)
        if writer is None:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        if not _BYTES_TYPES.issuperset(map(type, bodies)):
            checked = [_check_body(body) for body in bodies]
            if None in checked:
                return _batch_result(PutStatus.MESSAGE_ILLEGAL)
            bodies = cast("list[bytes | bytearray | memoryview]", checked)
        if max(map(len, bodies)) > self._max_message_size:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        store_timestamp = time.time_ns() // 1_000_000
        queue = writer.queue
        try:
            tail = (
                self._tail_with_properties(writer, properties, tag_hash)
                if properties or tag_hash
                else writer.tail
            )
            if tail is None:
                return _batch_result(PutStatus.PROPERTIES_SIZE_EXCEEDED)
            unit_file = queue.prepare_write(len(bodies))
            queue_offset = (unit_file.file_from_offset + unit_file.wrote_position) // 20
            status, offsets = self._commit_log.append_batch(
                writer.magic,
                writer.queue_flag,
                queue_offset,
                bodies,
                tail,
                store_timestamp,
                store_timestamp if born_timestamp_ms is None else born_timestamp_ms,
            )
        except InvalidMessageError:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        except (DiskFullError, OSError) as exc:
            return _batch_result(self._refuse_failed_io(exc).status)
        if status is not _APPEND_OK:
            return _batch_result(self._not_appended(status).status)
        end = self._commit_log.max_offset
        if len(self._dispatchers) == 1:
            try:
                queue.append_units(unit_file, offsets, end, tag_hash)
            except Exception as exc:  # the consume queue is behind the commit log now
                raise self._dispatch_failed(offsets[0], exc) from exc
        else:
            self._dispatch(writer, offsets, end, queue_offset, tag_hash, store_timestamp, properties)
        self.dispatch_mark = (end, self.dispatch_mark[1] + len(offsets))
        self.last_store_timestamp = store_timestamp
        first = offsets[0]
        return PutBatchResult(_PUT_OK, first, queue_offset, end - first, store_timestamp, offsets)

    def _batch_writer(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        tag_hash: int,
        born_timestamp_ms: int | None,
    ) -> _QueueWriter | None:
        """The writer of a batch's queue; None when the queue, the batch (an empty or non-list one) or the tag
        hash / born timestamp is illegal (the bodies are checked by the caller)."""
        if (
            type(queue_id) is not int
            or not isinstance(bodies, list | tuple)
            or not bodies
            or type(tag_hash) is not int
            or (born_timestamp_ms is not None and type(born_timestamp_ms) is not int)
        ):
            return None
        try:
            writer = self._queue_writers.get((topic, queue_id))
        except TypeError:
            return None
        return writer if writer is not None else self._new_writer(topic, queue_id)

    def _refuse(self) -> PutResult:
        """SERVICE_NOT_AVAILABLE for a put the store's state refuses (not writable, or the disk guard). Raises
        :class:`StoreClosedError` when the store is not open."""
        state = self._state
        if not state.is_open:
            raise StoreClosedError(f"the message store is {state.phase}")
        if state.disk_full:
            state.disk_full_refusals += 1
        return _NOT_AVAILABLE

    def _not_appended(self, status: AppendMessageStatus) -> PutResult:
        """The result of a put the commit log did not append (``status`` not PUT_OK); a segment that could
        not be created is reported by :meth:`_refuse_failed_io`."""
        error = self._commit_log.create_error
        if status is AppendMessageStatus.CREATE_MAPPED_FILE_FAILED and error is not None:
            self._commit_log.create_error = None
            return self._refuse_failed_io(error)
        return PutResult(_APPEND_TO_PUT.get(status, PutStatus.UNKNOWN_ERROR), -1, -1, 0, 0)

    def _refuse_failed_io(self, exc: OSError | DiskFullError) -> PutResult:
        """The result of a put stopped, before anything was written, by ``exc`` from creating a commit log or
        consume queue file or reserving its disk blocks. Nothing is latched: the next put tries again.

        - no space (:class:`DiskFullError`, ENOSPC, EDQUOT): SERVICE_NOT_AVAILABLE, ``disk_full_refusals``;
        - too many open files (EMFILE for the process, ENFILE for the system): CREATE_MAPPED_FILE_FAILED,
          ``open_files_refusals``; never reported as a full disk;
        - out of memory (ENOMEM, e.g. mapping a new file): CREATE_MAPPED_FILE_FAILED;
        - any other OSError (EACCES, EIO...): CREATE_MAPPED_FILE_FAILED.

        Logged as an error at most once per second per reason, with the running count.
        """
        state = self._state
        code = getattr(exc, "errno", None)
        if isinstance(exc, DiskFullError) or code in _NO_SPACE_ERRNOS:
            state.disk_full_refusals += 1
            reason, count, result = "disk full", state.disk_full_refusals, _NOT_AVAILABLE
        elif code in NO_FILE_DESCRIPTOR_ERRNOS:
            state.open_files_refusals += 1
            reason = "too many open files (raise RLIMIT_NOFILE; the next put tries again)"
            count, result = state.open_files_refusals, _CREATE_FAILED
        elif code in OUT_OF_MEMORY_ERRNOS:
            reason, count, result = "out of memory (the next put tries again)", 0, _CREATE_FAILED
        else:
            reason, count, result = "a store file could not be created or extended", 0, _CREATE_FAILED
        now = time.monotonic()
        if now >= self._refusal_log_after.get(reason, 0.0):
            self._refusal_log_after[reason] = now + _REFUSAL_LOG_INTERVAL_S
            suffix = f" ({count} such refusals so far)" if count else ""
            log.error("message store: put refused, %s: %s%s", reason, exc, suffix)
        return result

    def _tail_with_properties(
        self, writer: _QueueWriter, properties: Mapping[str, str] | None, tag_hash: int
    ) -> bytes | None:
        """The record tail with these properties; None past 32767 bytes. Raises InvalidMessageError."""
        encoded = encode_properties(properties, tag_hash)
        append_prop_crc = self._commit_log.append_prop_crc
        reserved = CRC32_RESERVED_LEN if append_prop_crc else 0
        if len(encoded) + reserved > MAX_PROPERTIES_LENGTH:
            return None
        return record_tail(writer.topic_field, encoded, append_prop_crc)

    def _dispatch(
        self,
        writer: _QueueWriter,
        offsets: Sequence[int],
        end: int,
        queue_offset: int,
        tag_hash: int,
        store_timestamp: int,
        properties: Mapping[str, str] | None,
    ) -> None:
        """Dispatch the records at ``offsets`` (contiguous up to ``end``) to every inline dispatcher. A
        dispatcher that raises makes the store refuse writes (:class:`StoreNotWritableError`)."""
        keys = properties.get(PROPERTY_KEYS, "") if properties else ""
        uniq_key = properties.get(PROPERTY_UNIQ_KEY, "") if properties else ""
        queue = writer.queue
        try:
            for index, offset in enumerate(offsets):
                next_offset = offsets[index + 1] if index + 1 < len(offsets) else end
                request = DispatchRequest(
                    topic=queue.topic,
                    queue_id=queue.queue_id,
                    commit_log_offset=offset,
                    size=next_offset - offset,
                    tag_hash=tag_hash,
                    store_timestamp=store_timestamp,
                    queue_offset=queue_offset + index,
                    keys=keys,
                    uniq_key=uniq_key,
                )
                for dispatcher in self._dispatchers:
                    dispatcher.dispatch(request)
        except Exception as exc:  # any dispatcher's failure: the derived stores are behind the commit log
            raise self._dispatch_failed(offsets[0], exc) from exc

    def _dispatch_failed(self, offset: int, exc: Exception) -> StoreNotWritableError:
        """Mark the store not writable; the error to raise."""
        self._state.writable = False
        return StoreNotWritableError(
            f"dispatch of commit log offset {offset} failed; the store refuses writes "
            f"until reopened (recovery rebuilds the consume queues): {exc!r}"
        )

    def forget_queue(self, topic: str, queue_id: int) -> None:
        """Drop the writer of (topic, queue id): its consume queue was detached (deleted). Loop thread."""
        self._queue_writers.pop((topic, queue_id), None)

    def _new_writer(self, topic: object, queue_id: object) -> _QueueWriter | None:
        """The writer of a (topic, queue id) seen for the first time; None when either is illegal."""
        if (
            not isinstance(topic, str)
            or not topic
            or type(queue_id) is not int
            or not 0 <= queue_id <= MAX_INT
        ):
            return None
        try:
            encoded = topic.encode()
        except UnicodeEncodeError:
            return None
        if len(encoded) > MAX_TOPIC_LENGTH:
            return None
        queue = self._consume_queues.find_or_create(topic, queue_id)
        writer = _QueueWriter(encoded, queue, self._commit_log.append_prop_crc)
        self._queue_writers[(topic, queue_id)] = writer
        return writer


def _os_error_of(exc: ConsumeQueueUnavailableError) -> OSError:
    """The OSError behind a consume queue that could not be loaded (its errno decides the refusal)."""
    cause = exc.__cause__
    return cause if isinstance(cause, OSError) else OSError(errno.EIO, str(exc))


def _check_body(body: object) -> bytes | bytearray | memoryview | None:
    """A body other than ``bytes`` as the commit log copies it (a 1-D byte view), None when illegal."""
    if type(body) is memoryview:
        if body.ndim != 1 or body.itemsize != 1 or body.format != "B":
            try:
                return body.cast("B")
            except TypeError:
                return None
        return body
    if isinstance(body, bytes | bytearray):
        return body
    return None
