"""CommitLog: the one append-only log of every topic's records, in mapped segment files (RocketMQ
``CommitLog``).

Files live in ``<root>/commitlog/`` and are named by their 20-digit start offset (semantics.md A2). Records
use the byte layout of :mod:`quasar.storage.record`; a record never spans two files: when it does not fit
(with 8 bytes to spare) the commit log writes the blank end-of-file record and rolls to the next file
(``AppendMessageStatus.END_OF_FILE`` handled internally, RocketMQ ``DefaultAppendMessageCallback.doAppend``).

This class knows nothing of consume queues or flush policy: the store dispatches and flushes around it.
Appends happen on one thread (the event loop); :meth:`flush` may run on a flush thread concurrently.
"""

from __future__ import annotations

import errno
import logging
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from quasar.storage.allocate import AllocateMappedFileService
from quasar.storage.errors import (
    CorruptRecordError,
    DiskFullError,
    InvalidMessageError,
    OffsetOutOfRangeError,
)
from quasar.storage.mapped_file import MappedFile
from quasar.storage.mapped_file_queue import MappedFileQueue
from quasar.storage.record import (
    BODY_POSITION,
    CRC32_RESERVED_LEN,
    END_FILE_MIN_BLANK_LENGTH,
    LOCAL_HOST,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    QUEUE_FLAG,
    Buffer,
    CheckStatus,
    HostAddress,
    StoredRecord,
    check_record,
    decode_record,
    encode_blank_into,
    header_middle,
    pack_record_into,
    pack_records_into,
    record_tail,
    topic_field,
)
from quasar.storage.status import AppendMessageStatus

log = logging.getLogger(__name__)

_PUT_OK = AppendMessageStatus.PUT_OK


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of :meth:`CommitLog.append` (RocketMQ ``AppendMessageResult``).

    ``wrote_offset`` is the record's commit log offset (bytes), ``wrote_bytes`` its total size; the record
    ends at ``wrote_offset + wrote_bytes``. ``store_timestamp`` is in ms. All are 0 unless ``status`` is
    PUT_OK.
    """

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    store_timestamp: int = 0
    queue_offset: int = 0


class CommitLog:
    """The commit log in ``store_path`` with segment files of ``mapped_file_size`` bytes."""

    def __init__(
        self,
        store_path: Path,
        mapped_file_size: int,
        *,
        store_host: HostAddress = LOCAL_HOST,
        append_prop_crc: bool = True,
        allocator: AllocateMappedFileService | None = None,
    ) -> None:
        self.mapped_file_queue = MappedFileQueue(store_path, mapped_file_size, allocator=allocator)
        self.mapped_file_size = mapped_file_size
        self.store_host = store_host
        self.append_prop_crc = append_prop_crc
        """Append RocketMQ's reserved ``__CRC32#`` whole-record CRC property to every record."""
        self._reserved = CRC32_RESERVED_LEN if append_prop_crc else 0
        self.create_error: OSError | None = None
        """Why the last append answered CREATE_MAPPED_FILE_FAILED (EMFILE, EACCES...), for the caller to
        report; the caller clears it."""
        self._middle_store = -1
        self._middle_born = -1
        """Store and born timestamps of ``_middle``, the packed header fields 8-14 of the last record."""
        self._middle = b""

    def __repr__(self) -> str:
        return f"CommitLog({self.mapped_file_queue.store_path}, max_offset={self.max_offset})"

    def load(self) -> None:
        """Map the existing segment files (blocking). Raises :class:`StoreLoadError` on inconsistent files."""
        self.mapped_file_queue.load()

    @property
    def min_offset(self) -> int:
        return self.mapped_file_queue.min_offset

    @property
    def max_offset(self) -> int:
        """End of the written data: the commit log offset the next record gets (unless it rolls)."""
        return self.mapped_file_queue.max_offset

    @property
    def flushed_offset(self) -> int:
        """Offset up to which the data is covered by fdatasync."""
        return self.mapped_file_queue.flushed_where

    # -- append ----------------------------------------------------------------------------------------------

    def append(
        self,
        *,
        topic: bytes,
        queue_id: int,
        queue_offset: int,
        body: bytes | bytearray | memoryview,
        properties: bytes,
        store_timestamp: int,
        born_timestamp: int,
        flag: int = 0,
        sys_flag: int = 0,
    ) -> AppendResult:
        """Append one record from its fields (the keyword form of :meth:`append_one`, for tests and tools; born
        host = store host); rolls segments as needed.

        Returns PUT_OK with the record's offset, MESSAGE_SIZE_EXCEEDED when the record can never fit in a
        segment or the topic is longer than 32767 bytes, PROPERTIES_SIZE_EXCEEDED past 32767 property bytes,
        CREATE_MAPPED_FILE_FAILED when the next segment file cannot be created. Does not flush.
        Raises :class:`InvalidMessageError` when a field is out of its range (e.g. a queue id past i32), and
        :class:`DiskFullError` when no disk space can be reserved for the record (nothing is written then:
        space is reserved with ``posix_fallocate`` before the bytes go into the mapping).
        """
        if len(properties) + self._reserved > MAX_PROPERTIES_LENGTH:
            return AppendResult(AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED)
        if len(topic) > MAX_TOPIC_LENGTH:
            return AppendResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        magic, topic_bytes = topic_field(topic)
        try:
            queue_flag = QUEUE_FLAG.pack(queue_id, flag)
        except struct.error as exc:
            raise InvalidMessageError(f"record field out of range: {exc}") from None
        tail = record_tail(topic_bytes, properties, self.append_prop_crc)
        status, offset, size = self.append_one(
            magic, queue_flag, queue_offset, body, tail, store_timestamp, born_timestamp, sys_flag
        )
        if status is not AppendMessageStatus.PUT_OK:
            return AppendResult(status)
        return AppendResult(status, offset, size, store_timestamp, queue_offset)

    def append_one(
        self,
        magic: int,
        queue_flag: bytes,
        queue_offset: int,
        body: Buffer,
        tail: bytes,
        store_timestamp: int,
        born_timestamp: int,
        sys_flag: int = 0,
        unit_buffer: memoryview | None = None,
        unit_position: int = 0,
        tag_hash: int = 0,
    ) -> tuple[AppendMessageStatus, int, int]:
        """The store's hot path: append one record whose constant parts are already encoded.

        ``magic`` and ``tail`` come from :func:`~quasar.storage.record.topic_field` and
        :func:`~quasar.storage.record.record_tail` (the caller checked the topic and property limits),
        ``queue_flag`` is QUEUEID and FLAG packed with :data:`~quasar.storage.record.QUEUE_FLAG`; ``body`` is
        bytes-like with 1-byte items; born host = store host. The bytes are written by
        :data:`~quasar.storage.record.pack_record_into`, the one record encoder, in one C call; given
        ``unit_buffer``, the same call writes the record's 20-byte unit (offset, size, ``tag_hash``) at
        ``unit_position`` of it: the caller's consume queue file, whose positions the caller then moves (this
        class knows nothing of consume queues). Returns ``(PUT_OK, offset, size)`` in bytes, or
        ``(MESSAGE_SIZE_EXCEEDED | CREATE_MAPPED_FILE_FAILED, -1, 0)`` (nothing written). Raises
        :class:`InvalidMessageError` (nothing written) for a field out of range, :class:`DiskFullError`.
        """
        total = BODY_POSITION + len(body) + len(tail) + self._reserved
        mapped_file = self.mapped_file_queue.last_mapped_file
        if mapped_file is None or mapped_file.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > (
            mapped_file.file_size
        ):
            rolled = self._file_for(total)
            if isinstance(rolled, AppendMessageStatus):
                return rolled, -1, 0
            mapped_file = rolled
        if store_timestamp != self._middle_store or born_timestamp != self._middle_born or sys_flag:
            middle = self._header_middle(store_timestamp, born_timestamp, sys_flag)
        else:
            middle = self._middle
        position = mapped_file.wrote_position
        if position + total > mapped_file.reserved_position:
            self._reserve(mapped_file, position + total)
        offset = mapped_file.file_from_offset + position
        mapped_file.wrote_position = mapped_file.committed_position = pack_record_into(
            mapped_file.buffer,
            position,
            offset,
            magic,
            queue_flag,
            queue_offset,
            middle,
            body,
            tail,
            self.append_prop_crc,
            unit_buffer,
            unit_position,
            tag_hash,
        )
        return _PUT_OK, offset, total

    def _header_middle(self, store_timestamp: int, born_timestamp: int, sys_flag: int) -> bytes:
        """Header fields 8-14 (:func:`~quasar.storage.record.header_middle`), cached for the next record while
        the timestamps stay the same. Raises :class:`InvalidMessageError` for a timestamp or flag out of
        range."""
        host = self.store_host
        middle = header_middle(
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=host,
            store_timestamp=store_timestamp,
            store_host=host,
        )
        if not sys_flag:
            self._middle_store = store_timestamp
            self._middle_born = born_timestamp
            self._middle = middle
        return middle

    def append_batch(
        self,
        magic: int,
        queue_flag: bytes,
        queue_offset: int,
        bodies: Sequence[Buffer],
        tail: bytes,
        store_timestamp: int,
        born_timestamp: int,
        sys_flag: int = 0,
    ) -> tuple[AppendMessageStatus, tuple[int, ...]]:
        """Append one ordinary record per body, queue offsets ``queue_offset, queue_offset + 1, ...``, all in
        ONE segment (RocketMQ ``CommitLog.putMessages`` / ``doAppend(MessageExtBatch)``): when the whole batch
        plus 8 bytes does not fit the current segment, the blank record ends it and the batch goes to the
        next one. Arguments as :meth:`append_one`; the records are written by one call of the same encoder
        (:data:`~quasar.storage.record.pack_records_into`: the bytes ``append_one`` would write for each,
        compiled, the GIL released for 64 KiB or more), and they become visible together (``wrote_position``
        moves once, after the last).

        Returns ``(PUT_OK, (offset of each record))``; ``(MESSAGE_SIZE_EXCEEDED, ())`` when the batch can
        never fit in one segment, ``(CREATE_MAPPED_FILE_FAILED, ())``. Raises :class:`InvalidMessageError`
        (nothing written) for a field out of range and :class:`DiskFullError` (nothing written).
        """
        total = (BODY_POSITION + len(tail) + self._reserved) * len(bodies) + sum(map(len, bodies))
        mapped_file = self.mapped_file_queue.last_mapped_file
        if mapped_file is None or mapped_file.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > (
            mapped_file.file_size
        ):
            rolled = self._file_for(total)
            if isinstance(rolled, AppendMessageStatus):
                return rolled, ()
            mapped_file = rolled
        middle = self._header_middle(store_timestamp, born_timestamp, sys_flag)
        start = mapped_file.wrote_position
        if start + total > mapped_file.reserved_position:
            self._reserve(mapped_file, start + total)
        end, offsets = pack_records_into(
            mapped_file.buffer,
            start,
            mapped_file.file_from_offset,
            magic,
            queue_flag,
            queue_offset,
            middle,
            bodies,
            tail,
            self.append_prop_crc,
        )
        mapped_file.wrote_position = mapped_file.committed_position = end
        return AppendMessageStatus.PUT_OK, offsets

    def _file_for(self, total: int) -> MappedFile | AppendMessageStatus:
        """The segment to append ``total`` bytes to: the last one when they fit with 8 bytes to spare, else a
        new one after the blank record (RocketMQ END_OF_FILE). MESSAGE_SIZE_EXCEEDED when ``total`` never
        fits, CREATE_MAPPED_FILE_FAILED when the new segment cannot be created (the OSError in
        :attr:`create_error`: too many open files, permissions...); raises
        :class:`DiskFullError` on ENOSPC."""
        if total + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_size:
            return AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
        queue = self.mapped_file_queue
        try:
            mapped_file = queue.get_last_mapped_file(0)
            assert mapped_file is not None
            if total + END_FILE_MIN_BLANK_LENGTH > mapped_file.remaining():
                self._reserve(mapped_file, mapped_file.wrote_position + END_FILE_MIN_BLANK_LENGTH)
                self._write_blank(mapped_file)
                mapped_file = queue.get_last_mapped_file(0)
                assert mapped_file is not None
        except DiskFullError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                log.error("cannot create the next commit log segment: %s", exc)
                raise DiskFullError(f"no space left for the next commit log segment: {exc}") from exc
            log.debug("cannot create the next commit log segment: %s", exc)  # the caller reports create_error
            self.create_error = exc
            return AppendMessageStatus.CREATE_MAPPED_FILE_FAILED
        return mapped_file

    @staticmethod
    def _reserve(mapped_file: MappedFile, end_position: int) -> None:
        """Reserve disk blocks up to ``end_position``; raises :class:`DiskFullError` on ENOSPC / EDQUOT, the
        OSError itself otherwise (EIO...)."""
        try:
            mapped_file.reserve(end_position)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise DiskFullError(
                f"cannot reserve disk space in commit log segment {mapped_file.file_name}: {exc}"
            ) from exc

    @staticmethod
    def _write_blank(mapped_file: MappedFile) -> None:
        remaining = mapped_file.remaining()
        encode_blank_into(mapped_file.buffer, mapped_file.wrote_position, remaining)
        mapped_file.wrote_position = mapped_file.committed_position = mapped_file.file_size

    # -- read ------------------------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> memoryview:
        """Zero-copy view of ``size`` bytes at commit log ``offset``, within one segment's written part.

        Raises :class:`OffsetOutOfRangeError` otherwise.
        """
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            raise OffsetOutOfRangeError(
                f"commit log offset {offset} is outside [{self.min_offset}, {self.max_offset})"
            )
        return mapped_file.read(offset - mapped_file.file_from_offset, size)

    def read_record(self, offset: int, *, check_crc: bool = False) -> StoredRecord:
        """Decode the record at ``offset`` (body as a memoryview slice, no copy).

        Raises :class:`OffsetOutOfRangeError` outside the written data and :class:`CorruptRecordError` when no
        valid record starts there.
        """
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None or offset - mapped_file.file_from_offset >= mapped_file.wrote_position:
            raise OffsetOutOfRangeError(
                f"commit log offset {offset} is outside [{self.min_offset}, {self.max_offset})"
            )
        position = offset - mapped_file.file_from_offset
        try:
            return decode_record(
                mapped_file.buffer, position, mapped_file.wrote_position, check_crc=check_crc
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"commit log offset {offset}: {exc}", offset=offset) from None

    # -- flush -----------------------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync what was written (see :meth:`MappedFileQueue.flush`); returns the flushed offset.
        Blocking."""
        return self.mapped_file_queue.flush(least_pages)

    # -- recovery --------------------------------------------------------------------------------------------

    def recovery_start_offset(self, files_back: int = 3) -> int:
        """Start of the ``files_back``-th last segment (RocketMQ 4.9 normal recovery: the third-last), 0 if
        none."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return 0
        return files[max(0, len(files) - files_back)].file_from_offset

    def find_valid_end(
        self, from_offset: int, *, check_crc: bool = True, require_prop_crc: bool = False
    ) -> int:
        """Scan records from ``from_offset`` (a record boundary) and return the end of the last valid one.

        Follows RocketMQ ``recoverNormally``: a valid record advances the scan, the blank record moves it to
        the next segment, anything else (zeros, bad magic, torn size, CRC or length mismatch) ends the valid
        data. Never raises on bad bytes. Returns ``from_offset`` clamped into the files' range when nothing is
        valid.
        """
        queue = self.mapped_file_queue
        files = queue.mapped_files
        if not files:
            return 0
        offset = min(max(from_offset, files[0].file_from_offset), files[-1].end_offset)
        mapped_file = queue.find_mapped_file_by_offset(offset)
        while mapped_file is not None:
            position = offset - mapped_file.file_from_offset
            buf = mapped_file.buffer
            limit = mapped_file.file_size
            while position < limit:
                status, size = check_record(
                    buf, position, limit, check_crc=check_crc, require_prop_crc=require_prop_crc
                )
                if status is CheckStatus.VALID:
                    position += size
                elif status is CheckStatus.END_OF_FILE:
                    position = limit
                else:
                    if status is not CheckStatus.NO_DATA:
                        log.warning(
                            "commit log: %s at offset %d ends the valid data",
                            status.value,
                            mapped_file.file_from_offset + position,
                        )
                    return mapped_file.file_from_offset + position
            offset = mapped_file.end_offset
            mapped_file = queue.find_mapped_file_by_offset(offset)
        return offset

    def iter_records(self, from_offset: int, to_offset: int) -> Iterator[StoredRecord]:
        """Decode every record in ``[from_offset, to_offset)`` (boundaries of already validated data),
        skipping blank records. Raises :class:`CorruptRecordError` on a record that does not decode.
        """
        queue = self.mapped_file_queue
        offset = from_offset
        while offset < to_offset:
            mapped_file = queue.find_mapped_file_by_offset(offset)
            if mapped_file is None:
                raise OffsetOutOfRangeError(f"commit log offset {offset} has no segment file")
            position = offset - mapped_file.file_from_offset
            status, size = check_record(mapped_file.buffer, position, mapped_file.file_size, check_crc=False)
            if status is CheckStatus.END_OF_FILE:
                offset = mapped_file.end_offset
                continue
            if status is not CheckStatus.VALID:
                raise CorruptRecordError(f"commit log offset {offset}: {status.value}", offset=offset)
            yield decode_record(mapped_file.buffer, position, mapped_file.file_size)
            offset += size

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at ``offset`` (end of the valid data): later files deleted, the tail zeroed.
        Blocking."""
        self.mapped_file_queue.truncate_dirty_files(offset)

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()

    def close(self) -> None:
        self.mapped_file_queue.close()
