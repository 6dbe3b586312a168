"""LazyFS-style FUSE file system for power-loss tests: written data lives in memory until it is fsynced.

Run as its own process (``mfusepy`` from PyPI over Debian's ``fuse3``)::

    python tests/storage/lazyfs.py BACKING MOUNTPOINT --control SOCKET

``BACKING`` holds the *durable* state, the disk as it would be found after a power cut; ``MOUNTPOINT`` shows
the *current* state, what a process sees through the page cache. ``SOCKET`` is a Unix socket for the test,
one line per command, one ``ok ...`` / ``error ...`` line per answer:

- ``ping``: answered once the file system is mounted (the FUSE ``init`` callback opens the socket);
- ``cut``: the power cut. Everything not yet durable is dropped, and from then on every mutating request is
  ignored (writes, fsyncs, truncates and allocations report success and change nothing; namespace changes
  fail with EIO), so the kernel's writeback of dirty mmap pages after the cut, or the close of a killed
  process's files, changes nothing durable. Answers ``ok {json}`` with what was dropped here (dirty pages and
  bytes, files whose data was not synced, directories whose entries were not synced); dirty mmap pages the
  kernel had not written back yet never reach this process and are lost too, uncounted;
- ``sync``: make everything durable, like sync(1) (test set-up);
- ``stats``: ``ok {json}`` counters (writes, fsyncs, directory fsyncs, dirty bytes now).

Stop it with ``fusermount3 -u MOUNTPOINT`` (the process then exits), or SIGTERM/SIGINT by PID (libfuse unmounts).
A fresh process over the same ``BACKING`` mounts exactly the durable state, which is the restart after the
power cut.

What it models (the guarantees POSIX gives, plus one that ext4 gives in practice):

- **File data and size.** ``write`` (including the kernel's writeback of ``MAP_SHARED`` mmap pages, which
  FUSE delivers as WRITE requests) goes into an in-memory overlay of 4 KiB pages per file; reads are served
  from the overlay over the durable bytes, so a running process sees its unsynced writes. ``truncate`` and
  ``fallocate`` (mode 0: grows the size, ``posix_fallocate``) change the in-memory size only. ``fsync`` and
  ``fdatasync`` of the file (``msync(MS_SYNC)`` / ``mmap.flush`` arrives as WRITEs followed by an FSYNC)
  make its data *and size* durable. No data is durable before its file's fsync: stricter than ext4
  ``data=ordered``, whose journal commits (every 5 s, or for any other file's fsync) may persist sizes and
  some data early; losing them is always a state a real disk may be found in.
- **Directory entries.** create, mkdir, unlink, rmdir and rename change the in-memory namespace only; a
  directory's entries become durable when *that directory* is fsynced (``fsync_dir`` in the store,
  SQLite's directory sync of a new WAL file): POSIX's rule, stricter than ext4 and XFS, where an fsync of
  any file commits every earlier namespace change in the same journal transaction. A file fsynced before
  its entry is durable is an orphan after the cut and disappears (as after fsck); a file unlinked without
  a directory fsync comes back; a rename is durable in each directory once that directory is fsynced.
- **New files linked by a directory fsync.** A file never fsynced itself whose entry a directory fsync makes
  durable is durable at the size its *metadata* has: the size last set by truncate or fallocate, as zeros
  (its unsynced writes are not part of it; a size grown only by writes is not metadata, as with ext4's
  delayed allocation). This is the one guarantee beyond POSIX's letter. ext4 ``data=ordered`` gives it
  nearly always: the directory fsync commits the journal transaction of the create, which normally also
  holds the ``ftruncate`` made just after it, unless a journal commit (another thread's fsync) started
  between the two calls. ``--posix-sizes`` drops it, which also covers that race: such a file is then
  durable with size 0. A new directory linked this way is durable and empty until it is fsynced itself.
- **Torn writes** are not modelled beyond page granularity: a power cut never tears a fsynced page, and an
  unsynced page is lost whole (the overlay keeps whole pages). The store's record CRCs handle torn tails;
  this model only produces the clean-prefix case of a torn write.

What it does not model: disks that lie about flushes, partial or reordered persistence of *unsynced* data
(unsynced data is all lost; a real disk may keep any part of it), write errors (EIO, ENOSPC), hard links,
symlinks, extended attributes, permissions (no checks), timestamps beyond what ``stat`` needs (times are not
durable), ``FALLOC_FL_PUNCH_HOLE`` and the other fallocate modes (EOPNOTSUPP), holes (``SEEK_DATA`` sees
every byte as data). POSIX and flock locks are left to the kernel (local to the mount, enough for one
machine).

Durable layout in ``BACKING``: ``files/<inode>`` holds the durable bytes of each file inode that has any,
``namespace.json`` the durable entries of every directory (by inode number) and the next free inode number.
Both are written with plain writes, never fsynced: only this process is killed, not the machine, so the host's
page cache keeps them. At mount, inodes not reachable from the root through durable entries are deleted.

Performance: one FUSE thread (libfuse ``-s``), per write a dictionary of 4 KiB page buffers (a full page is
stored without reading anything), per fsync one ``pwrite`` per dirty page. No data is ever fsynced on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import errno
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
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


def build_operations(state: LazyState, control_path: Path | None) -> Any:
    """The mfusepy Operations over ``state`` (mfusepy is imported here so the module imports without it)."""
    import mfusepy

    def locked(method: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            with state.lock:
                return method(self, *args)

        call.__name__ = method.__name__
        return call

    class LazyOperations(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True
        flag_nopath = True  # with flag_nullpath_ok: handle-based calls get no path (we use the handle)
        flag_nullpath_ok = True

        def init(self, path: str) -> None:
            if control_path is not None:
                threading.Thread(target=serve_control, args=(state, control_path), daemon=True).start()

        @locked
        def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
            inode = state.inode_of(path, fh)
            return {
                "st_mode": inode.mode,
                "st_nlink": max(inode.nlink, 0),
                "st_size": inode.size,
                "st_blocks": -(-inode.size // 512),
                "st_blksize": PAGE,
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_atime": inode.atime_ns,
                "st_mtime": inode.mtime_ns,
                "st_ctime": inode.ctime_ns,
            }

        @locked
        def readdir(self, path: str | None, fh: int) -> list[Any]:
            inode = state.inode_of(path, fh)
            names: list[Any] = [".", ".."]
            names.extend(
                (name, {"st_mode": state.inodes[ino].mode}, 0) for name, ino in inode.entries.items()
            )
            return names

        @locked
        def opendir(self, path: str) -> int:
            inode = state.resolve(path)
            if not inode.is_dir:
                raise OSError(errno.ENOTDIR, path)
            return state.new_handle(inode)

        @locked
        def releasedir(self, path: str | None, fh: int) -> int:
            state.drop_handle(fh)
            return 0

        @locked
        def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
            state.fsync(state.inode_of(path, fh))
            return 0

        @locked
        def mkdir(self, path: str, mode: int) -> int:
            state.create_node(path, stat.S_IFDIR | (mode & 0o7777))
            return 0

        @locked
        def rmdir(self, path: str) -> int:
            state.remove(path, directory=True)
            return 0

        @locked
        def unlink(self, path: str) -> int:
            state.remove(path, directory=False)
            return 0

        @locked
        def rename(self, old: str, new: str) -> int:
            state.rename(old, new)
            return 0

        @locked
        def create(self, path: str, mode: int, flags: int = 0) -> int:
            inode = state.create_node(path, stat.S_IFREG | (mode & 0o7777))
            return state.new_handle(inode)

        @locked
        def open(self, path: str, flags: int) -> int:
            inode = state.resolve(path)
            if flags & os.O_TRUNC:
                state.truncate(inode, 0)
            return state.new_handle(inode)

        @locked
        def release(self, path: str | None, fh: int) -> int:
            state.drop_handle(fh)
            return 0

        def flush(self, path: str | None, fh: int) -> int:
            return 0

        @locked
        def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
            return state.read(state.inode_of(path, fh), size, offset)

        @locked
        def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
            return state.write(state.inode_of(path, fh), data, offset)

        @locked
        def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
            state.truncate(state.inode_of(path, fh), length)
            return 0

        @locked
        def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
            state.fallocate(state.inode_of(path, fh), mode, offset, size)
            return 0

        @locked
        def fsync(self, path: str | None, datasync: int, fh: int) -> int:
            state.fsync(state.inode_of(path, fh))
            return 0

        @locked
        def chmod(self, path: str | None, mode: int) -> int:
            if path is not None:  # (a chmod by handle arrives without path or handle: ignored)
                inode = state.resolve(path)
                inode.mode = (inode.mode & ~0o7777) | (mode & 0o7777)
            return 0

        def chown(self, path: str | None, uid: int, gid: int) -> int:
            return 0

        @locked
        def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
            if path is not None:  # (as chmod)
                inode = state.resolve(path)
                now = time.time_ns()
                inode.atime_ns, inode.mtime_ns = times if times is not None else (now, now)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            blocks = 1 << 28  # 1 TiB of 4 KiB blocks, nearly all free: the store's disk guard stays quiet
            return {
                "f_bsize": PAGE,
                "f_frsize": PAGE,
                "f_blocks": blocks,
                "f_bfree": blocks - 1024,
                "f_bavail": blocks - 1024,
                "f_files": 1 << 20,
                "f_ffree": (1 << 20) - len(state.inodes),
                "f_namemax": 255,
            }

    return LazyOperations()


def serve_control(state: LazyState, path: Path) -> None:
    """Answer control commands on the Unix socket at ``path`` (one connection at a time)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                command = line.decode().strip()
                try:
                    if command == "ping":
                        answer = "ok"
                    elif command == "cut":
                        answer = "ok " + json.dumps(state.power_cut())
                    elif command == "sync":
                        state.sync_all()
                        answer = "ok"
                    elif command == "stats":
                        answer = "ok " + json.dumps(state.stats())
                    else:
                        answer = f"error unknown command {command!r}"
                except Exception as exc:  # reported to the test, which fails on it
                    log.exception("control command %r failed", command)
                    answer = f"error {exc!r}"
                stream.write(answer.encode() + b"\n")
                stream.flush()


# -- the test side: run, command and stop a lazyfs process ------------------------------------------------------


def unavailable_reason() -> str | None:
    """Why a lazyfs mount cannot work here (no /dev/fuse, no fusermount3, no mfusepy or libfuse), or None."""
    if not os.path.exists("/dev/fuse") or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is missing or not accessible"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # mfusepy raises OSError when libfuse itself is missing
        return f"mfusepy is not usable ({exc}); pip install mfusepy, apt-get install fuse3"
    return None


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)


def fusermount_unmount(path: Path, *, lazy: bool = False) -> bool:
    """``fusermount3 -u [-z] PATH``; True when it succeeded."""
    command = ["fusermount3", "-u", *(["-z"] if lazy else []), str(path)]
    return subprocess.run(command, capture_output=True, check=False, timeout=30).returncode == 0


class LazyFSProcess:
    """One ``lazyfs.py`` process mounting ``backing`` at ``mountpoint``; :meth:`start` again after
    :meth:`unmount` is the reboot after a power cut (a fresh process over the durable state).

    ``log_dir`` gets ``lazyfs-<n>.log`` per start; ``posix_sizes`` runs it with ``--posix-sizes``. The control
    socket is ``<log_dir>/lazyfs.sock``, or a short path under the system temp directory when that is too long
    for a Unix socket address.
    """

    def __init__(self, backing: Path, mountpoint: Path, log_dir: Path, *, posix_sizes: bool = False) -> None:
        self.backing = backing
        self.posix_sizes = posix_sizes
        self.mountpoint = mountpoint
        self.log_dir = log_dir
        self.control = log_dir / "lazyfs.sock"
        self._short_dir: str | None = None
        if len(str(self.control)) > 100:
            self._short_dir = tempfile.mkdtemp(prefix="lazyfs-")
            self.control = Path(self._short_dir) / "ctl.sock"
        self.starts = 0
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def start(self, timeout_s: float = 20.0) -> LazyFSProcess:
        """Mount; returns once the mount is up and the control socket answers. Raises RuntimeError."""
        if self.pid is not None:
            raise RuntimeError(f"lazyfs already running (pid {self.pid})")
        for path in (self.backing, self.mountpoint, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.control.unlink()
        self.log_path = self.log_dir / f"lazyfs-{self.starts}.log"
        self.starts += 1
        command = [
            sys.executable,
            __file__,
            str(self.backing),
            str(self.mountpoint),
            "--control",
            str(self.control),
            *(["--posix-sizes"] if self.posix_sizes else []),
        ]
        env = {
            "FUSE_LIBRARY_NAME": "fuse3",
            **os.environ,
        }  # mfusepy would take libfuse 2 first when installed
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"lazyfs exited with {self._proc.returncode}: {self.log_text()[-2000:]}")
            if self.control.exists() and is_mounted(self.mountpoint):
                with contextlib.suppress(OSError):
                    if self.command("ping") == "":
                        return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lazyfs not mounted within {timeout_s} s: {self.log_text()[-2000:]}")
            time.sleep(0.02)

    def command(self, command: str, timeout_s: float = 30.0) -> str:
        """Send one control command; return the text after ``ok`` (RuntimeError on ``error``)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(self.control))
            conn.sendall(command.encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        text = answer.decode().strip()
        if text != "ok" and not text.startswith("ok "):
            raise RuntimeError(f"lazyfs {command!r}: {text!r}")
        return text[3:]

    def cut(self) -> dict[str, Any]:
        """The power cut: drop everything not durable, ignore every later write. Returns what was dropped."""
        return json.loads(self.command("cut"))  # type: ignore[no-any-return]

    def sync(self) -> None:
        self.command("sync")

    def stats(self) -> dict[str, Any]:
        return json.loads(self.command("stats"))  # type: ignore[no-any-return]

    def unmount(self, timeout_s: float = 20.0) -> None:
        """``fusermount3 -u`` (retried while the mount is busy), then wait for the process to exit; falls back
        to :meth:`stop`."""
        deadline = time.monotonic() + timeout_s
        while is_mounted(self.mountpoint) and not fusermount_unmount(self.mountpoint):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.stop()

    def stop(self) -> None:
        """Stop by PID (SIGTERM: libfuse unmounts; then SIGKILL) and make sure nothing stays mounted. Safe to
        call twice."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if is_mounted(self.mountpoint) and not fusermount_unmount(self.mountpoint):
            fusermount_unmount(self.mountpoint, lazy=True)

    def close(self) -> None:
        """:meth:`stop`, and remove the short control socket directory if one was made."""
        self.stop()
        if self._short_dir is not None:
            shutil.rmtree(self._short_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("backing", type=Path, help="directory holding the durable state")
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", type=Path, help="Unix socket for ping/cut/sync/stats")
    parser.add_argument("--debug", action="store_true", help="libfuse debug output on stderr")
    parser.add_argument(
        "--posix-sizes",
        action="store_true",
        help="a file whose entry a directory fsync makes durable, but which was never fsynced itself, is durable "
        "with size 0 (POSIX's letter) instead of the size set by truncate/fallocate (ext4, nearly always)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="lazyfs %(levelname)s %(message)s")
    import mfusepy

    class FUSE(mfusepy.FUSE):  # type: ignore[misc]
        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            """mfusepy drops the file handle of an ``ftruncate``; with nullpath_ok it is all we get."""
            fh = fip.contents.fh if fip else None
            name = None if path is None else path.decode()
            return self.operations.truncate(name, length, fh)  # type: ignore[no-any-return]

    state = LazyState(args.backing, posix_sizes=args.posix_sizes)
    operations = build_operations(state, args.control)
    try:
        FUSE(
            operations,
            str(args.mountpoint),
            foreground=True,
            nothreads=True,
            debug=args.debug,
            hard_remove=True,
            fsname="lazyfs",
        )
    except RuntimeError as exc:  # libfuse's status: 8 when SIGTERM/SIGINT ended the loop (it has unmounted)
        log.info("libfuse returned %s", exc)
        return 0 if str(exc) == "8" else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
