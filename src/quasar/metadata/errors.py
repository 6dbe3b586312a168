"""Errors of the metadata store port (Pulsar ``MetadataStoreException`` and its subclasses).

The tree (every backend raises these, whatever its own errors are)::

    QuasarError
    └── MetadataStoreError          any backend failure (I/O, SQLite, etcd unreachable), or a closed store
        ├── InvalidPathError        a malformed path (not absolute, empty segment, trailing '/')
        ├── InvalidArgumentError    a value that is not bytes, an expected version below -1, a bad op
        ├── NotFoundError           delete/get of a path that does not exist where it must
        ├── BadVersionError         compare-and-set lost: the stored version is not the expected one
        ├── AlreadyExistsError      create (expected version -1) of a path that exists
        └── MetadataStoreClosedError  the store was closed
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
