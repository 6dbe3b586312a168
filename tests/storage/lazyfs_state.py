"""The durability model of ``lazyfs.py`` (tests/storage): what a file system holds in memory and what a
simulated power cut keeps, with no FUSE in it. ``lazyfs.py`` (the process, over mfusepy) calls it; see that
module's docstring for what it models and what it does not.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

PAGE = 4096
ROOT_INO = 1
NAMESPACE_FILE = "namespace.json"
FILES_DIR = "files"

log = logging.getLogger("lazyfs")


class Inode:
    """One file or directory of the current (in-memory) state.

    Files: ``size`` is the current size, ``base_size`` the size of the durable bytes in ``files/<ino>``, of
    which bytes at or past ``zero_from`` are hidden (a truncate cut them off); ``pages`` maps page number to
    the full current content of each dirty 4 KiB page. Invariant: ``zero_from <= size``. ``meta_size`` is the
    size as last set by truncate, fallocate or fsync (not by writes): what a journal commit would record.
    Directories: ``entries`` (current) name -> inode number.
    """

    __slots__ = (
        "atime_ns",
        "base_size",
        "ctime_ns",
        "entries",
        "fd",
        "ino",
        "is_dir",
        "meta_size",
        "mode",
        "mtime_ns",
        "nlink",
        "open_count",
        "pages",
        "size",
        "zero_from",
    )

    def __init__(self, ino: int, mode: int, *, size: int = 0) -> None:
        now = time.time_ns()
        self.ino = ino
        self.mode = mode
        self.is_dir = stat.S_ISDIR(mode)
        self.size = size
        self.base_size = size
        self.zero_from = size
        self.meta_size = size
        self.pages: dict[int, bytearray] = {}
        self.entries: dict[str, int] = {}
        self.nlink = 0
        self.open_count = 0
        self.fd = -1
        self.atime_ns = self.mtime_ns = self.ctime_ns = now


class LazyState:
    """The file system proper, without FUSE: current state in memory, durable state in ``backing``.

    Every public method takes the one lock; the FUSE thread and the control thread call them.
    """

    def __init__(self, backing: Path, *, posix_sizes: bool = False) -> None:
        self.backing = backing
        self.posix_sizes = posix_sizes
        self.files = backing / FILES_DIR
        self.files.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.cut = False
        self.inodes: dict[int, Inode] = {}
        self.durable_dirs: dict[int, dict[str, int]] = {}
        self.durable_modes: dict[int, int] = {}
        self.next_ino = ROOT_INO + 1
        self.handles: dict[int, int] = {}
        self.next_fh = 1
        self.counters = {"writes": 0, "write_bytes": 0, "fsyncs": 0, "fsyncdirs": 0, "ignored_after_cut": 0}
        self._load()

    # -- durable state -------------------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.backing / NAMESPACE_FILE
        if path.exists():
            saved = json.loads(path.read_text())
            dirs = {int(d): {n: int(i) for n, i in e.items()} for d, e in saved["dirs"].items()}
            modes = {int(i): m for i, m in saved["modes"].items()}
            self.next_ino = saved["next_ino"]
        else:
            dirs = {ROOT_INO: {}}
            modes = {ROOT_INO: stat.S_IFDIR | 0o755}
        reachable: dict[int, int] = {}  # inode -> mode
        stack = [ROOT_INO]
        reachable[ROOT_INO] = modes.get(ROOT_INO, stat.S_IFDIR | 0o755)
        while stack:
            for ino in dirs.get(stack.pop(), {}).values():
                if ino in reachable:
                    continue
                reachable[ino] = modes.get(ino, stat.S_IFDIR | 0o755 if ino in dirs else stat.S_IFREG | 0o644)
                if ino in dirs:
                    stack.append(ino)
        for child in self.files.iterdir():  # orphans: fsynced, never durably linked (or durably unlinked)
            if not child.name.isdigit() or int(child.name) not in reachable or int(child.name) in dirs:
                child.unlink()
        for ino, mode in reachable.items():
            if stat.S_ISDIR(mode):
                inode = Inode(ino, mode)
                inode.entries = dict(dirs.get(ino, {}))
            else:
                data = self.files / str(ino)
                size = data.stat().st_size if data.exists() else 0
                inode = Inode(ino, mode, size=size)
            self.inodes[ino] = inode
            self.next_ino = max(self.next_ino, ino + 1)
        for inode in self.inodes.values():
            if inode.is_dir:
                self.durable_dirs[inode.ino] = dict(inode.entries)
                inode.nlink += 2  # "." and the parent's entry (the root: its own "..")
                for child in inode.entries.values():
                    if self.inodes[child].is_dir:
                        inode.nlink += 1  # the child's ".."
                    else:
                        self.inodes[child].nlink += 1
        self.durable_modes = dict(reachable)
        self._save_namespace()  # drop unreachable directories from the file too

    def _save_namespace(self) -> None:
        saved = {
            "next_ino": self.next_ino,
            "dirs": {str(d): e for d, e in self.durable_dirs.items()},
            "modes": {str(i): m for i, m in self.durable_modes.items()},
        }
        tmp = self.backing / (NAMESPACE_FILE + ".tmp")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, self.backing / NAMESPACE_FILE)

    def _backing_fd(self, inode: Inode, *, create: bool) -> int:
        if inode.fd < 0:
            path = self.files / str(inode.ino)
            if not create and not path.exists():
                return -1
            inode.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return inode.fd

    def _persist_file(self, inode: Inode) -> None:
        """fsync: the inode's data and size become durable."""
        fd = self._backing_fd(inode, create=True)
        if inode.zero_from < inode.base_size:
            os.ftruncate(fd, inode.zero_from)
        size = inode.size
        for number, page in inode.pages.items():
            start = number * PAGE
            if start < size:
                os.pwrite(fd, page if start + PAGE <= size else page[: size - start], start)
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        inode.pages.clear()
        inode.base_size = inode.zero_from = inode.meta_size = size

    def _persist_dir(self, inode: Inode) -> None:
        """fsync of a directory: its current entries become durable. A child directory never synced itself
        is durable empty. A child file with no durable bytes yet is durable at the size its metadata has
        (truncate/fallocate), all zeros: its unsynced writes are not part of it (with ``posix_sizes``: size 0).
        """
        self.durable_dirs[inode.ino] = dict(inode.entries)
        for ino in inode.entries.values():
            child = self.inodes[ino]
            self.durable_modes[ino] = child.mode
            if child.is_dir:
                self.durable_dirs.setdefault(ino, {})
            elif child.fd < 0 and not (self.files / str(ino)).exists():
                fd = self._backing_fd(child, create=True)
                if not self.posix_sizes and child.meta_size > 0:
                    os.ftruncate(fd, child.meta_size)  # a hole: reads as zeros, like the base it replaces
                    child.base_size = child.meta_size  # (zero_from stays 0: the hole hides nothing)
        self.durable_modes[inode.ino] = inode.mode
        self._save_namespace()

    # -- current state -------------------------------------------------------------------------------------

    def resolve(self, path: str) -> Inode:
        inode = self.inodes[ROOT_INO]
        for part in path.split("/"):
            if not part:
                continue
            if not inode.is_dir:
                raise OSError(errno.ENOTDIR, path)
            ino = inode.entries.get(part)
            if ino is None:
                raise OSError(errno.ENOENT, path)
            inode = self.inodes[ino]
        return inode

    def parent_of(self, path: str) -> tuple[Inode, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self.resolve(head)
        if not parent.is_dir:
            raise OSError(errno.ENOTDIR, path)
        return parent, name

    def inode_of(self, path: str | None, fh: int | None) -> Inode:
        if fh:
            ino = self.handles.get(fh)
            if ino is not None:
                return self.inodes[ino]
        if path is None:
            raise OSError(errno.EBADF, "no path and no handle")
        return self.resolve(path)

    def new_handle(self, inode: Inode) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = inode.ino
        inode.open_count += 1
        return fh

    def drop_handle(self, fh: int) -> None:
        ino = self.handles.pop(fh, None)
        if ino is not None:
            inode = self.inodes[ino]
            inode.open_count -= 1
            self._maybe_forget(inode)

    def _maybe_forget(self, inode: Inode) -> None:
        """Free the memory of a file that is neither linked nor open (its durable bytes stay until the
        next mount, in case a durable directory still links it)."""
        if inode.nlink <= 0 and inode.open_count <= 0 and not inode.is_dir:
            inode.pages.clear()
            if inode.fd >= 0:
                os.close(inode.fd)
                inode.fd = -1

    def create_node(self, path: str, mode: int) -> Inode:
        self._check_live()
        parent, name = self.parent_of(path)
        if name in parent.entries:
            raise OSError(errno.EEXIST, path)
        inode = Inode(self.next_ino, mode)
        self.next_ino += 1
        self.inodes[inode.ino] = inode
        parent.entries[name] = inode.ino
        inode.nlink = 2 if inode.is_dir else 1
        if inode.is_dir:
            parent.nlink += 1
        parent.mtime_ns = parent.ctime_ns = time.time_ns()
        return inode

    def remove(self, path: str, *, directory: bool) -> None:
        self._check_live()
        parent, name = self.parent_of(path)
        ino = parent.entries.get(name)
        if ino is None:
            raise OSError(errno.ENOENT, path)
        inode = self.inodes[ino]
        if directory and not inode.is_dir:
            raise OSError(errno.ENOTDIR, path)
        if not directory and inode.is_dir:
            raise OSError(errno.EISDIR, path)
        if directory and inode.entries:
            raise OSError(errno.ENOTEMPTY, path)
        del parent.entries[name]
        self._unlinked(parent, inode)

    def _unlinked(self, parent: Inode, inode: Inode) -> None:
        inode.nlink -= 2 if inode.is_dir else 1
        if inode.is_dir:
            parent.nlink -= 1
        parent.mtime_ns = parent.ctime_ns = inode.ctime_ns = time.time_ns()
        self._maybe_forget(inode)

    def rename(self, old: str, new: str) -> None:
        self._check_live()
        old_parent, old_name = self.parent_of(old)
        new_parent, new_name = self.parent_of(new)
        ino = old_parent.entries.get(old_name)
        if ino is None:
            raise OSError(errno.ENOENT, old)
        moved = self.inodes[ino]
        replaced_ino = new_parent.entries.get(new_name)
        if replaced_ino == ino:
            return
        if replaced_ino is not None:
            replaced = self.inodes[replaced_ino]
            if replaced.is_dir != moved.is_dir:
                raise OSError(errno.EISDIR if replaced.is_dir else errno.ENOTDIR, new)
            if replaced.is_dir and replaced.entries:
                raise OSError(errno.ENOTEMPTY, new)
        del old_parent.entries[old_name]
        new_parent.entries[new_name] = ino
        if moved.is_dir:
            old_parent.nlink -= 1
            new_parent.nlink += 1
        if replaced_ino is not None:
            self._unlinked(new_parent, self.inodes[replaced_ino])
        now = time.time_ns()
        old_parent.mtime_ns = new_parent.mtime_ns = moved.ctime_ns = now

    def _check_live(self) -> None:
        if self.cut:
            self.counters["ignored_after_cut"] += 1
            raise OSError(errno.EIO, "power is off")

    # -- file data -----------------------------------------------------------------------------------------

    def _base_page(self, inode: Inode, number: int) -> bytearray:
        start = number * PAGE
        page = bytearray(PAGE)
        end = min(start + PAGE, inode.zero_from, inode.base_size)
        if end > start:
            fd = self._backing_fd(inode, create=False)
            if fd >= 0:
                data = os.pread(fd, end - start, start)
                page[: len(data)] = data
        return page

    def read(self, inode: Inode, size: int, offset: int) -> bytes:
        end = min(offset + size, inode.size)
        if offset >= end:
            return b""
        base_end = min(end, inode.zero_from, inode.base_size)
        first, last = offset // PAGE, (end - 1) // PAGE
        pages = inode.pages
        if not pages or all(n not in pages for n in range(first, last + 1)):
            data = b""
            if base_end > offset:
                fd = self._backing_fd(inode, create=False)
                if fd >= 0:
                    data = os.pread(fd, base_end - offset, offset)
            return data + bytes(end - offset - len(data)) if len(data) < end - offset else data
        out = bytearray(end - offset)
        if base_end > offset:
            fd = self._backing_fd(inode, create=False)
            if fd >= 0:
                data = os.pread(fd, base_end - offset, offset)
                out[: len(data)] = data
        for number in range(first, last + 1):
            page = pages.get(number)
            if page is None:
                continue
            start = number * PAGE
            lo, hi = max(offset, start), min(end, start + PAGE)
            out[lo - offset : hi - offset] = page[lo - start : hi - start]
        return bytes(out)

    def write(self, inode: Inode, data: bytes, offset: int) -> int:
        if self.cut:
            self.counters["ignored_after_cut"] += 1
            return len(data)
        view = memoryview(data)
        end = offset + len(data)
        pages = inode.pages
        position = offset
        while position < end:
            number = position // PAGE
            start = number * PAGE
            lo = position - start
            n = min(PAGE - lo, end - position)
            chunk = view[position - offset : position - offset + n]
            page = pages.get(number)
            if page is None:
                if n == PAGE:
                    pages[number] = bytearray(chunk)
                    position += n
                    continue
                page = pages[number] = self._base_page(inode, number)
            page[lo : lo + n] = chunk
            position += n
        if end > inode.size:
            inode.size = end
        inode.mtime_ns = inode.ctime_ns = time.time_ns()
        self.counters["writes"] += 1
        self.counters["write_bytes"] += len(data)
        return len(data)

    def truncate(self, inode: Inode, length: int) -> None:
        if self.cut:
            self.counters["ignored_after_cut"] += 1
            return
        if inode.is_dir:
            raise OSError(errno.EISDIR, "truncate of a directory")
        if length < inode.size:
            keep = -(-length // PAGE)  # pages wholly below length are kept
            for number in [n for n in inode.pages if n >= keep]:
                del inode.pages[number]
            partial = inode.pages.get(length // PAGE)
            if partial is not None and length % PAGE:
                partial[length % PAGE :] = bytes(PAGE - length % PAGE)
            inode.zero_from = min(inode.zero_from, length)
        inode.size = inode.meta_size = length
        inode.mtime_ns = inode.ctime_ns = time.time_ns()

    def fallocate(self, inode: Inode, mode: int, offset: int, length: int) -> None:
        if mode != 0:
            raise OSError(errno.EOPNOTSUPP, "only fallocate mode 0 is modelled")
        if self.cut:
            self.counters["ignored_after_cut"] += 1
            return
        if offset + length > inode.size:
            inode.size = offset + length
            inode.mtime_ns = inode.ctime_ns = time.time_ns()
        inode.meta_size = max(inode.meta_size, offset + length)

    def fsync(self, inode: Inode) -> None:
        if self.cut:
            self.counters["ignored_after_cut"] += 1
            return
        if inode.is_dir:
            self.counters["fsyncdirs"] += 1
            self._persist_dir(inode)
        else:
            self.counters["fsyncs"] += 1
            self._persist_file(inode)

    # -- control -------------------------------------------------------------------------------------------

    def power_cut(self) -> dict[str, Any]:
        """Drop everything not durable; ignore every later mutation. Returns what was dropped."""
        with self.lock:
            dirty_files = [i for i in self.inodes.values() if not i.is_dir and self._is_dirty(i)]
            dropped = {
                "dirty_pages": sum(len(i.pages) for i in dirty_files),
                "dirty_bytes": sum(len(i.pages) * PAGE for i in dirty_files),
                "unsynced_files": len(dirty_files),
                "unsynced_dirs": sum(
                    1
                    for i in self.inodes.values()
                    if i.is_dir and i.nlink > 0 and self.durable_dirs.get(i.ino) != i.entries
                ),
            }
            self.cut = True
            for inode in self.inodes.values():
                inode.pages.clear()
            return dropped

    @staticmethod
    def _is_dirty(inode: Inode) -> bool:
        return bool(inode.pages) or inode.size != inode.base_size or inode.zero_from != inode.base_size

    def sync_all(self) -> None:
        with self.lock:
            if self.cut:
                return
            for inode in list(self.inodes.values()):
                if inode.is_dir:
                    if inode.nlink > 0:
                        self._persist_dir(inode)
                elif (inode.nlink > 0 or inode.open_count > 0) and self._is_dirty(inode):
                    self._persist_file(inode)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            dirty = sum(len(i.pages) for i in self.inodes.values())
            return {**self.counters, "dirty_bytes": dirty * PAGE, "cut": self.cut, "inodes": len(self.inodes)}
