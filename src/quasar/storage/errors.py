"""The storage layer's exception tree.

Expected outcomes on the hot path (segment full, message too big, flush timeout, "no message at that offset")
are *values* (``AppendMessageStatus``, ``PutStatus``, ``GetStatus`` in :mod:`quasar.storage.status`), as in
RocketMQ. Exceptions are for broken invariants, bad arguments and API misuse::

    QuasarError                          quasar.errors
    └── StorageError                     any storage failure
        ├── CorruptRecordError           bytes at a commit log offset are not a valid record
        ├── StoreLoadError               files on disk do not match the configuration (size, name, gaps)
        │   └── StoreLockedError         another MessageStore holds <root>/lock
        ├── ConsumeQueueGapError         a consume queue unit would skip queue offsets
        ├── ConsumeQueueDeletingError    a put to a consume queue while it is being deleted
        ├── OffsetOutOfRangeError        a read outside the written part of the commit log / consume queue
        ├── StoreClosedError             the store is not open
        ├── StoreNotWritableError        an earlier I/O failure made the store refuse writes
        ├── ReplicaOffsetMismatchError   replicated bytes do not start at the replica's max offset
        ├── DiskFullError                no space left for a new segment (reserved for the disk guard)
        └── InvalidMessageError          a put argument cannot be encoded (also a ValueError)
"""

from __future__ import annotations

import errno

from quasar.errors import QuasarError

NO_FILE_DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
"""Too many open files, in the process (EMFILE) or the system (ENFILE): transient, never a full disk. A put
stopped by one is refused with CREATE_MAPPED_FILE_FAILED, a flush round is retried; neither latches."""


OUT_OF_MEMORY_ERRNOS = frozenset({errno.ENOMEM})
"""No memory for a mapping or a kernel buffer (ENOMEM, e.g. ``mmap`` of a new segment under RLIMIT_AS):
transient like :data:`NO_FILE_DESCRIPTOR_ERRNOS`, with the same treatment."""

TRANSIENT_ERRNOS = NO_FILE_DESCRIPTOR_ERRNOS | OUT_OF_MEMORY_ERRNOS
"""Errors of the process's resources, not of the store's files: a put they stop is refused, a flush round
they stop is retried, and the store serves again once they clear. Only genuine I/O errors (EIO, a torn
file) latch the store into refusing writes; ENOSPC is the disk guard's, which lifts once space is freed."""


def is_out_of_file_descriptors(exc: BaseException) -> bool:
    """True for an OSError whose errno is in :data:`NO_FILE_DESCRIPTOR_ERRNOS`."""
    return isinstance(exc, OSError) and exc.errno in NO_FILE_DESCRIPTOR_ERRNOS


def transient_reason(exc: BaseException) -> str | None:
    """``"too many open files"`` or ``"out of memory"`` for an OSError whose errno is in
    :data:`TRANSIENT_ERRNOS`; None for anything else."""
    if not isinstance(exc, OSError):
        return None
    if exc.errno in NO_FILE_DESCRIPTOR_ERRNOS:
        return "too many open files"
    if exc.errno in OUT_OF_MEMORY_ERRNOS:
        return "out of memory"
    return None


class StorageError(QuasarError):
    """Root of every exception raised by :mod:`quasar.storage`."""


class CorruptRecordError(StorageError):
    """The bytes at ``offset`` are not a valid commit log record (bad magic, size or CRC)."""

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class StoreLoadError(StorageError):
    """Files found on disk do not fit the configuration: wrong size, bad name, or a gap between segments."""


class StoreLockedError(StoreLoadError):
    """``<root>/lock`` is held by another open MessageStore (in this or another process)."""


class ConsumeQueueGapError(StorageError):
    """A consume queue unit was dispatched past the queue's end: queue offsets would not be continuous."""

    def __init__(self, message: str, *, expected_queue_offset: int, queue_offset: int) -> None:
        super().__init__(message)
        self.expected_queue_offset = expected_queue_offset
        self.queue_offset = queue_offset


class ConsumeQueueDeletingError(StorageError):
    """A put (or a second deletion) reached a consume queue while it is being deleted
    (:mod:`quasar.storage.queue_deletion`); the caller retries once the deletion is done."""


class ConsumeQueueUnavailableError(StorageError):
    """A consume queue's files could not be opened or mapped when it was used (too many open files, out of
    memory, an I/O error): transient, the next use tries again."""


class OffsetOutOfRangeError(StorageError):
    """A read asked for bytes outside the written part of the commit log or a consume queue."""


class StoreClosedError(StorageError):
    """The store is not open (never opened, or already closed)."""


class StoreNotWritableError(StorageError):
    """An earlier I/O failure (fsync, file creation, dispatch) made the store refuse further writes."""


class ReplicaOffsetMismatchError(StorageError):
    """Replicated commit log bytes were offered at ``actual`` while the replica's commit log ends at
    ``expected`` (bytes): nothing was written (RocketMQ ``HAClient``: the slave closes the connection and
    reports its own max offset again)."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"replicated data offered at commit log offset {actual}, the replica ends at {expected}"
        )
        self.expected = expected
        self.actual = actual


class DiskFullError(StorageError):
    """No space is left for a new segment file (raised by the disk guard, a later issue)."""


class InvalidMessageError(StorageError, ValueError):
    """A put argument cannot be encoded into a record (e.g. a property name containing 0x01 or 0x02)."""
