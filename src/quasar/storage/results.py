"""Result types of the MessageStore facade (RocketMQ ``PutMessageResult``, ``GetMessageResult``) and the read
path's record decoder, which builds a :class:`StoredMessage` from the mapped commit log without copying.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

from isal.isal_zlib import crc32

from quasar.storage.errors import CorruptRecordError
from quasar.storage.record import (
    BODY_POSITION,
    CRC32_RESERVED_LEN,
    CRC32_TAIL_PREFIX,
    H_BODY_CRC,
    H_BODY_LENGTH,
    H_BORN_TIMESTAMP,
    H_MAGIC,
    H_QUEUE_ID,
    H_QUEUE_OFFSET,
    H_STORE_TIMESTAMP,
    H_TOTAL_SIZE,
    HEADER,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    StoredRecord,
    decode_properties,
)
from quasar.storage.status import GetStatus, PutStatus


class PutResult(NamedTuple):
    """Outcome of :meth:`MessageStore.put` (RocketMQ ``PutMessageResult``).

    ``commit_log_offset`` (bytes) and ``queue_offset`` (a count) are -1 and ``wrote_bytes`` 0 when nothing was
    written. ``store_timestamp`` is ms since the epoch. Pass :attr:`end_offset` to ``wait_flushed``. A named
    tuple (immutable, ``_replace`` for a changed copy): built on every put, where a frozen dataclass's
    ``__init__`` alone cost ~0.5 µs.
    """

    status: PutStatus
    commit_log_offset: int
    queue_offset: int
    wrote_bytes: int
    store_timestamp: int

    @property
    def ok(self) -> bool:
        """True for PUT_OK (the record is in the commit log; flush status is separate)."""
        return self.status is PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        """Commit log offset just past the record."""
        return self.commit_log_offset + self.wrote_bytes


@dataclass(frozen=True, slots=True)
class PutBatchResult:
    """Outcome of :meth:`MessageStore.put_batch` (RocketMQ ``PutMessageResult`` of a ``MessageExtBatch``:
    ``wroteOffset``, ``wroteBytes``, ``msgNum``, ``logicsOffset``), with every record's offset.

    Record *i* (of ``count``) has queue offset ``queue_offset + i`` and commit log offset
    ``commit_log_offsets[i]`` (bytes); the records are contiguous, so it ends where record *i + 1* starts and
    the last one at :attr:`end_offset`. ``wrote_bytes`` is the whole batch's size. When nothing was written:
    offsets -1, ``wrote_bytes`` 0, ``count`` 0 and no offsets. :meth:`results` gives one :class:`PutResult`
    per record, as ``put`` would have returned.
    """

    status: PutStatus
    commit_log_offset: int
    queue_offset: int
    wrote_bytes: int
    store_timestamp: int
    commit_log_offsets: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        """True for PUT_OK (the record is in the commit log; flush status is separate)."""
        return self.status is PutStatus.PUT_OK

    @property
    def count(self) -> int:
        """Records written."""
        return len(self.commit_log_offsets)

    @property
    def end_offset(self) -> int:
        """Commit log offset just past the last record (pass it to ``wait_flushed``)."""
        return self.commit_log_offset + self.wrote_bytes

    @property
    def queue_offsets(self) -> range:
        """The records' consume-queue offsets, in order."""
        return range(self.queue_offset, self.queue_offset + self.count)

    def results(self) -> list[PutResult]:
        """One :class:`PutResult` per record (empty when nothing was written)."""
        offsets = self.commit_log_offsets
        ends = (*offsets[1:], self.end_offset)
        return [
            PutResult(self.status, offset, self.queue_offset + i, end - offset, self.store_timestamp)
            for i, (offset, end) in enumerate(zip(offsets, ends, strict=True))
        ]


@dataclass(frozen=True)
class StoredMessage:
    """One stored record as read back. ``body`` is a memoryview slice of the mapped commit log (no copy): it
    stays valid while referenced, even after the store closes. ``size`` is the whole record's size in bytes,
    ``store_timestamp`` / ``born_timestamp`` ms since the epoch. ``properties`` is parsed on first access.
    """

    queue_offset: int
    commit_log_offset: int
    size: int
    store_timestamp: int
    body: memoryview
    born_timestamp: int = 0
    queue_id: int = 0
    properties_raw: memoryview = field(default=memoryview(b""), repr=False, compare=False)

    @functools.cached_property
    def properties(self) -> dict[str, str]:
        """The record's properties (RocketMQ ``string2messageProperties``), parsed once."""
        return decode_properties(self.properties_raw) if len(self.properties_raw) else {}


@dataclass(frozen=True, slots=True)
class GetResult:
    """Outcome of :meth:`MessageStore.get` (RocketMQ ``GetMessageResult``); offsets are queue offsets."""

    status: GetStatus
    messages: list[StoredMessage]
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of the store's positions (bytes) and counters."""

    min_commit_log_offset: int
    max_commit_log_offset: int
    flushed_commit_log_offset: int
    dispatched_commit_log_offset: int
    consume_queues: int
    group_commit_rounds: int
    pending_flush_waiters: int
    writable: bool
    dispatch_behind_bytes: int = 0
    """Written commit log bytes the reput thread has not dispatched to the index yet."""
    disk_full: bool = False
    """The disk guard refuses writes (disk use past the warning level, or ENOSPC)."""


def stored_message_of(record: StoredRecord) -> StoredMessage:
    """The :class:`StoredMessage` view of a decoded record (zero-copy)."""
    return StoredMessage(
        queue_offset=record.queue_offset,
        commit_log_offset=record.physical_offset,
        size=record.total_size,
        store_timestamp=record.store_timestamp,
        body=record.body,
        born_timestamp=record.born_timestamp,
        queue_id=record.queue_id,
        properties_raw=record.properties_raw,
    )


def decode_stored_message(
    buffer: memoryview,
    position: int,
    limit: int,
    commit_log_offset: int,
    size: int,
    *,
    check_crc: bool = False,
) -> StoredMessage:
    """The record of ``size`` bytes at ``buffer[position:]`` (a segment whose written part ends at ``limit``;
    ``commit_log_offset`` is the record's absolute offset) as a :class:`StoredMessage` with zero-copy views.

    Hot path: one header unpack; with ``check_crc`` one CRC32 of the body (RocketMQ BODYCRC). Raises
    :class:`CorruptRecordError` when the range leaves the written data, the bytes there are not a record of
    that size, or (``check_crc``) the body CRC does not match.
    """
    if size < BODY_POSITION + 3 or position < 0 or position + size > limit:
        raise CorruptRecordError(
            f"[{commit_log_offset}, {commit_log_offset + size}) is not inside the written commit log",
            offset=commit_log_offset,
        )
    header = HEADER.unpack_from(buffer, position)
    magic = header[H_MAGIC]
    if header[H_TOTAL_SIZE] != size or (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2):
        raise CorruptRecordError(
            f"no record of {size} bytes at commit log offset {commit_log_offset}", offset=commit_log_offset
        )
    body_start = position + BODY_POSITION
    body_end = body_start + header[H_BODY_LENGTH]
    if check_crc and crc32(buffer[body_start:body_end]) & 0x7FFFFFFF != header[H_BODY_CRC]:
        raise CorruptRecordError(
            f"body CRC mismatch in the record at commit log offset {commit_log_offset}",
            offset=commit_log_offset,
        )
    properties_end = position + size
    if buffer[properties_end - CRC32_RESERVED_LEN : properties_end - 11] == CRC32_TAIL_PREFIX:
        properties_end -= CRC32_RESERVED_LEN  # the reserved record CRC is not a user property
    if magic == MESSAGE_MAGIC_CODE:
        properties_start = body_end + 1 + buffer[body_end] + 2
    else:
        properties_start = body_end + 2 + int.from_bytes(buffer[body_end : body_end + 2]) + 2
    return StoredMessage(
        queue_offset=header[H_QUEUE_OFFSET],
        commit_log_offset=commit_log_offset,
        size=size,
        store_timestamp=header[H_STORE_TIMESTAMP],
        body=buffer[body_start:body_end],
        born_timestamp=header[H_BORN_TIMESTAMP],
        queue_id=header[H_QUEUE_ID],
        properties_raw=buffer[properties_start:properties_end],
    )
