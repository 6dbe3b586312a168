"""StoreState: the life-cycle phase and write gate of one message store, shared by its parts.

:class:`~quasar.storage.message_store.MessageStore` owns a writer (:mod:`quasar.storage.write_path`), a reader
(:mod:`quasar.storage.read_path`), the flushing (:mod:`quasar.storage.store_flushing`) and the retention
(:mod:`quasar.storage.clean_service`) as separate objects. The little state more than one of them needs is
this one object, handed to each constructor, instead of attributes shared through ``self``:

- ``phase``: new -> open -> closing -> closed, moved by the facade only (loop thread, or ``close_sync``);
- ``writable``: cleared for good by a failed flush (flush threads) or a failed dispatch (loop thread);
- ``disk_full``: the disk guard, set and cleared by the clean service (clean thread; a put that gets
  ``ENOSPC`` is refused on its own and leaves the flag alone);
- no flag for a put refused because the process is out of file descriptors (``EMFILE`` / ``ENFILE`` while
  creating a consume queue or commit log file): that refusal is transient, counted in
  ``open_files_refusals``, and the next put tries again;
- ``replica``: the store follows a master (``MessageStore.set_replica_mode``, loop thread): puts are refused,
  only replicated bytes are appended (RocketMQ: a slave's ``putMessage`` answers SERVICE_NOT_AVAILABLE);
- ``refusing``: True unless open, writable, not disk full and not a replica, kept up to date by the four
  setters, so the publish path tests one attribute (RocketMQ ``DefaultMessageStore.checkStoreStatus``).

Plain attribute stores: a flag set on one thread is seen by the loop thread at its next put (the GIL orders
them); a put racing with the flag change is accepted or refused as a whole.
"""

from __future__ import annotations

import enum

__all__ = ["StorePhase", "StoreState"]


class StorePhase(enum.Enum):
    """Where the store is in its life cycle (``MessageStore.open`` / ``close``)."""

    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


class StoreState:
    """Phase, write gate and their counters; see the module docstring for who moves what."""

    __slots__ = (
        "_disk_full",
        "_phase",
        "_replica",
        "_writable",
        "disk_full_refusals",
        "open_files_refusals",
        "refusing",
        "reput_failed",
    )

    def __init__(self) -> None:
        self._phase = StorePhase.NEW
        self._writable = True
        self._disk_full = False
        self._replica = False
        self.refusing = True
        """True unless the store is open, writable, not disk full and not a replica: the publish path's one
        test."""
        self.disk_full_refusals = 0
        """Puts refused because the disk is full (guard ratio or ENOSPC)."""
        self.open_files_refusals = 0
        """Puts refused because a store file could not be opened: too many open files (EMFILE / ENFILE)."""
        self.reput_failed = False
        """The reput thread died: the index stops growing until the store is reopened."""

    def __repr__(self) -> str:
        return f"StoreState({self._phase}, writable={self._writable}, disk_full={self._disk_full})"

    def _update(self) -> None:
        self.refusing = (
            self._phase is not StorePhase.OPEN or not self._writable or self._disk_full or self._replica
        )

    @property
    def phase(self) -> StorePhase:
        return self._phase

    @phase.setter
    def phase(self, phase: StorePhase) -> None:
        self._phase = phase
        self._update()

    @property
    def is_open(self) -> bool:
        return self._phase is StorePhase.OPEN

    @property
    def writable(self) -> bool:
        """False after an I/O failure: puts answer SERVICE_NOT_AVAILABLE until the store is reopened."""
        return self._writable

    @writable.setter
    def writable(self, writable: bool) -> None:
        self._writable = writable
        self._update()

    @property
    def disk_full(self) -> bool:
        """The disk guard refuses puts (disk use above ``disk_space_warning_level_ratio``)."""
        return self._disk_full

    @disk_full.setter
    def disk_full(self, disk_full: bool) -> None:
        self._disk_full = disk_full
        self._update()

    @property
    def replica(self) -> bool:
        """The store is a replica: puts are refused, replicated bytes are appended."""
        return self._replica

    @replica.setter
    def replica(self, replica: bool) -> None:
        self._replica = replica
        self._update()
