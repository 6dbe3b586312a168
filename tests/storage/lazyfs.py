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

Parts: ``lazyfs_state.py`` is the in-memory model (inodes, dirty pages, what a cut keeps), this module the
mfusepy operations over it, the control socket and ``main``; ``lazyfs_process.py`` is the test side (start by
PID, ``cut``, unmount, the skip reason).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

# run as a script (its own process): the directory of this file is on sys.path
from lazyfs_state import PAGE, LazyState

log = logging.getLogger("lazyfs")


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
