"""What replication needs from its neighbours, as typed Protocols.

* :class:`ReplicaStore`: the commit-log side of :class:`~quasar.storage.message_store.MessageStore` the HA
  channel uses (RocketMQ ``DefaultMessageStore``'s ``getCommitLogData`` / ``appendToCommitLog`` /
  ``truncateDirtyFiles`` and the ``EpochFileCache``). The real store satisfies it, and so does the small fake
  of the unit tests.
* :class:`EpochFileView` / :class:`EpochEntryView`: the epoch file (``quasar.storage.epoch_file``), a list of
  ``(epoch, start_offset)`` entries in increasing order (RocketMQ ``EpochFileCache`` / ``EpochEntry``).
* :class:`SyncStateSetStore`: where the master records its sync-state set (RocketMQ 5
  ``AlterSyncStateSet`` to the controller; here the group state in etcd, owned by the role manager).

Every method runs on the event-loop thread unless its docstring says it blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["EpochEntryView", "EpochFileView", "ReplicaStore", "SyncStateSetStore"]


class EpochEntryView(Protocol):
    """One epoch file entry: from ``start_offset`` (bytes) on, the commit log was written under ``epoch``."""

    @property
    def epoch(self) -> int: ...

    @property
    def start_offset(self) -> int: ...


class EpochFileView(Protocol):
    """The epoch file: entries in increasing epoch and start offset order."""

    @property
    def entries(self) -> Sequence[EpochEntryView]: ...

    @property
    def last(self) -> EpochEntryView | None: ...

    def append(self, epoch: int, start_offset: int) -> object:
        """Add ``(epoch, start_offset)`` (durably: it may block on a small file write)."""
        ...

    def truncate_from(self, offset: int) -> object:
        """Drop entries starting at or after ``offset`` (bytes). May block on a small file write."""
        ...

    def end_offset(self, epoch: int, max_offset: int) -> int:
        """Where ``epoch`` ends: the next entry's start, or ``max_offset`` for the last one; -1 if absent."""
        ...


class ReplicaStore(Protocol):
    """The store as the HA channel sees it. Offsets are commit log offsets (bytes)."""

    @property
    def max_commit_log_offset(self) -> int: ...

    @property
    def min_commit_log_offset(self) -> int: ...

    @property
    def replica_mode(self) -> bool:
        """True while the store follows a master: ``put`` answers SERVICE_NOT_AVAILABLE and only
        ``append_replicated`` writes."""
        ...

    def set_replica_mode(self, replica: bool) -> None: ...

    @property
    def epoch_file(self) -> EpochFileView: ...

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from the record boundary ``offset``: at least one record, at most ``max_bytes``
        unless the first is bigger, never past its segment's end (a blank end-of-file record comes with the
        rest of its file); ``b""`` at the max offset. Raises OffsetOutOfRangeError / CorruptRecordError."""
        ...

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Append whole records at ``offset`` (== the max offset) and build their consume queue units;
        returns the new max offset. Raises ReplicaOffsetMismatchError, CorruptRecordError,
        StoreNotWritableError (not in replica mode)."""
        ...

    def truncate_commit_log(self, offset: int) -> None:
        """Drop the commit log (and derived units) from ``offset`` on. Blocking: run it in an executor."""
        ...


class SyncStateSetStore(Protocol):
    """Where the master's sync-state set (broker ids, the master's own included) is recorded."""

    async def alter(self, new_set: frozenset[int]) -> bool:
        """Record ``new_set``; True once stored, False when this master was fenced (another master, a newer
        epoch): the master then stops changing the set. Any exception = not stored, try again later."""
        ...
