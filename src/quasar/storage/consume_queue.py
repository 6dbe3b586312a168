"""ConsumeQueue: the per (topic, queue id) index of commit log records (RocketMQ ``ConsumeQueue``).

One 20-byte, big-endian unit per record (semantics.md A3, ``CQ_STORE_UNIT_SIZE = 20``)::

    +---------------------------+-----------+-------------------------+
    | commit log offset (i64)   | size (i32)| tag hash (i64)          |
    +---------------------------+-----------+-------------------------+
    0                           8           12                        20

Unit *n* (queue offset *n*) sits at logical byte ``n * 20``; the files hold ``consume_queue_file_size`` bytes
(a multiple of 20) and are named by their 20-digit start byte offset, in
``<root>/consumequeue/<topic dir>/<queue id>/``. The topic directory is the topic percent-encoded (every byte
outside ``[A-Za-z0-9_-]`` becomes ``%XX``, so ``/``, ``:`` and ``.`` never reach the file system); a name
whose encoding passes 200 bytes is stored as ``~<sha256 hex>`` with the topic in a ``TOPIC`` file inside.

Pre-blank units (offset 0, size 2^31-1, tag 0, RocketMQ ``fillPreBlank``) fill a first file when a queue
starts at a non-zero queue offset. Consume queues are derived data: recovery rebuilds them from the commit
log.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote, unquote

from quasar.native import load_twin
from quasar.storage.errors import ConsumeQueueGapError, StoreLoadError
from quasar.storage.mapped_file import OS_PAGE_SIZE, MappedFile, fsync_dir
from quasar.storage.mapped_file_queue import MappedFileQueue

if TYPE_CHECKING:
    from quasar.storage.file_cache import MappedFileCache

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
"""commit log offset (i64), size (i32), tag hash (i64): 20 bytes."""
pack_units_into: Callable[[memoryview, int, Sequence[int], int, int, int, int], int] = load_twin(
    "quasar.storage._record"
).pack_units
"""``pack_units_into(buf, position, offsets, start, stop, end_offset, tag_hash)``: the :data:`UNIT` of each record
``offsets[start:stop]`` (size up to the next offset, ``end_offset`` after the last of the list) written from
``buf[position:]`` on, in one call (compiled in ``_record_c.c``, twin ``_record_py.py``); returns the position
past the last. Raises ValueError (nothing written) for units that do not fit or a field out of range."""
CQ_STORE_UNIT_SIZE = 20
MSG_TAG_OFFSET_INDEX = 12
PRE_BLANK_SIZE = 0x7FFFFFFF
"""Size field of a pre-blank filler unit (``Integer.MAX_VALUE``)."""

CQ_FIRST_RESERVE_STEP = OS_PAGE_SIZE
"""Disk blocks a new consume queue file reserves first (204 units); each later reservation doubles the reserved
part, up to 4 MiB steps (:meth:`MappedFile.reserve <quasar.storage.mapped_file.MappedFile.reserve>`), so a
near-empty queue costs one page of disk and a busy one about ten more ``posix_fallocate`` calls per file."""

TOPIC_FILE_NAME = "TOPIC"
_MAX_ENCODED_TOPIC_LENGTH = 200
_HASHED_PREFIX = "~"


def encode_topic_dir(topic: str) -> str:
    """Reversible, file-system-safe directory name for a topic (see the module docstring)."""
    if not topic:
        raise ValueError("empty topic name")
    encoded = quote(topic, safe="").replace(".", "%2E").replace("~", "%7E")
    if len(encoded) > _MAX_ENCODED_TOPIC_LENGTH:
        return _HASHED_PREFIX + hashlib.sha256(topic.encode()).hexdigest()
    return encoded


def decode_topic_dir(path: Path) -> str:
    """The topic a directory made by :func:`encode_topic_dir` belongs to (reads ``TOPIC`` for hashed
    names)."""
    name = path.name
    if name.startswith(_HASHED_PREFIX):
        try:
            return (path / TOPIC_FILE_NAME).read_text(encoding="utf-8")
        except OSError as exc:
            raise StoreLoadError(
                f"{path}: hashed topic directory without a readable TOPIC file: {exc}"
            ) from None
    return unquote(name, errors="strict")


def read_at(path: Path, position: int, size: int) -> bytes:
    """``size`` bytes at ``position`` of the file at ``path``, read without mapping it (a thread other than
    the file cache's owner reading an unmapped file). Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, position)
    finally:
        os.close(fd)
    if len(data) != size:
        raise StoreLoadError(f"{path}: {len(data)} bytes at {position}, {size} expected")
    return data


class ConsumeQueueUnit(NamedTuple):
    commit_log_offset: int
    size: int
    tag_hash: int


class ConsumeQueue:
    """The consume queue of ``(topic, queue_id)`` under ``root`` (the ``consumequeue`` directory)."""

    def __init__(
        self,
        root: Path,
        topic: str,
        queue_id: int,
        mapped_file_size: int,
        file_cache: MappedFileCache | None = None,
    ) -> None:
        """``file_cache``: the store's budget of mapped files (files are then mapped on demand and may be
        unmapped when not in use; see :mod:`quasar.storage.file_cache`); None keeps every file mapped."""
        if mapped_file_size <= 0 or mapped_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size must be a positive multiple of 20: {mapped_file_size}")
        self.root = root
        self.topic = topic
        self.queue_id = queue_id
        self.topic_path = root / encode_topic_dir(topic)
        self.mapped_file_queue = MappedFileQueue(
            self.topic_path / str(queue_id),
            mapped_file_size,
            first_reserve_step=CQ_FIRST_RESERVE_STEP,
            file_cache=file_cache,
        )
        self.mapped_file_size = mapped_file_size
        self.min_logic_offset = 0
        """Byte offset of the first real (non pre-blank) unit."""
        self.max_physic_offset = 0
        """End (offset + size) of the commit log record of the last unit."""
        self._dirs_need_sync = False

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset}, max={self.max_offset})"

    # -- offsets ---------------------------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """The next queue offset to write (RocketMQ ``getMaxOffsetInQueue``)."""
        return self.mapped_file_queue.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        """The first queue offset still held (RocketMQ ``getMinOffsetInQueue``)."""
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    # -- read ------------------------------------------------------------------------------------------------

    def get_unit(self, queue_offset: int) -> ConsumeQueueUnit | None:
        """The unit at ``queue_offset``, or None outside ``[min_offset, max_offset)`` or in a missing file."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        position = queue_offset * CQ_STORE_UNIT_SIZE
        queue = self.mapped_file_queue
        mapped_file = queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return None
        position -= mapped_file.file_from_offset
        cache = queue.file_cache
        if cache is None:
            return ConsumeQueueUnit(*UNIT.unpack_from(mapped_file.buffer, position))
        if threading.get_ident() == cache.owner:
            cache.use(mapped_file)
            return ConsumeQueueUnit(*UNIT.unpack_from(mapped_file.buffer, position))
        with cache.lock:  # another thread (retention): no eviction while it reads, no mapping for it
            if mapped_file.is_mapped:
                return ConsumeQueueUnit(*UNIT.unpack_from(mapped_file.buffer, position))
        return ConsumeQueueUnit(*UNIT.unpack(read_at(mapped_file.path, position, CQ_STORE_UNIT_SIZE)))

    def read_units(self, queue_offset: int, max_count: int) -> memoryview | None:
        """Zero-copy view of up to ``max_count`` consecutive units from ``queue_offset``, all in one file (the
        caller continues in the next file with another call). None when the offset is not held.
        """
        if not self.min_offset <= queue_offset < self.max_offset or max_count <= 0:
            return None
        position = queue_offset * CQ_STORE_UNIT_SIZE
        queue = self.mapped_file_queue
        mapped_file = queue.find_mapped_file_by_offset(position)
        if mapped_file is None:
            return None
        if queue.file_cache is not None:
            queue.file_cache.use(mapped_file)
        start = position - mapped_file.file_from_offset
        end = min(mapped_file.wrote_position, start + max_count * CQ_STORE_UNIT_SIZE)
        return mapped_file.buffer[start:end]

    def next_file_queue_offset(self, queue_offset: int) -> int:
        """First queue offset of the file after the one holding ``queue_offset`` (RocketMQ
        ``rollNextFile``)."""
        units_per_file = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return queue_offset + units_per_file - queue_offset % units_per_file

    # -- write -----------------------------------------------------------------------------------------------

    def put_unit(
        self,
        queue_offset: int,
        commit_log_offset: int,
        size: int,
        tag_hash: int,
        *,
        allow_pre_blank: bool = True,
    ) -> bool:
        """Write the unit for ``queue_offset``; False (and nothing written) when it already exists.

        Re-dispatch is idempotent this way (RocketMQ "build consume queue repeatedly" is skipped). An empty
        queue may start past 0 with a pre-blank fill when ``allow_pre_blank``. Raises
        :class:`ConsumeQueueGapError` when ``queue_offset`` is past the end of a non-empty queue (or of an
        empty one without ``allow_pre_blank``), OSError when a file cannot be created.
        """
        expected = queue_offset * CQ_STORE_UNIT_SIZE
        queue = self.mapped_file_queue
        current = queue.max_offset
        if expected < current:
            return False
        if expected > current:
            if current > self.min_logic_offset or not allow_pre_blank:
                raise ConsumeQueueGapError(
                    f"consume queue {self.topic!r}/{self.queue_id}: unit {queue_offset} would follow queue "
                    f"offset {current // CQ_STORE_UNIT_SIZE}",
                    expected_queue_offset=current // CQ_STORE_UNIT_SIZE,
                    queue_offset=queue_offset,
                )
            self._start_at(expected)
        mapped_file = queue.last_mapped_file
        if mapped_file is None or mapped_file.is_full():
            mapped_file = self._next_file(expected)
        position = mapped_file.wrote_position
        if position + CQ_STORE_UNIT_SIZE > mapped_file.reserved_position:  # also when unmapped (reads 0)
            queue.use(mapped_file).reserve(position + CQ_STORE_UNIT_SIZE)
        UNIT.pack_into(mapped_file.buffer, position, commit_log_offset, size, tag_hash)
        mapped_file.wrote_position = mapped_file.committed_position = position + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = commit_log_offset + size
        return True

    def prepare_write(self, count: int = 1) -> MappedFile:
        """Make sure the unit at :attr:`max_offset` (and the next ones up to ``count`` units, as far as the
        same file goes) can be written without touching the disk allocator: the file exists and has disk
        blocks (the store calls this before appending to the commit log, so a full disk refuses the put
        instead of failing the dispatch). Returns the file the next unit goes to: the put path writes the unit
        there at its ``wrote_position`` with the record's C call, then moves the file's positions and
        :attr:`max_physic_offset` (nothing else may write to this queue in between). Raises OSError."""
        queue = self.mapped_file_queue
        mapped_file = queue.last_mapped_file
        if mapped_file is None or mapped_file.is_full():
            mapped_file = self._next_file(queue.max_offset)
        position = mapped_file.wrote_position
        queue.use(mapped_file).reserve(min(mapped_file.file_size, position + count * CQ_STORE_UNIT_SIZE))
        return mapped_file

    def append_units(
        self,
        mapped_file: MappedFile,
        commit_log_offsets: Sequence[int],
        end_offset: int,
        tag_hash: int,
    ) -> None:
        """Write the units of a batch of consecutive records (record *i* spans ``commit_log_offsets[i]`` up to
        the next offset, the last one up to ``end_offset``) from :attr:`max_offset` on, starting in
        ``mapped_file`` (from :meth:`prepare_write` with the batch's count) and rolling to new files when it
        fills up; one :data:`pack_units_into` call per file. Raises OSError when a new file cannot be created
        (a batch crossing a file boundary on a full disk)."""
        count = len(commit_log_offsets)
        index = 0
        while True:
            position = mapped_file.wrote_position
            stop = min(count, index + (mapped_file.file_size - position) // CQ_STORE_UNIT_SIZE)
            if position + (stop - index) * CQ_STORE_UNIT_SIZE > mapped_file.reserved_position:
                self.mapped_file_queue.use(mapped_file).reserve(
                    position + (stop - index) * CQ_STORE_UNIT_SIZE
                )
            position = pack_units_into(
                mapped_file.buffer, position, commit_log_offsets, index, stop, end_offset, tag_hash
            )
            mapped_file.wrote_position = mapped_file.committed_position = position
            index = stop
            if index >= count:
                break
            mapped_file = self._next_file(self.mapped_file_queue.max_offset)
        self.max_physic_offset = end_offset

    def _next_file(self, start_offset: int) -> MappedFile:
        queue = self.mapped_file_queue
        if not queue.mapped_files:
            self._ensure_dirs()
        mapped_file = queue.get_last_mapped_file(start_offset)
        assert mapped_file is not None
        return mapped_file

    def restart_at(self, queue_offset: int) -> None:
        """Make this queue an empty one that starts at ``queue_offset``: its files are replaced by one file of
        pre-blank units up to that offset (RocketMQ ``fillPreBlank``), so its offsets below stay taken.
        Blocking; call :meth:`flush` to make it durable. Raises OSError."""
        self._start_at(queue_offset * CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = 0

    def _start_at(self, expected: int) -> None:
        """Restart an empty queue at byte offset ``expected``, pre-blank filling its first file."""
        queue = self.mapped_file_queue
        if queue.mapped_files:
            queue.destroy()
        mapped_file = self._next_file(expected)
        mapped_file.reserve(expected - mapped_file.file_from_offset + CQ_STORE_UNIT_SIZE)
        buffer = mapped_file.buffer
        for position in range(0, expected - mapped_file.file_from_offset, CQ_STORE_UNIT_SIZE):
            UNIT.pack_into(buffer, position, 0, PRE_BLANK_SIZE, 0)
        mapped_file.wrote_position = mapped_file.committed_position = expected - mapped_file.file_from_offset
        self.min_logic_offset = expected

    def _ensure_dirs(self) -> None:
        """Create the topic and queue directories (one ``mkdir`` each: a new queue's cost on the put path)."""
        if self.mapped_file_queue.store_path.is_dir():
            return
        self.topic_path.mkdir(parents=True, exist_ok=True)
        self.mapped_file_queue.store_path.mkdir(exist_ok=True)
        if self.topic_path.name.startswith(_HASHED_PREFIX):
            topic_file = self.topic_path / TOPIC_FILE_NAME
            if not topic_file.exists():
                topic_file.write_text(self.topic, encoding="utf-8")
        self._dirs_need_sync = True

    # -- load / recover --------------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the existing files (blocking). Raises :class:`StoreLoadError` on inconsistent files."""
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the end of the valid units and cut there (RocketMQ ``ConsumeQueue.recover``). Blocking.

        Scans from the third-last file while ``offset >= 0 and size > 0``; the first failing unit ends the
        data. Also sets ``min_offset`` (skipping pre-blank units) and ``max_physic_offset``.
        """
        cache = self.mapped_file_queue.file_cache
        if cache is None:
            self._recover()
        else:
            with cache.lock:  # no eviction by another thread while this one reads
                self._recover()

    def _recover(self) -> None:
        queue = self.mapped_file_queue
        files = queue.mapped_files
        if not files:
            return
        end = files[max(0, len(files) - 3)].file_from_offset
        for mapped_file in files[max(0, len(files) - 3) :]:
            queue.use(mapped_file)
            valid = 0
            for commit_log_offset, size, _ in UNIT.iter_unpack(mapped_file.buffer):
                if commit_log_offset < 0 or size <= 0:
                    break
                valid += CQ_STORE_UNIT_SIZE
            end = mapped_file.file_from_offset + valid
            if valid < mapped_file.file_size:
                break
        queue.truncate_dirty_files(end)
        first = queue.first_mapped_file
        self.min_logic_offset = first.file_from_offset if first is not None else 0
        if first is not None:
            buffer = queue.use(first).buffer
            while self.min_logic_offset < queue.max_offset:
                position = self.min_logic_offset - first.file_from_offset
                if (
                    position >= first.wrote_position
                    or UNIT.unpack_from(buffer, position)[1] != PRE_BLANK_SIZE
                ):
                    break
                self.min_logic_offset += CQ_STORE_UNIT_SIZE
        self._update_max_physic_offset()

    def delete_first_files(self, count: int) -> list[MappedFile]:
        """Detach the ``count`` oldest files (never the last) for retention and move ``min_offset`` to the
        first unit still held; returns the detached files for the caller to destroy."""
        detached = self.mapped_file_queue.detach_first(count)
        first = self.mapped_file_queue.first_mapped_file
        if detached and first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
        return detached

    def _update_max_physic_offset(self) -> None:
        last = self.get_unit(self.max_offset - 1) if self.max_offset > self.min_offset else None
        self.max_physic_offset = last.commit_log_offset + last.size if last is not None else 0

    def truncate_dirty(self, commit_log_offset: int) -> None:
        """Drop the units of records at or past ``commit_log_offset`` (RocketMQ ``truncateDirtyLogicFiles``).

        Units are ordered by commit log offset, so the first dirty unit is found by binary search. Blocking.
        """
        if self.max_physic_offset <= commit_log_offset:
            return
        low = self.first_unit_at_or_past(commit_log_offset)
        if low == self.max_offset:
            return
        log.info("consume queue %s/%d: truncating from queue offset %d", self.topic, self.queue_id, low)
        self.mapped_file_queue.truncate_dirty_files(low * CQ_STORE_UNIT_SIZE)
        self._update_max_physic_offset()

    def first_unit_at_or_past(self, commit_log_offset: int) -> int:
        """The first queue offset whose record starts at or past ``commit_log_offset`` (``max_offset`` if none).

        Units are ordered by commit log offset, so this is a binary search over ``[min_offset, max_offset)``.
        """
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            unit = self.get_unit(middle)
            if unit is not None and unit.commit_log_offset < commit_log_offset:
                low = middle + 1
            else:
                high = middle
        return low

    def count_units_below(self, commit_log_offset: int) -> int:
        """How many units (pre-blank excluded) belong to records starting below ``commit_log_offset``."""
        return self.first_unit_at_or_past(commit_log_offset) - self.min_offset

    # -- flush / close ---------------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync dirty files (and, once, newly created directories and the ``TOPIC`` file); return the
        flushed byte offset. Blocking."""
        flushed = self.mapped_file_queue.flush(least_pages)
        if self.flush_new_dirs():
            fsync_dir(self.root)
        return flushed

    def flush_files(self, least_pages: int = 0) -> bool:
        """:meth:`flush` except the fsync of the ``consumequeue`` directory, which the caller does once for
        many queues; True when it is needed (this queue's directories were new). Blocking."""
        self.mapped_file_queue.flush(least_pages)
        return self.flush_new_dirs()

    def flush_new_dirs(self) -> bool:
        """fsync the ``TOPIC`` file and the topic directory once after they were created; True when it did
        (the ``consumequeue`` directory then needs an fsync too, for the topic directory's entry)."""
        if not self._dirs_need_sync:
            return False
        topic_file = self.topic_path / TOPIC_FILE_NAME
        if topic_file.exists():
            fd = os.open(topic_file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.topic_path)
        self._dirs_need_sync = False
        return True

    def has_dirty_data(self) -> bool:
        return self.mapped_file_queue.has_dirty_data()

    def destroy(self) -> None:
        """Delete this queue's files and directory, and the topic directory once it holds no queue
        (blocking)."""
        self.mapped_file_queue.destroy()
        queue_dir = self.mapped_file_queue.store_path
        if queue_dir.is_dir():
            queue_dir.rmdir()
        if self.topic_path.is_dir() and all(p.name == TOPIC_FILE_NAME for p in self.topic_path.iterdir()):
            (self.topic_path / TOPIC_FILE_NAME).unlink(missing_ok=True)
            self.topic_path.rmdir()
        self.min_logic_offset = self.max_physic_offset = 0

    def close(self) -> None:
        self.mapped_file_queue.close()
