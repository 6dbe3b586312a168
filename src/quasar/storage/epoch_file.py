"""The epoch file: which master epoch wrote which part of the commit log (RocketMQ 5 ``EpochFileCache``,
controller mode, reference/cluster.md section 4).

An entry ``(epoch, start_offset)`` says that the records from ``start_offset`` (a commit log offset, bytes) up
to the next entry's start (or the end of the commit log for the last entry) were written by the master of
``epoch``. A broker elected master appends ``(new epoch, its max commit log offset)``; a replica appends the
master's entries as it replicates their first records. Epochs strictly increase; start offsets never
decrease (an epoch may be empty: a master elected and replaced before writing anything; RocketMQ's
``appendEntry`` refuses equal start offsets, Quasar keeps such an entry).

When a replica (or a returning old master) meets the master, :func:`find_consistent_point` compares both lists:
the last offset both commit logs agree on is the end of the newest epoch they share, and the replica truncates
its commit log there (``MessageStore.truncate_commit_log``, which also calls :meth:`EpochFile.truncate_from`).

File ``<store root>/epoch``, UTF-8 text, rewritten whole on every change (temp file, fsync, rename, fsync of the
directory, so a crash leaves the old or the new list, never a mix)::

    quasar-epoch 1          format name and version
    <epoch>-<start offset>  one line per entry, ascending (RocketMQ's ``EpochEntrySerializer`` line format)
    crc <crc32>             zlib CRC-32 of every byte before this line, decimal

Methods that write block (fsync): call them off the event loop or where a few milliseconds do not matter.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quasar.storage.errors import StoreLoadError
from quasar.storage.mapped_file import fsync_dir

log = logging.getLogger(__name__)

__all__ = ["EpochEntry", "EpochFile", "find_consistent_point"]

MAGIC_LINE = "quasar-epoch 1"
MAX_EPOCH_FILE_BYTES = 16 * 1024 * 1024
"""A larger file is refused at load (before it is read): ~400 000 entries, far more than elections happen."""
MAX_EPOCH = 0x7FFFFFFF
"""RocketMQ epochs are Java ints."""
MAX_OFFSET = 0x7FFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Epoch ``epoch`` (0 .. 2^31-1) wrote the commit log from ``start_offset`` (bytes, 0 .. 2^63-1) on."""

    epoch: int
    start_offset: int


def _checked(epoch: object, start_offset: object) -> EpochEntry:
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch must be an int in [0, {MAX_EPOCH}]: {epoch!r}")
    if type(start_offset) is not int or not 0 <= start_offset <= MAX_OFFSET:
        raise ValueError(f"start offset must be an int in [0, 2^63-1]: {start_offset!r}")
    return EpochEntry(epoch, start_offset)


def _end_of(entries: Sequence[EpochEntry], index: int, max_offset: int) -> int:
    return entries[index + 1].start_offset if index + 1 < len(entries) else max_offset


def find_consistent_point(
    local: Sequence[EpochEntry], local_max: int, remote: Sequence[EpochEntry], remote_max: int
) -> int:
    """The commit log offset (bytes) up to which two brokers hold the same records, -1 when they share no
    epoch (RocketMQ ``EpochFileCache.findConsistentPoint``).

    ``local`` / ``remote``: epoch lists (ascending, as :attr:`EpochFile.entries`); ``local_max`` /
    ``remote_max``: each side's max commit log offset, the end of its last epoch. Walks the local entries from
    the newest; the first one the remote list also has (same epoch AND same start offset) is the newest common
    epoch, and the answer is the smaller of its two ends (an end is the next entry's start, or the side's max
    offset for its last entry). Pure; never raises on well-typed input.
    """
    remote_index = {entry.epoch: index for index, entry in enumerate(remote)}
    for local_index in range(len(local) - 1, -1, -1):
        entry = local[local_index]
        index = remote_index.get(entry.epoch)
        if index is None or remote[index].start_offset != entry.start_offset:
            continue
        return min(_end_of(local, local_index, local_max), _end_of(remote, index, remote_max))
    return -1


class EpochFile:
    """The epoch list of one store, kept at ``path`` (``<store root>/epoch``); empty until :meth:`load`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []

    def __repr__(self) -> str:
        return f"EpochFile({self.path}, {self._entries})"

    # -- read --------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        """The entries, ascending epochs and start offsets (a copy)."""
        return list(self._entries)

    @property
    def last(self) -> EpochEntry | None:
        """The newest entry, None when there is none."""
        return self._entries[-1] if self._entries else None

    def end_offset(self, epoch: int, max_offset: int) -> int:
        """End (bytes, exclusive) of the records of ``epoch``: the next entry's start offset, or ``max_offset``
        (the commit log's max offset) for the last entry; -1 when no entry has that epoch."""
        for index, entry in enumerate(self._entries):
            if entry.epoch == epoch:
                return _end_of(self._entries, index, max_offset)
        return -1

    def load(self) -> None:
        """Read the file (blocking); a missing file is an empty list, a leftover temp file is removed.

        Raises :class:`StoreLoadError` when the file is larger than :data:`MAX_EPOCH_FILE_BYTES`, not in the
        format above, fails its CRC, or its entries are not ascending; OSError on I/O failure.
        """
        self._temp_path().unlink(missing_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._entries = []
            return
        if size > MAX_EPOCH_FILE_BYTES:
            raise StoreLoadError(f"{self.path}: {size} bytes, more than {MAX_EPOCH_FILE_BYTES}")
        self._entries = self._parse(self.path.read_bytes())

    def _parse(self, data: bytes) -> list[EpochEntry]:
        body, separator, crc_line = data.rstrip(b"\n").rpartition(b"\n")
        if not separator or not crc_line.startswith(b"crc ") or not crc_line[4:].isdigit():
            raise StoreLoadError(f"{self.path}: no CRC line")
        body += b"\n"
        if zlib.crc32(body) != int(crc_line[4:]):
            raise StoreLoadError(f"{self.path}: CRC mismatch")
        lines = body.decode("ascii", errors="replace").splitlines()
        if not lines or lines[0] != MAGIC_LINE:
            raise StoreLoadError(f"{self.path}: not an epoch file ({MAGIC_LINE!r} expected)")
        entries: list[EpochEntry] = []
        for line in lines[1:]:
            epoch, dash, start = line.partition("-")
            if not dash or not epoch.isdigit() or not start.isdigit() or len(epoch) > 10 or len(start) > 19:
                raise StoreLoadError(f"{self.path}: bad entry line {line!r}")
            try:
                entry = _checked(int(epoch), int(start))
            except ValueError as exc:
                raise StoreLoadError(f"{self.path}: {exc}") from None
            if entries and (
                entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset
            ):
                raise StoreLoadError(f"{self.path}: entry {line!r} does not follow {entries[-1]}")
            entries.append(entry)
        return entries

    # -- write -------------------------------------------------------------------------------------------

    def append(self, epoch: int, start_offset: int) -> EpochEntry:
        """Add ``(epoch, start_offset)`` and rewrite the file atomically (blocking). ``epoch`` must be greater
        than the last entry's epoch and ``start_offset`` (bytes) not less than its start offset.

        Raises ValueError (nothing changed) otherwise or for a value out of range, OSError when the write fails
        (the list in memory is unchanged then)."""
        entry = _checked(epoch, start_offset)
        last = self.last
        if last is not None and (epoch <= last.epoch or start_offset < last.start_offset):
            raise ValueError(f"epoch entry ({epoch}, {start_offset}) does not follow {last}")
        self._write([*self._entries, entry])
        return entry

    def truncate_from(self, offset: int) -> list[EpochEntry]:
        """Drop every entry whose ``start_offset >= offset`` (bytes; RocketMQ
        ``EpochFileCache.truncateSuffixByOffset``) and rewrite the file when something was dropped (blocking);
        returns the dropped entries.

        The rule matches ``MessageStore.truncate_commit_log(offset)``, which calls it: afterwards the commit
        log ends at ``offset`` and no epoch starts at or past its end, so the records the new master sends from
        ``offset`` on may belong to any epoch newer than the last one kept; the replicating side appends the
        master's epoch entry when it replicates that epoch's first record. (To drop only entries past a
        commit log end, as ``open()`` does after recovery, pass ``end + 1``: an entry starting exactly at the
        end is a master's fresh epoch.) Raises OSError when the write fails."""
        kept = [entry for entry in self._entries if entry.start_offset < offset]
        dropped = self._entries[len(kept) :]
        if dropped:
            self._write(kept)
        return dropped

    def _temp_path(self) -> Path:
        return self.path.with_name(self.path.name + ".tmp")

    def _write(self, entries: list[EpochEntry]) -> None:
        lines = [MAGIC_LINE, *(f"{e.epoch}-{e.start_offset}" for e in entries)]
        body = ("\n".join(lines) + "\n").encode("ascii")
        data = body + b"crc %d\n" % zlib.crc32(body)
        temp = self._temp_path()
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        fsync_dir(self.path.parent)
        self._entries = entries
        log.info("epoch file %s: %s", self.path, entries)
