"""Errors of the metadata store port (Pulsar ``MetadataStoreException`` and its subclasses).

The tree (every backend raises these, whatever its own errors are)::

    QuasarError
    └── MetadataStoreError          any backend failure (I/O, SQLite, etcd unreachable), or a closed store
        ├── InvalidPathError        a malformed path (not absolute, empty segment, trailing '/')
        ├── InvalidArgumentError    a value that is not bytes, an expected version below -1, a bad op
        ├── NotFoundError           delete/get of a path that does not exist where it must
        ├── BadVersionError         compare-and-set lost: the stored version is not the expected one
        ├── AlreadyExistsError      create (expected version -1) of a path that exists
        ├── MetadataStoreClosedError  the store was closed
        └── MetadataStoreUnavailableError  the metadata service (etcd) did not answer in time or refused every
                                           connection; the call may be retried (a write's outcome is unknown)
"""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = [
    "AlreadyExistsError",
    "BadVersionError",
    "InvalidArgumentError",
    "InvalidPathError",
    "MetadataStoreClosedError",
    "MetadataStoreError",
    "MetadataStoreUnavailableError",
    "NotFoundError",
]


class MetadataStoreError(QuasarError):
    """A metadata store operation failed (Pulsar ``MetadataStoreException``)."""


class InvalidPathError(MetadataStoreError, ValueError):
    """The path is not ``/seg/seg...`` with non-empty segments (Pulsar ``InvalidPathException``)."""


class InvalidArgumentError(MetadataStoreError, ValueError):
    """An argument other than the path is malformed (a value that is not bytes, a bad expected version)."""


class NotFoundError(MetadataStoreError):
    """The path does not exist (Pulsar ``NotFoundException``)."""


class BadVersionError(MetadataStoreError):
    """The stored version differs from the expected one (Pulsar ``BadVersionException``)."""


class AlreadyExistsError(BadVersionError):
    """A create-only put (expected version -1) found the path present (Pulsar ``AlreadyExistsException``)."""


class MetadataStoreClosedError(MetadataStoreError):
    """The store has been closed (Pulsar ``AlreadyClosedException``)."""


class MetadataStoreUnavailableError(MetadataStoreError):
    """The metadata service could not be reached in time (etcd: every endpoint refused the connection, or the
    one asked did not answer within the operation timeout; Pulsar ``MetadataStoreException`` wrapping a
    connection loss). A write that timed out may or may not have been applied; a later call may succeed."""
