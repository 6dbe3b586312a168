"""MappedFile: one fixed-size segment file written through ``mmap`` (RocketMQ ``logfile/DefaultMappedFile``).

A segment is named by its 20-digit, zero-padded start offset (``00000000001073741824``; RocketMQ
``UtilAll.offset2FileName``) and created at its full size (a sparse file: unwritten bytes read as zero).

Positions, relative to the file start, in bytes:

- ``wrote_position``: end of the bytes written into the mapping. Only the writer (the event loop thread) moves
  it,
  after the bytes are in place, so any reader sees it on a record boundary.
- ``committed_position``: equal to ``wrote_position`` (no transient store pool yet).
- ``flushed_position``: end of the bytes covered by an ``fdatasync`` of the file.

:meth:`MappedFile.flush` runs ``os.fdatasync`` (which releases the GIL) and is meant for a flush thread while
the loop thread keeps appending: the position sampled *before* the sync becomes the flushed position.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from quasar.storage.errors import OffsetOutOfRangeError, StoreLoadError

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
"""RocketMQ ``MappedFile.OS_PAGE_SIZE``: the unit of ``flush_least_pages``."""

FILE_NAME_LENGTH = 20

fdatasync = getattr(os, "fdatasync", os.fsync)
"""The durability syscall (module attribute so tests can count calls)."""


RESERVE_CHUNK_SIZE = 4 * 1024 * 1024
"""Most bytes of disk reserved (``posix_fallocate``) at a time ahead of the write position."""


def reserve_space(fd: int, start: int, end: int) -> None:
    """Allocate disk blocks for bytes ``[start, end)`` of the file (``posix_fallocate``), so that writes
    through the mapping there can never hit a full disk: a store into a sparse page with no space left is a
    SIGBUS, not an error. Raises OSError (``ENOSPC`` when the disk is full)."""
    if end > start:
        os.posix_fallocate(fd, start, end - start)


def _allocated_prefix(fd: int, allocated_bytes: int) -> int:
    """Bytes from the start of the file known to have disk blocks: up to its first hole (``SEEK_HOLE``), and
    never more than the blocks it holds (``st_blocks``, so a file system that reports no holes claims
    nothing it has not allocated), in whole pages. A file this store wrote has its blocks from offset 0 on
    (reservations grow from the start), so a file mapped after a restart needs no new reservation, and no
    descriptor opened for one, before its next put. 0 when unknown."""
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except (OSError, AttributeError):
        return 0
    return min(hole, allocated_bytes) // OS_PAGE_SIZE * OS_PAGE_SIZE


class FileCounter(Protocol):
    """What a file knows of the cache that counts it (:class:`~quasar.storage.file_cache.MappedFileCache`)."""

    def forget(self, mapped_file: MappedFile) -> None: ...


_UNMAPPED = memoryview(b"")
_UNMAPPED.release()
"""The ``buffer`` of a file that is not mapped: any use raises ValueError (never a stale mapping)."""


def offset_to_file_name(offset: int) -> str:
    """``1073741824`` -> ``"00000000001073741824"`` (RocketMQ ``UtilAll.offset2FileName``)."""
    if offset < 0:
        raise ValueError(f"negative file offset: {offset}")
    return f"{offset:020d}"


def file_name_to_offset(name: str) -> int:
    """Inverse of :func:`offset_to_file_name`; raises :class:`StoreLoadError` for any other name."""
    if len(name) != FILE_NAME_LENGTH or not name.isascii() or not name.isdigit():
        raise StoreLoadError(f"not a segment file name (20 digits expected): {name!r}")
    return int(name)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created or removed in it survive a crash. Blocking."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One segment file mapped read-write.

    ``MappedFile(path, file_size, create=True)`` creates the file (it must not exist) at ``file_size`` bytes;
    ``create=False`` opens an existing one and raises :class:`StoreLoadError` if its size differs, except
    that ``extend_short=True`` grows a shorter file (a crash while creating the last segment) with zeros,
    which recovery then reads as the end of the data. ``buffer`` is a writable memoryview over the whole
    mapping: slices of it are handed out without copying.

    ``first_reserve_step``: bytes of disk the first :meth:`reserve` allocates at least; every later step
    reserves as much again as is reserved already (doubling), up to :data:`RESERVE_CHUNK_SIZE`. The commit
    log keeps the default (4 MiB steps from the start); a consume queue file starts at one page, so a queue
    with a few units holds 4 KiB of disk, not 4 MiB, and a busy one reaches 4 MiB steps after ten
    reservations. The logical size (``file_size``, a sparse file) does not depend on it.

    ``keep_fd``: keep the file's descriptor open while mapped (the commit log: its flush thread syncs it all
    the time). With False (consume queue files, many and small) the descriptor is closed once the file is
    mapped, so a mapped file holds one descriptor, the duplicate ``mmap`` keeps, and a reservation, a flush
    or a truncation opens one for its duration.
    """

    __slots__ = (
        "_fd",
        "_fd_lock",
        "_keep_fd",
        "_mmap",
        "_saved_reserved_position",
        "buffer",
        "cache",
        "committed_position",
        "file_from_offset",
        "file_size",
        "first_reserve_step",
        "flushed_position",
        "needs_dir_sync",
        "path",
        "reserved_position",
        "wrote_position",
    )

    def __init__(
        self,
        path: Path,
        file_size: int,
        *,
        create: bool,
        extend_short: bool = False,
        first_reserve_step: int = RESERVE_CHUNK_SIZE,
        keep_fd: bool = True,
    ) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = file_name_to_offset(path.name)
        if file_size <= 0:
            raise ValueError(f"file size must be positive: {file_size}")
        if not 0 < first_reserve_step <= RESERVE_CHUNK_SIZE:
            raise ValueError(f"first reserve step must be in (0, {RESERVE_CHUNK_SIZE}]: {first_reserve_step}")
        self.first_reserve_step = first_reserve_step
        self._fd_lock = threading.Lock()
        """Held while another thread uses the descriptor (a flush) and while it is closed."""
        self.cache: FileCounter | None = None
        """The cache of open files this file is counted in (consume queue files), or None."""
        self._saved_reserved_position = 0
        self._keep_fd = keep_fd
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(self._fd, file_size)
            else:
                actual = os.fstat(self._fd).st_size
                if actual < file_size and extend_short:
                    log.warning("%s: %d bytes, extending to %d (torn last segment)", path, actual, file_size)
                    os.ftruncate(self._fd, file_size)
                    os.fsync(self._fd)
                elif actual != file_size:
                    raise StoreLoadError(
                        f"{path}: size {actual} bytes does not match the configured {file_size} bytes"
                    )
            self._mmap: mmap.mmap | None = mmap.mmap(
                self._fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except BaseException:
            os.close(self._fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.buffer = memoryview(self._mmap)
        if not keep_fd:  # the mapping holds its own duplicate; file operations open one when needed
            os.close(self._fd)
            self._fd = -1
        self.needs_dir_sync = create
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.reserved_position = 0
        """Bytes from the file start known to have disk blocks (see :meth:`reserve`)."""

    @classmethod
    def unmapped(
        cls, path: Path, file_size: int, *, first_reserve_step: int = RESERVE_CHUNK_SIZE, keep_fd: bool = True
    ) -> MappedFile:
        """An existing file of ``file_size`` bytes known by name only: no descriptor, no mapping, until
        :meth:`remap` (lazy loading of consume queues). Its positions say full (``file_size``) until recovery
        sets them; ``buffer`` raises ValueError until mapped. The caller checked the size."""
        self = cls.__new__(cls)
        self.path = path
        self.file_size = file_size
        self.file_from_offset = file_name_to_offset(path.name)
        self.first_reserve_step = first_reserve_step
        self._fd_lock = threading.Lock()
        self.cache = None
        self._keep_fd = keep_fd
        self._fd = -1
        self._mmap = None
        self.buffer = _UNMAPPED
        self.needs_dir_sync = False
        self.set_positions(file_size)
        self.reserved_position = 0
        self._saved_reserved_position = 0
        return self

    @property
    def is_mapped(self) -> bool:
        """True while the file has its descriptor and mapping (False after :meth:`unmap` or :meth:`close`)."""
        return self._mmap is not None

    def remap(self) -> None:
        """Open and map the file again after :meth:`unmap` (or :meth:`unmapped`), keeping the positions; the
        disk reserved before is known again. Blocking (open + mmap). Raises OSError (EMFILE: no descriptor
        left), :class:`StoreLoadError` when the file's size changed."""
        if self._mmap is not None:
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            stat = os.fstat(fd)
            if stat.st_size != self.file_size:
                raise StoreLoadError(f"{self.path}: size {stat.st_size} bytes, expected {self.file_size} bytes")
            mapping = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            reserved = self._saved_reserved_position or _allocated_prefix(fd, stat.st_blocks * 512)
        except BaseException:
            os.close(fd)
            raise
        self._mmap = mapping
        self.buffer = memoryview(mapping)
        if self._keep_fd:
            self._fd = fd
        else:
            os.close(fd)
        self.reserved_position = min(reserved, self.file_size)  # last: the put path checks it first

    def advise_random(self) -> None:
        """``madvise(MADV_RANDOM)`` on the mapping: a page fault reads that page only, no read-around. A consume
        queue file is written one 20-byte unit at a time and mostly a hole: read-around would fill hundreds
        of KiB of page cache with zeros at every first touch after a (re)mapping."""
        mapping = self._mmap
        if mapping is not None and hasattr(mmap, "MADV_RANDOM"):
            mapping.madvise(mmap.MADV_RANDOM)

    def unmap(self) -> bool:
        """Unmap and close the file but keep it (positions, reserved disk) for :meth:`remap`; True when done.

        False, and the file stays mapped, when a view handed out still references the mapping (``BufferError``:
        closed later, once the view is freed) or another thread is using the descriptor (a flush). The file's
        ``reserved_position`` reads 0 meanwhile, so the put path's check sends it to the slow path, which
        maps it again. Only the thread that writes the file (the loop thread) calls this."""
        if self._mmap is None:
            return True
        if not self._fd_lock.acquire(blocking=False):
            return False
        try:
            mapping = self._mmap
            assert mapping is not None
            buffer = self.buffer
            saved = self.reserved_position
            self.reserved_position = 0
            self.buffer = _UNMAPPED
            released = False
            try:
                buffer.release()
                released = True
                mapping.close()
            except BufferError:  # a view of the mapping is alive: keep it mapped
                self.buffer = memoryview(mapping) if released else buffer
                self.reserved_position = saved
                return False
            self._saved_reserved_position = saved
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._mmap = None
            return True
        finally:
            self._fd_lock.release()

    @contextlib.contextmanager
    def _descriptor(self) -> Iterator[int]:
        """The file's descriptor: the one kept open, or one opened for the caller and closed after (a file
        made with ``keep_fd=False``, or unmapped). Raises OSError (EMFILE when none is left)."""
        if self._fd >= 0:
            yield self._fd
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position}, "
            f"size={self.file_size})"
        )

    @property
    def file_name(self) -> str:
        return self.path.name

    def fileno(self) -> int:
        """The open file descriptor (for ``pwrite`` warm-up; -1 after :meth:`close`)."""
        return self._fd

    @property
    def end_offset(self) -> int:
        """Offset just past this file: ``file_from_offset + file_size``."""
        return self.file_from_offset + self.file_size

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        """Bytes still free at the end of the file."""
        return self.file_size - self.wrote_position

    def reserve(self, end_position: int) -> None:
        """Make sure bytes up to ``end_position`` have disk blocks (:func:`reserve_space`), allocating ahead
        a step of :attr:`first_reserve_step` at first, then as much as is already reserved, at most
        :data:`RESERVE_CHUNK_SIZE`. Call it before writing past :attr:`reserved_position`. Raises OSError
        (``ENOSPC``): nothing was written then."""
        reserved = self.reserved_position
        if end_position <= reserved:
            return
        step = min(RESERVE_CHUNK_SIZE, max(self.first_reserve_step, reserved))
        end = min(self.file_size, max(end_position, reserved + step))
        with self._descriptor() as fd:
            reserve_space(fd, reserved, end)
        self.reserved_position = end

    def set_positions(self, position: int) -> None:
        """Set wrote, committed and flushed positions (load and recovery only)."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    def read(self, position: int, size: int) -> memoryview:
        """Zero-copy view of ``size`` bytes at ``position`` (relative to the file start) of the written part.

        Raises :class:`OffsetOutOfRangeError` when the range is not entirely written.
        """
        if position < 0 or size < 0 or position + size > self.wrote_position:
            raise OffsetOutOfRangeError(
                f"{self.path.name}: [{position}, {position + size}) is outside the written "
                f"[0, {self.wrote_position})"
            )
        return self.buffer[position : position + size]

    def is_able_to_flush(self, least_pages: int) -> bool:
        """RocketMQ ``isAbleToFlush``: full file, or ``least_pages`` dirty pages, or any dirty byte when 0."""
        flushed = self.flushed_position
        write = self.wrote_position
        if write <= flushed:
            return False
        if write >= self.file_size or least_pages <= 0:
            return True
        return write // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE >= least_pages

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync the file if :meth:`is_able_to_flush`; return the flushed position. Blocking, GIL
        released.

        A newly created file also gets its directory fsynced once, so the file itself survives a crash.
        Raises OSError when the sync fails (the caller decides what that means for durability).
        """
        if self.is_able_to_flush(least_pages):
            position = self.wrote_position
            with self._fd_lock, self._descriptor() as fd:
                # also after an unmap: the dirty pages are the inode's, any descriptor syncs them
                fdatasync(fd)
            if self.needs_dir_sync:
                fsync_dir(self.path.parent)
                self.needs_dir_sync = False
            self.flushed_position = position
        return self.flushed_position

    def truncate_to(self, position: int) -> None:
        """Forget everything from ``position`` on: the tail becomes zeros and the positions move back.
        Blocking.

        When the tail holds any data, the file is cut to ``position`` bytes and grown back, which turns the
        tail into a hole (stale bytes of a torn write can never be mistaken for records later), then fsynced.
        A tail that is already a hole (checked with ``SEEK_DATA``) is left alone. Recovery only: no view of
        the tail may be in use.
        """
        if not 0 <= position <= self.file_size:
            raise ValueError(f"truncate position {position} outside [0, {self.file_size}]")
        if not self._tail_is_clean(position):
            with self._descriptor() as fd:
                os.ftruncate(fd, position)
                os.ftruncate(fd, self.file_size)
                os.fsync(fd)
        self.set_positions(position)

    def _tail_is_clean(self, position: int) -> bool:
        """True when every byte from ``position`` to the end is zero (partial page compared, rest a hole)."""
        page_end = min(self.file_size, -(-position // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        if self.buffer[position:page_end] != bytes(page_end - position):
            return False
        if page_end >= self.file_size:
            return True
        try:
            with self._descriptor() as fd:
                os.lseek(fd, page_end, os.SEEK_DATA)
        except OSError as exc:
            return exc.errno == errno.ENXIO  # ENXIO: no data past page_end
        return False

    def close(self) -> None:
        """Unmap and close. A mapping still referenced by handed-out views stays alive until they are
        freed."""
        with self._fd_lock:
            cache = self.cache
            if cache is not None:
                self.cache = None
                cache.forget(self)
            if self._mmap is None:
                return
            self._saved_reserved_position = self.reserved_position
            self.reserved_position = 0
            self.buffer.release()
            self.buffer = _UNMAPPED
            mapping = self._mmap
            self._mmap = None
            try:
                mapping.close()
            except BufferError:
                log.debug(
                    "%s: views still reference the mapping; it is unmapped when they are freed", self.path
                )
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def destroy(self) -> None:
        """Close and delete the file (the caller fsyncs the directory)."""
        self.close()
        self.path.unlink(missing_ok=True)
