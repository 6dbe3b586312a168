"""The store's write path: ``put`` / ``put_batch`` and their flush waits (RocketMQ
``DefaultMessageStore.putMessage`` / ``putMessages``), as a base class of
:class:`~quasar.storage.message_store.MessageStore` (split out like :mod:`quasar.storage.read_path`).

Hot path of one put (loop thread; ~10 µs of CPython before issue 3): everything constant per (topic, queue id)
is encoded once into a :class:`_QueueWriter` (topic bytes, MAGICCODE, the TOPIC + PROPERTIES tail when there
are no properties, the consume queue); a put then validates its arguments, reads the clock once, makes room
for the consume queue unit, and calls :meth:`CommitLog.append_one` (one ``pack_into`` of the header straight
into the mapping, two slice copies, the ``__CRC32#`` CRC), then writes the 20-byte unit. What stays per record
is what the format requires: two CRC-32 passes (ISA-L) (BODYCRC over the body, ``__CRC32#`` over the record).

``put_batch`` is RocketMQ's batch append (``CommitLog.putMessages`` with a ``MessageExtBatch``): every body
becomes its own ordinary record, with consecutive queue offsets, all in one segment, under one store
timestamp, with one flush wait; the per-put Python overhead is paid once per batch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING

from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, Dispatcher, DispatchRequest
from quasar.storage.errors import DiskFullError, InvalidMessageError, StoreClosedError, StoreNotWritableError
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

if TYPE_CHECKING:
    import asyncio

    from quasar.storage.consume_queue import ConsumeQueue
    from quasar.storage.flush import GroupCommitService

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
_PROPERTIES_TOO_LONG = PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, -1, -1, 0, 0)
_BYTES_TYPES = frozenset({bytes, bytearray})
_new_put_result = tuple.__new__


class _QueueWriter:
    """What one (topic, queue id) needs on every put, computed once."""

    __slots__ = ("magic", "queue", "queue_flag", "tail", "topic_field")

    def __init__(self, topic_bytes: bytes, queue: ConsumeQueue, append_prop_crc: bool) -> None:
        self.queue_flag = QUEUE_FLAG.pack(queue.queue_id, 0)
        """QUEUEID and FLAG (always 0 here) as packed in the header."""
        self.magic, self.topic_field = topic_field(topic_bytes)
        self.tail = record_tail(self.topic_field, b"", append_prop_crc)
        """TOPIC and PROPERTIES fields of a record without properties."""
        self.queue = queue


def _batch_result(status: PutStatus) -> PutBatchResult:
    return PutBatchResult(status, -1, -1, 0, 0)


class StoreWriter:
    """Write methods of the store; the subclass provides the attributes below."""

    config: StoreConfig
    commit_log: CommitLog
    consume_queues: ConsumeQueueStore
    dispatchers: list[Dispatcher]
    disk_full: bool
    disk_full_refusals: int
    _consume_queue_dispatcher: ConsumeQueueDispatcher
    _dispatch_mark: tuple[int, int]
    _last_store_timestamp: int
    _writable: bool
    _state: str
    _loop: asyncio.AbstractEventLoop | None
    _group_commit: GroupCommitService | None
    _writers: dict[tuple[str, int], _QueueWriter]

    def _check_open(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

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
        if self._state != "open":
            raise StoreClosedError(f"the message store is {self._state}")
        if not self._writable or self.disk_full:
            return self._refuse()
        if type(queue_id) is not int:  # True or 1.0 would find queue 1's writer
            return _ILLEGAL
        try:
            writer = self._writers.get((topic, queue_id))
        except TypeError:  # unhashable topic
            return _ILLEGAL
        if writer is None:
            writer = self._new_writer(topic, queue_id)
            if writer is None:
                return _ILLEGAL
        if type(body) is not bytes:
            body = _check_body(body)  # type: ignore[assignment]
            if body is None:
                return _ILLEGAL
        if len(body) > self.config.max_message_size or type(tag_hash) is not int:
            return _ILLEGAL
        store_timestamp = time.time_ns() // 1_000_000
        if born_timestamp_ms is None:
            born_timestamp_ms = store_timestamp
        elif type(born_timestamp_ms) is not int:
            return _ILLEGAL
        queue = writer.queue
        try:
            if properties or tag_hash:
                tail = self._tail_with_properties(writer, properties, tag_hash)
                if tail is None:
                    return _PROPERTIES_TOO_LONG
            else:
                tail = writer.tail
            unit_file = queue.mapped_file_queue.last_mapped_file
            if unit_file is None or unit_file.wrote_position + 20 > unit_file.reserved_position:
                # a new consume queue file, or disk blocks, before the append
                unit_file = queue.prepare_write()
            queue_offset = (unit_file.file_from_offset + unit_file.wrote_position) // 20
            status, offset, size = self.commit_log.append_one(
                writer.magic, writer.queue_flag, queue_offset, body, tail, store_timestamp, born_timestamp_ms
            )
        except InvalidMessageError:
            return _ILLEGAL
        except (DiskFullError, OSError) as exc:  # no space for the record or its unit: nothing was written
            return self._refuse(exc)
        if status is not _APPEND_OK:
            return PutResult(_APPEND_TO_PUT.get(status, PutStatus.UNKNOWN_ERROR), -1, -1, 0, 0)
        dispatchers = self.dispatchers
        if len(dispatchers) == 1 and dispatchers[0] is self._consume_queue_dispatcher:
            # the common case: only the consume queue is dispatched inline; skip the request object
            try:
                queue.append_unit(unit_file, offset, size, tag_hash)
            except Exception as exc:
                self._dispatch_failed(offset, exc)
        else:
            end = offset + size
            self._dispatch(
                topic, queue_id, [offset], end, queue_offset, tag_hash, store_timestamp, properties
            )
        self._dispatch_mark = (offset + size, self._dispatch_mark[1] + 1)
        self._last_store_timestamp = store_timestamp
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
        too big for one segment; PROPERTIES_SIZE_EXCEEDED; CREATE_MAPPED_FILE_FAILED; SERVICE_NOT_AVAILABLE.
        Nothing is written unless PUT_OK. Raises :class:`StoreClosedError` when not open and
        :class:`StoreNotWritableError` when a dispatcher fails, including when the units cross into a new
        consume queue file that cannot be created (a full disk at that moment: unlike ``put``, the next file
        is not created before the commit log append; recovery rebuilds the units at the next open).
        """
        if self._state != "open":
            raise StoreClosedError(f"the message store is {self._state}")
        if not self._writable or self.disk_full:
            self._refuse()
            return _batch_result(PutStatus.SERVICE_NOT_AVAILABLE)
        if type(queue_id) is not int:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        try:
            writer = self._writers.get((topic, queue_id))
        except TypeError:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        if writer is None:
            writer = self._new_writer(topic, queue_id)
        if writer is None or not isinstance(bodies, list | tuple) or not bodies or type(tag_hash) is not int:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        if not _BYTES_TYPES.issuperset(map(type, bodies)):
            checked = [_check_body(body) for body in bodies]
            if None in checked:
                return _batch_result(PutStatus.MESSAGE_ILLEGAL)
            bodies = checked  # type: ignore[assignment]
        if max(map(len, bodies)) > self.config.max_message_size:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        store_timestamp = time.time_ns() // 1_000_000
        if born_timestamp_ms is None:
            born_timestamp_ms = store_timestamp
        elif type(born_timestamp_ms) is not int:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        queue = writer.queue
        try:
            if properties or tag_hash:
                tail = self._tail_with_properties(writer, properties, tag_hash)
                if tail is None:
                    return _batch_result(PutStatus.PROPERTIES_SIZE_EXCEEDED)
            else:
                tail = writer.tail
            unit_file = queue.prepare_write(len(bodies))
            queue_offset = (unit_file.file_from_offset + unit_file.wrote_position) // 20
            status, offsets = self.commit_log.append_batch(
                writer.magic,
                writer.queue_flag,
                queue_offset,
                bodies,
                tail,
                store_timestamp,
                born_timestamp_ms,
            )
        except InvalidMessageError:
            return _batch_result(PutStatus.MESSAGE_ILLEGAL)
        except (DiskFullError, OSError) as exc:
            self._refuse(exc)
            return _batch_result(PutStatus.SERVICE_NOT_AVAILABLE)
        if status is not _APPEND_OK:
            return _batch_result(_APPEND_TO_PUT.get(status, PutStatus.UNKNOWN_ERROR))
        end = self.commit_log.max_offset
        dispatchers = self.dispatchers
        if len(dispatchers) == 1 and dispatchers[0] is self._consume_queue_dispatcher:
            try:
                queue.append_units(unit_file, offsets, end, tag_hash)
            except Exception as exc:
                self._dispatch_failed(offsets[0], exc)
        else:
            self._dispatch(topic, queue_id, offsets, end, queue_offset, tag_hash, store_timestamp, properties)
        self._dispatch_mark = (end, self._dispatch_mark[1] + len(offsets))
        self._last_store_timestamp = store_timestamp
        first = offsets[0]
        return PutBatchResult(_PUT_OK, first, queue_offset, end - first, store_timestamp, tuple(offsets))

    def _refuse(self, exc: BaseException | None = None) -> PutResult:
        if exc is not None:
            self.disk_full_refusals += 1
            log.error("message store: put refused, disk full: %s", exc)
        elif self.disk_full:
            self.disk_full_refusals += 1
        return _NOT_AVAILABLE

    def _tail_with_properties(
        self, writer: _QueueWriter, properties: Mapping[str, str] | None, tag_hash: int
    ) -> bytes | None:
        """The record tail with these properties; None past 32767 bytes. Raises InvalidMessageError."""
        encoded = encode_properties(properties, tag_hash)
        reserved = CRC32_RESERVED_LEN if self.commit_log.append_prop_crc else 0
        if len(encoded) + reserved > MAX_PROPERTIES_LENGTH:
            return None
        return record_tail(writer.topic_field, encoded, self.commit_log.append_prop_crc)

    def _dispatch(
        self,
        topic: str,
        queue_id: int,
        offsets: list[int],
        end: int,
        queue_offset: int,
        tag_hash: int,
        store_timestamp: int,
        properties: Mapping[str, str] | None,
    ) -> None:
        """Dispatch the records at ``offsets`` (contiguous up to ``end``) to every inline dispatcher."""
        keys = properties.get(PROPERTY_KEYS, "") if properties else ""
        uniq_key = properties.get(PROPERTY_UNIQ_KEY, "") if properties else ""
        try:
            for index, offset in enumerate(offsets):
                next_offset = offsets[index + 1] if index + 1 < len(offsets) else end
                request = DispatchRequest(
                    topic=topic,
                    queue_id=queue_id,
                    commit_log_offset=offset,
                    size=next_offset - offset,
                    tag_hash=tag_hash,
                    store_timestamp=store_timestamp,
                    queue_offset=queue_offset + index,
                    keys=keys,
                    uniq_key=uniq_key,
                )
                for dispatcher in self.dispatchers:
                    dispatcher.dispatch(request)
        except Exception as exc:
            self._dispatch_failed(offsets[0], exc)

    def _dispatch_failed(self, offset: int, exc: Exception) -> None:
        self._writable = False
        raise StoreNotWritableError(
            f"dispatch of commit log offset {offset} failed; the store refuses writes "
            f"until reopened (recovery rebuilds the consume queues): {exc!r}"
        ) from exc

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
        queue = self.consume_queues.find_or_create(topic, queue_id)
        writer = _QueueWriter(encoded, queue, self.commit_log.append_prop_crc)
        self._writers[(topic, queue_id)] = writer
        return writer

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
        if result.status is not _PUT_OK:
            return result
        status = await self.wait_flushed(result.commit_log_offset + result.wrote_bytes)
        return result if status is _PUT_OK else result._replace(status=status)

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
        if result.status is not _PUT_OK:
            return result
        status = await self.wait_flushed(result.end_offset)
        return result if status is _PUT_OK else dataclasses.replace(result, status=status)


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
