"""IndexFile: one hash index from message key to commit log offset (RocketMQ ``index/IndexFile`` and
``index/IndexHeader``, semantics.md A4).

A file of ``40 + hash_slot_num * 4 + index_num * 20`` bytes (RocketMQ defaults 5,000,000 slots and 20,000,000
items: 420,000,040 bytes, created sparse), big-endian, named by its creation time ``yyyyMMddHHmmssSSS``::

    header (40 bytes)
    ======  ================  =====  =====================================================
    offset  field             bytes  meaning
    ======  ================  =====  =====================================================
    0       begin_timestamp   8      store time (ms) of the first indexed record
    8       end_timestamp     8      store time (ms) of the last indexed record
    16      begin_phy_offset  8      commit log offset of the first indexed record
    24      end_phy_offset    8      commit log offset of the last indexed record
    32      hash_slot_count   4      slots in use
    36      index_count       4      next item number; starts at 1 (slot value 0 = empty)
    ======  ================  =====  =====================================================

    hash slots: hash_slot_num x i32, the number of the latest item whose key hashed to the slot
    index items (20 bytes each, item n at 40 + hash_slot_num * 4 + n * 20):
    ======  ================  =====  =====================================================
    offset  field             bytes  meaning
    ======  ================  =====  =====================================================
    0       key_hash          4      abs(Java String.hashCode(key)), 0 if still negative
    4       phy_offset        8      commit log offset of the record
    12      time_diff         4      seconds since begin_timestamp, clamped to [0, 2^31-1]
    16      prev_index        4      previous item in the same slot; 0 ends the chain
    ======  ================  =====  =====================================================

The slot of a key is ``key_hash % hash_slot_num``; items of one slot form a newest-first chain through
``prev_index``. The file is full when ``index_count >= index_num``. Only the 32-bit hash is compared on lookup:
different keys with the same hash come back too, so the caller filters on the real key (RocketMQ
``MQAdminImpl``). One writer (the reput thread); readers may run concurrently: an item is complete before the
slot points at it.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

from quasar.java_hash import java_string_hash
from quasar.storage.errors import StoreLoadError
from quasar.storage.mapped_file import fdatasync, reserve_space

INDEX_HEADER = struct.Struct(">qqqqii")
"""begin_timestamp, end_timestamp, begin_phy_offset, end_phy_offset, hash_slot_count, index_count: 40 bytes."""
INDEX_HEADER_SIZE = 40
HASH_SLOT = struct.Struct(">i")
HASH_SLOT_SIZE = 4
INDEX_ITEM = struct.Struct(">iqii")
"""key_hash, phy_offset, time_diff, prev_index: 20 bytes."""
INDEX_ITEM_SIZE = 20
INVALID_INDEX = 0
MAX_TIME_DIFF = 0x7FFFFFFF
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_MAX_INDEX_NUM = 20_000_000
INDEX_FILE_NAME_LENGTH = 17
RESERVE_STEP = 1024 * 1024
"""Disk blocks for index items are reserved (``posix_fallocate``) this many bytes at a time."""


def index_key_hash(key: str) -> int:
    """RocketMQ ``IndexFile.indexKeyHashMethod``: ``abs(hashCode)``, forced to 0 when still negative
    (``Integer.MIN_VALUE``)."""
    h = abs(java_string_hash(key))
    return 0 if h > 0x7FFFFFFF else h


def index_file_name(timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time (RocketMQ ``UtilAll.timeMillisToHumanString``)."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file: ``40 + hash_slot_num * 4 + index_num * 20``."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ITEM_SIZE


class IndexFile:
    """One index file at ``path`` with ``hash_slot_num`` slots and room for ``index_num`` items.

    ``create=True`` makes a new (sparse, zero) file; ``create=False`` maps an existing one and raises
    :class:`StoreLoadError` when its size does not match. Blocking constructor.
    """

    def __init__(self, path: Path, hash_slot_num: int, index_num: int, *, create: bool) -> None:
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError(f"hash_slot_num must be > 0 and index_num > 1: {hash_slot_num}, {index_num}")
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._items_start = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if create:
                os.ftruncate(self._fd, self.file_size)
                reserve_space(self._fd, 0, self._items_start)  # header and slots: written anywhere
                # the size must be durable before the caller fsyncs the directory that names the file: else a
                # power cut can leave the name with 0 bytes, and load() refuses the store
                os.fsync(self._fd)
            elif os.fstat(self._fd).st_size != self.file_size:
                raise StoreLoadError(
                    f"{path}: size {os.fstat(self._fd).st_size} bytes, expected {self.file_size} "
                    f"({hash_slot_num} slots, {index_num} items)"
                )
            self._mmap = mmap.mmap(self._fd, self.file_size)
        except BaseException:
            os.close(self._fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.buffer = memoryview(self._mmap)
        header: tuple[int, int, int, int, int, int] = INDEX_HEADER.unpack_from(self.buffer, 0)
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = header
        if self.index_count <= 0:
            self.index_count = 1  # RocketMQ IndexHeader.load
        self._dirty = create
        self._reserved_end = self._items_start if create else self.file_size
        """Bytes with disk blocks: a store through the mapping into a hole on a full disk is a SIGBUS."""

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.path.name}, items={self.index_count - 1}/{self.index_num - 1}, "
            f"time=[{self.begin_timestamp}, {self.end_timestamp}])"
        )

    def is_full(self) -> bool:
        """RocketMQ ``isWriteFull``: ``index_count >= index_num``."""
        return self.index_count >= self.index_num

    @property
    def is_empty(self) -> bool:
        return self.index_count <= 1

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one item for a key of hash ``key_hash`` (from :func:`index_key_hash`) pointing at the record at
        ``phy_offset`` stored at ``store_timestamp`` (ms). False (nothing written) when the file is full.
        RocketMQ ``IndexFile.putKey``. Raises OSError (``ENOSPC``) when no disk blocks can be reserved for the
        item (nothing written).
        """
        index_count = self.index_count
        if index_count >= self.index_num:
            return False
        buffer = self.buffer
        slot_position = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value = HASH_SLOT.unpack_from(buffer, slot_position)[0]
        if slot_value <= INVALID_INDEX or slot_value > index_count:
            slot_value = INVALID_INDEX
        item_position = self._items_start + index_count * INDEX_ITEM_SIZE
        if item_position + INDEX_ITEM_SIZE > self._reserved_end:
            end = min(self.file_size, max(item_position + INDEX_ITEM_SIZE, self._reserved_end + RESERVE_STEP))
            reserve_space(self._fd, self._reserved_end, end)  # OSError (ENOSPC): nothing written
            self._reserved_end = end
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), MAX_TIME_DIFF)
        INDEX_ITEM.pack_into(
            buffer,
            item_position,
            key_hash,
            phy_offset,
            time_diff,
            slot_value,
        )
        HASH_SLOT.pack_into(buffer, slot_position, index_count)
        if index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = index_count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self.buffer,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        self._dirty = True

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """RocketMQ ``isTimeMatched``: the file's [begin, end] timestamps overlap [begin_ms, end_ms]."""
        return (
            begin_ms <= self.begin_timestamp <= end_ms
            or begin_ms <= self.end_timestamp <= end_ms
            or (self.begin_timestamp <= begin_ms and end_ms <= self.end_timestamp)
        )

    def select_phy_offsets(self, key_hash: int, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commit log offsets of items with ``key_hash`` whose time ``begin_timestamp + time_diff * 1000``
        lies in [begin_ms, end_ms], newest first, at most ``max_num`` (RocketMQ ``selectPhyOffset``).

        The walk follows the slot's chain and stops at an invalid or self-referencing ``prev_index`` or once
        an item's time is below ``begin_ms``. Item times have one-second resolution.
        """
        result: list[int] = []
        if max_num <= 0:
            return result
        buffer = self.buffer
        index_count = self.index_count
        slot_position = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        current = HASH_SLOT.unpack_from(buffer, slot_position)[0]
        if current <= INVALID_INDEX or current >= index_count:
            return result
        begin_timestamp = self.begin_timestamp
        items_start = self._items_start
        while len(result) < max_num:
            hash_read, phy_offset, time_diff, prev_index = INDEX_ITEM.unpack_from(
                buffer, items_start + current * INDEX_ITEM_SIZE
            )
            if time_diff < 0:
                break
            time_read = begin_timestamp + time_diff * 1000
            if hash_read == key_hash and begin_ms <= time_read <= end_ms:
                result.append(phy_offset)
            if (
                prev_index <= INVALID_INDEX
                or prev_index >= index_count
                or prev_index == current
                or time_read < begin_ms
            ):
                break
            current = prev_index
        return result

    def first_item_at_or_past(self, phy_offset: int) -> int:
        """The number of the first item pointing at ``phy_offset`` or later (``index_count`` when none): items
        are appended in commit log order, so this is a binary search."""
        low, high = 1, self.index_count
        while low < high:
            middle = (low + high) // 2
            position = self._items_start + middle * INDEX_ITEM_SIZE
            if INDEX_ITEM.unpack_from(self.buffer, position)[1] < phy_offset:
                low = middle + 1
            else:
                high = middle
        return low

    def truncate_items(self, first: int) -> None:
        """Remove items ``first`` .. ``index_count - 1`` (the newest ones, ``first >= 2`` so one stays): each is
        unlinked from its slot's chain (newest first, so the slot points at it when its turn comes), zeroed,
        and the header moves back (``end_phy_offset`` to the last kept item, ``end_timestamp`` to that item's
        second). The inverse of :meth:`put_key`, for ``MessageStore.truncate_commit_log``. Blocking callers
        only (the index service's lock held); call :meth:`flush` after."""
        buffer = self.buffer
        items_start = self._items_start
        for number in range(self.index_count - 1, max(first, 2) - 1, -1):
            position = items_start + number * INDEX_ITEM_SIZE
            key_hash, _, _, prev_index = INDEX_ITEM.unpack_from(buffer, position)
            slot_position = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
            if HASH_SLOT.unpack_from(buffer, slot_position)[0] == number:
                if not INVALID_INDEX < prev_index < number:
                    prev_index = INVALID_INDEX
                HASH_SLOT.pack_into(buffer, slot_position, prev_index)
                if prev_index == INVALID_INDEX:
                    self.hash_slot_count = max(0, self.hash_slot_count - 1)
            buffer[position : position + INDEX_ITEM_SIZE] = bytes(INDEX_ITEM_SIZE)
            self.index_count = number
        _, phy_offset, time_diff, _ = INDEX_ITEM.unpack_from(
            buffer, items_start + (self.index_count - 1) * INDEX_ITEM_SIZE
        )
        self.end_phy_offset = phy_offset
        self.end_timestamp = min(self.end_timestamp, self.begin_timestamp + time_diff * 1000 + 999)
        self._write_header()

    def flush(self) -> None:
        """fdatasync the file (header, slots and items). Blocking."""
        if self._dirty and self._fd >= 0:
            self._mmap.flush()
            fdatasync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd < 0:
            return
        self.buffer.release()
        self._mmap.close()
        os.close(self._fd)
        self._fd = -1

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)
