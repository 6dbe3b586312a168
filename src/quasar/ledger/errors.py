"""Errors of the managed-ledger layer (mirrors the useful leaves of Pulsar's ``ManagedLedgerException``).

Tree::

    QuasarError                                  quasar.errors
    └── ManagedLedgerError                       any managed-ledger failure
        ├── ManagedLedgerFencedError             the ledger refused further writes after a broken invariant
        ├── ManagedLedgerAlreadyClosedError      the ledger (or its factory) was closed
        ├── ManagedLedgerFlushTimeoutError       the store did not confirm the fsync in time (retriable)
        ├── ManagedLedgerStorageError            the store refused or failed a put (status or StorageError)
        │   └── TooManyRequestsError             the store is busy (OS page cache busy; retriable)
        ├── InvalidEntryError                    the entry was refused as malformed or too large
        ├── MetadataError                        reading/writing the metadata store failed, or bad stored data
        ├── CursorAlreadyClosedError             the cursor was closed or deleted
        ├── CursorNotFoundError                  no cursor of that name
        ├── NoMoreEntriesError                   nothing left to read (kept for callers that want to raise it)
        ├── InvalidCursorPositionError           a position that names no entry of this ledger
        └── MarkDeletingMarkedPositionError      a cumulative ack behind the mark-delete position

Source: Pulsar ``managed-ledger/.../ManagedLedgerException.java`` (ManagedLedgerFencedException,
ManagedLedgerAlreadyClosedException, CursorAlreadyClosedException, NoMoreEntriesToReadException,
InvalidCursorPositionException, MarkDeletingMarkedPositionException, TooManyRequestsException, ...).
``retriable`` is a class attribute, as in aiokafka's ``KafkaError``.

The metadata port raises ``quasar.metadata.errors.MetadataStoreError``; at the ledger boundary it becomes
``MetadataError`` (the port's error chained as ``__cause__``) through :func:`metadata_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from quasar.errors import QuasarError
from quasar.metadata.errors import MetadataStoreError
from quasar.storage.status import PutStatus

__all__ = [
    "CursorAlreadyClosedError",
    "CursorNotFoundError",
    "InvalidCursorPositionError",
    "InvalidEntryError",
    "ManagedLedgerAlreadyClosedError",
    "ManagedLedgerError",
    "ManagedLedgerFencedError",
    "ManagedLedgerFlushTimeoutError",
    "ManagedLedgerStorageError",
    "MarkDeletingMarkedPositionError",
    "MetadataError",
    "NoMoreEntriesError",
    "TooManyRequestsError",
    "metadata_errors",
    "put_status_error",
]


class ManagedLedgerError(QuasarError):
    """Root of the managed-ledger error tree. ``retriable``: whether the same call may succeed later."""

    retriable: bool = False


class ManagedLedgerFencedError(ManagedLedgerError):
    """The managed ledger is fenced: its in-memory ledger table could not be made durable, so it refuses every
    further write until it is closed and opened again (Pulsar ManagedLedgerFencedException)."""


class ManagedLedgerTerminatedError(ManagedLedgerError):
    """The managed ledger was terminated: it takes no more entries, for good (Pulsar
    ManagedLedgerTerminatedException; the broker answers TopicTerminatedError)."""


class ManagedLedgerAlreadyClosedError(ManagedLedgerError):
    """The managed ledger or its factory is closed (Pulsar ManagedLedgerAlreadyClosedException)."""


class ManagedLedgerFlushTimeoutError(ManagedLedgerError):
    """The store wrote the entry but did not confirm its flush in time (RocketMQ FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE). The entry may still become readable: a retry can duplicate it.

    Attributes: ``status`` (the store's status name).
    """

    retriable = True

    def __init__(self, message: str, *, status: str) -> None:
        super().__init__(message)
        self.status = status


class ManagedLedgerStorageError(ManagedLedgerError):
    """The store refused or failed the put. ``status`` is the store's status name, or None when the store
    raised (the StorageError is chained as ``__cause__``)."""

    def __init__(self, message: str, *, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class TooManyRequestsError(ManagedLedgerStorageError):
    """The store is busy (RocketMQ OS_PAGE_CACHE_BUSY); retry later (Pulsar TooManyRequestsException)."""

    retriable = True


class InvalidEntryError(ManagedLedgerError):
    """The store refused the entry itself: too large, or properties too large (RocketMQ MESSAGE_ILLEGAL,
    PROPERTIES_SIZE_EXCEEDED). Attributes: ``status``."""

    def __init__(self, message: str, *, status: str) -> None:
        super().__init__(message)
        self.status = status


class MetadataError(ManagedLedgerError):
    """Reading or writing the metadata store failed, or it held data this layer cannot parse. A failure of
    the metadata port is chained as ``__cause__`` (a ``quasar.metadata.errors.MetadataStoreError``)."""


@contextmanager
def metadata_errors(action: str) -> Iterator[None]:
    """Turn a ``MetadataStoreError`` raised inside the block into ``MetadataError("<action>: <cause>")``."""
    try:
        yield
    except MetadataStoreError as exc:
        raise MetadataError(f"{action}: {exc}") from exc


class CursorAlreadyClosedError(ManagedLedgerError):
    """The cursor was closed or deleted (Pulsar CursorAlreadyClosedException)."""


class CursorNotFoundError(ManagedLedgerError):
    """No cursor of that name exists on the managed ledger (Pulsar CursorNotFoundException)."""


class NoMoreEntriesError(ManagedLedgerError):
    """Nothing is left to read (Pulsar NoMoreEntriesToReadException)."""


class InvalidCursorPositionError(ManagedLedgerError):
    """A position that names no entry of this managed ledger, or lies past the last confirmed entry
    (Pulsar InvalidCursorPositionException). Attributes: ``position``."""

    def __init__(self, message: str, *, position: object) -> None:
        super().__init__(message)
        self.position = position


class MarkDeletingMarkedPositionError(ManagedLedgerError):
    """A cumulative ack (mark-delete) behind the current mark-delete position
    (Pulsar MarkDeletingMarkedPositionException). Attributes: ``position``, ``mark_delete_position``."""

    def __init__(self, message: str, *, position: object, mark_delete_position: object) -> None:
        super().__init__(message)
        self.position = position
        self.mark_delete_position = mark_delete_position


_FLUSH_TIMEOUT_STATUSES = frozenset(
    {PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE}
)
_INVALID_ENTRY_STATUSES = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})
_BUSY_STATUSES = frozenset({PutStatus.OS_PAGE_CACHE_BUSY})


def put_status_error(status: PutStatus, name: str) -> ManagedLedgerError:
    """The error for a store put or flush of managed ledger ``name`` that ended with non-OK ``status``:
    flush timeouts -> ``ManagedLedgerFlushTimeoutError``, MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED ->
    ``InvalidEntryError``, OS_PAGE_CACHE_BUSY -> ``TooManyRequestsError``, anything else ->
    ``ManagedLedgerStorageError``."""
    message = f"store refused an entry of {name}: {status.name}"
    if status in _FLUSH_TIMEOUT_STATUSES:
        return ManagedLedgerFlushTimeoutError(message, status=status.name)
    if status in _INVALID_ENTRY_STATUSES:
        return InvalidEntryError(message, status=status.name)
    if status in _BUSY_STATUSES:
        return TooManyRequestsError(message, status=status.name)
    return ManagedLedgerStorageError(message, status=status.name)
