"""StoreCheckpoint (``<root>/checkpoint``) and the ``abort`` marker (RocketMQ ``StoreCheckpoint``,
semantics.md A5/A6).

The checkpoint is one 4 KiB page of big-endian longs:

======  =============================  ==============================================================
offset  field                          meaning
======  =============================  ==============================================================
0       physic_msg_timestamp           store time (ms) of the last flushed commit log record
8       logics_msg_timestamp           store time (ms) of the last consume queue unit flushed
16      index_msg_timestamp            end time (ms) of the last full index file (later issue)
24      master_flushed_offset          RocketMQ 5.x; kept 0
32      confirm_phy_offset             RocketMQ 5.x; kept 0
40      logics_flushed_offset          Quasar: every consume queue unit of a record below this commit
                                       log offset is flushed, and so is the commit log up to it
48      logics_flushed_units           Quasar: how many consume queue units those records have
56      index_flushed_offset           Quasar: every record below this commit log offset is in a
                                       flushed index file (clean restarts resume indexing there)
======  =============================  ==============================================================

Recovery re-dispatches the commit log from ``logics_flushed_offset`` on (0 = never written: from the start);
if the consume queues hold fewer than ``logics_flushed_units`` units below that offset (files lost or cut), it
re-dispatches from the first segment instead.
:meth:`StoreCheckpoint.flush` writes the page with ``pwrite`` and fdatasyncs it: blocking, call it off the
loop.

The ``abort`` file is created when the store opens and deleted on a clean close; finding it on open means the
last run did not close cleanly (RocketMQ ``lastExitOK = !exists(abort)``). It holds the PID of its writer.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from quasar.storage.mapped_file import fdatasync, fsync_dir

CHECKPOINT_FILE_SIZE = 4096
CHECKPOINT_LAYOUT = struct.Struct(">qqqqqqqq")
"""The eight longs at offset 0 (64 bytes)."""


class StoreCheckpoint:
    """The checkpoint file at ``path``: created as a zero page when missing. Fields are plain attributes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.logics_flushed_offset = 0
        self.logics_flushed_units = 0
        self.index_flushed_offset = 0
        self.existed = path.exists()
        """Whether the file was there before (a missing checkpoint forces a full consume queue rebuild)."""
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self._fd, CHECKPOINT_LAYOUT.size, 0)
        if len(data) == CHECKPOINT_LAYOUT.size:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
                self.master_flushed_offset,
                self.confirm_phy_offset,
                self.logics_flushed_offset,
                self.logics_flushed_units,
                self.index_flushed_offset,
            ) = CHECKPOINT_LAYOUT.unpack(data)
        else:
            os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE)
            self.existed = False

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint(physic={self.physic_msg_timestamp}, logics={self.logics_msg_timestamp}, "
            f"index={self.index_msg_timestamp}, logics_flushed_offset={self.logics_flushed_offset}, "
            f"logics_flushed_units={self.logics_flushed_units})"
        )

    @property
    def min_timestamp(self) -> int:
        """RocketMQ ``getMinTimestamp``: ``min(physic, logics) - 3000`` ms, at least 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        """Write the fields and fdatasync the file (RocketMQ ``StoreCheckpoint.flush``). Blocking."""
        page = CHECKPOINT_LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.logics_flushed_offset,
            self.logics_flushed_units,
            self.index_flushed_offset,
        )
        os.pwrite(self._fd, page, 0)
        fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def create_abort_file(path: Path) -> bool:
    """Create the abort marker with our PID, durably; return True if it already existed (abnormal last
    exit)."""
    existed = path.exists()
    path.write_text(f"{os.getpid()}\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return existed


def remove_abort_file(path: Path) -> None:
    """Delete the abort marker after a clean close, durably."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
