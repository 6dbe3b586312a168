"""MappedFileQueue: the ordered, contiguous list of segment files of one log (RocketMQ ``MappedFileQueue``).

Files are named by their 20-digit start offset, all have the same size, and are contiguous: file *k* starts at
``first.file_from_offset + k * mapped_file_size``, so finding the file for an offset is arithmetic (RocketMQ
``findMappedFileByOffset``). A new file starts at ``last.file_from_offset + mapped_file_size`` or, when none
exists, at ``start_offset - start_offset % mapped_file_size`` (``getLastMappedFile``).

The list is replaced (copy-on-write), never mutated in place, so a flush thread can take a snapshot while the
event loop thread rolls to a new file. This generic queue knows nothing of commit logs or consume queues.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from quasar.storage.errors import StoreLoadError
from quasar.storage.mapped_file import (
    RESERVE_CHUNK_SIZE,
    MappedFile,
    file_name_to_offset,
    fsync_dir,
    offset_to_file_name,
)

if TYPE_CHECKING:
    from quasar.storage.allocate import AllocateMappedFileService
    from quasar.storage.file_cache import MappedFileCache

log = logging.getLogger(__name__)


class MappedFileQueue:
    """Segment files of ``mapped_file_size`` bytes in ``store_path`` (created if missing)."""

    def __init__(
        self,
        store_path: Path,
        mapped_file_size: int,
        *,
        allocator: AllocateMappedFileService | None = None,
        first_reserve_step: int = RESERVE_CHUNK_SIZE,
        file_cache: MappedFileCache | None = None,
    ) -> None:
        """``allocator``: when given, new files come from it and the one after is pre-allocated in the
        background (the commit log); otherwise they are created on the caller's thread.
        ``first_reserve_step``: the first disk reservation of each file this queue creates or loads (bytes;
        see :class:`MappedFile`). ``file_cache``: when given (consume queues), :meth:`load` maps no file, files
        are mapped on demand (:meth:`use`) and counted in the cache, which unmaps the least recently used ones
        over its budget; without it (the commit log) every file stays mapped."""
        self.file_cache = file_cache
        if mapped_file_size <= 0:
            raise ValueError(f"mapped file size must be positive: {mapped_file_size}")
        self.first_reserve_step = first_reserve_step
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self._files: list[MappedFile] = []
        self.last_mapped_file: MappedFile | None = None
        """The newest file, None when there is none: a plain attribute (the put path reads it twice per record),
        kept equal to ``mapped_files[-1]`` by :meth:`_set_files`, the one writer of the list."""
        self.allocator = allocator
        self.flushed_where = 0
        """Absolute offset up to which every file is fdatasynced."""

    def __repr__(self) -> str:
        return f"MappedFileQueue({self.store_path}, files={len(self._files)}, max_offset={self.max_offset})"

    def _set_files(self, files: list[MappedFile]) -> None:
        """Replace the list (copy-on-write: readers on other threads keep the list they took) and the last file."""
        self._files = files
        self.last_mapped_file = files[-1] if files else None

    # -- load ------------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Map every existing segment file; all are marked full until recovery sets the real end (blocking).

        Raises :class:`StoreLoadError` for a file whose name is not 20 digits, whose size differs from
        ``mapped_file_size`` (a shorter LAST file, or a shorter file among others of the right size, is
        extended with zeros instead: a crash while creating it, or a file truncated by hand),
        whose start is not a multiple of it, or when the files are not contiguous.
        """
        if not self.store_path.is_dir():
            return
        names = sorted(p.name for p in self.store_path.iterdir())
        sizes = {name: (self.store_path / name).stat().st_size for name in names}
        truncated = set()
        if any(size == self.mapped_file_size for size in sizes.values()):
            # a short file among full ones was cut by hand (or by a crash): extended with zeros, which readers
            # report and skip; when no file has the configured size, the configuration changed: an error
            truncated = {name for name, size in sizes.items() if size < self.mapped_file_size}
        files: list[MappedFile] = []
        try:
            for name in names:
                start = file_name_to_offset(name)
                if start % self.mapped_file_size:
                    raise StoreLoadError(
                        f"{self.store_path / name}: start offset is not a multiple of the file size"
                    )
                if files and files[-1].end_offset != start:
                    raise StoreLoadError(
                        f"{self.store_path}: gap between {files[-1].file_name} and {name} "
                        "(missing segment files)"
                    )
                extend_short = name == names[-1] or name in truncated
                if self.file_cache is not None:
                    mapped_file = self._unmapped(name, sizes[name], extend_short=extend_short)
                else:
                    mapped_file = MappedFile(
                        self.store_path / name,
                        self.mapped_file_size,
                        create=False,
                        extend_short=extend_short,
                        first_reserve_step=self.first_reserve_step,
                    )
                mapped_file.set_positions(self.mapped_file_size)
                files.append(mapped_file)
        except BaseException:
            for mapped_file in files:
                mapped_file.close()
            raise
        self._set_files(files)
        self.flushed_where = files[-1].end_offset if files else 0

    def _unmapped(self, name: str, size: int, *, extend_short: bool) -> MappedFile:
        """A file of the lazy load: checked and, when short and allowed, extended, but not mapped."""
        path = self.store_path / name
        if size != self.mapped_file_size:
            if size > self.mapped_file_size or not extend_short:
                raise StoreLoadError(
                    f"{path}: size {size} bytes does not match the configured {self.mapped_file_size} bytes"
                )
            log.warning(
                "%s: %d bytes, extending to %d (torn last segment)", path, size, self.mapped_file_size
            )
            fd = os.open(path, os.O_RDWR)
            try:
                os.ftruncate(fd, self.mapped_file_size)
                os.fsync(fd)
            finally:
                os.close(fd)
        return MappedFile.unmapped(
            path, self.mapped_file_size, first_reserve_step=self.first_reserve_step, keep_fd=False
        )

    def use(self, mapped_file: MappedFile) -> MappedFile:
        """``mapped_file``, mapped (again) and marked recently used in the file cache; returns it. Without a
        cache every file is mapped already. Raises OSError when it cannot be mapped."""
        cache = self.file_cache
        if cache is not None:
            cache.use(mapped_file)
        return mapped_file

    # -- lookup ----------------------------------------------------------------------------------------------

    @property
    def mapped_files(self) -> list[MappedFile]:
        """A snapshot of the files, oldest first (do not mutate)."""
        return self._files

    @property
    def first_mapped_file(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    @property
    def min_offset(self) -> int:
        """Start offset of the first file, 0 when there is none."""
        files = self._files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """End of the written data: ``last.file_from_offset + last.wrote_position`` (0 when empty)."""
        files = self._files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        """The file whose range ``[start, start + size)`` holds ``offset``, or None."""
        files = self._files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.mapped_file_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def get_last_mapped_file(self, start_offset: int = 0, *, need_create: bool = True) -> MappedFile | None:
        """The file to write into: the last one unless it is full, else a new one (from the allocator, or
        created synchronously).

        ``start_offset`` only matters when no file exists yet. Raises OSError when creating the file fails.
        """
        files = self._files
        if files and not files[-1].is_full():
            return files[-1]
        if not need_create:
            return files[-1] if files else None
        size = self.mapped_file_size
        create_offset = files[-1].end_offset if files else start_offset - start_offset % size
        if not files and not self.store_path.is_dir():  # a stat is cheaper than a failing mkdir
            self.store_path.mkdir(parents=True, exist_ok=True)
        path = self.store_path / offset_to_file_name(create_offset)
        allocator = self.allocator
        if allocator is not None:
            mapped_file = allocator.take(path)
            allocator.pre_allocate(self.store_path / offset_to_file_name(create_offset + size))
        else:
            mapped_file = MappedFile(
                path,
                self.mapped_file_size,
                create=True,
                first_reserve_step=self.first_reserve_step,
                keep_fd=self.file_cache is None,
            )
        if self.file_cache is not None:
            self.file_cache.add(mapped_file)
        if not files:
            self.flushed_where = create_offset
        self._set_files([*files, mapped_file])
        return mapped_file

    # -- flush -----------------------------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync dirty files from ``flushed_where`` to the last one; return the new ``flushed_where``.

        Blocking (GIL released during each sync): run it on a flush thread. A full file's ``least_pages``
        threshold is waived (RocketMQ ``isAbleToFlush``). Raises OSError when a sync fails.
        """
        while True:
            mapped_file = self.find_mapped_file_by_offset(self.flushed_where)
            if mapped_file is None:
                return self.flushed_where
            position = mapped_file.flush(least_pages)
            self.flushed_where = mapped_file.file_from_offset + position
            if position < mapped_file.file_size:
                return self.flushed_where

    def has_dirty_data(self) -> bool:
        """True when bytes were written past ``flushed_where``."""
        return self.max_offset > self.flushed_where

    def detach_first(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest files from the list (never the last one) and return them, still open:
        the caller destroys them once no reader can be using them (retention). Copy-on-write."""
        files = self._files
        count = max(0, min(count, len(files) - 1))
        if not count:
            return []
        self._set_files(files[count:])
        return files[:count]

    # -- truncate / destroy ----------------------------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at and past ``offset``: files starting after it are deleted, the file holding it is
        cut there (its tail zeroed); ``flushed_where`` becomes ``offset``. Blocking; recovery only.
        """
        kept: list[MappedFile] = []
        removed = False
        for mapped_file in self._files:
            if mapped_file.end_offset <= offset:
                kept.append(mapped_file)
            elif mapped_file.file_from_offset <= offset:
                self.use(mapped_file).truncate_to(offset - mapped_file.file_from_offset)
                kept.append(mapped_file)
            else:
                log.info("deleting dirty segment %s past offset %d", mapped_file.path, offset)
                mapped_file.destroy()
                removed = True
        if removed:
            fsync_dir(self.store_path)
        self._set_files(kept)
        self.flushed_where = offset

    def destroy(self) -> None:
        """Delete every file of this queue (blocking)."""
        files = self._files
        self._set_files([])
        for mapped_file in files:
            mapped_file.destroy()
        if files and self.store_path.is_dir():
            fsync_dir(self.store_path)
        self.flushed_where = 0

    def close(self) -> None:
        """Unmap and close every file (no flush: call :meth:`flush` first)."""
        for mapped_file in self._files:
            mapped_file.close()
