"""The async metadata store port and its backends (DESIGN.md ``metadata/``).

Imports no other Quasar package but ``quasar.errors``. ``ledger`` and ``broker`` use the
:class:`~quasar.metadata.port.MetadataStore` Protocol; only composition roots (``broker.app``, ``cli``,
tests) pick a backend.
"""

from quasar.metadata.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    InvalidPathError,
    MetadataStoreClosedError,
    MetadataStoreError,
    MetadataStoreUnavailableError,
    NotFoundError,
)
from quasar.metadata.port import (
    Delete,
    GetResult,
    MetadataStore,
    Notification,
    NotificationType,
    Put,
    SessionEvent,
    Stat,
    check_path,
    decode_json,
    decode_segment,
    encode_json,
    encode_segment,
)

__all__ = [
    "AlreadyExistsError",
    "BadVersionError",
    "Delete",
    "GetResult",
    "InvalidArgumentError",
    "InvalidPathError",
    "MetadataStore",
    "MetadataStoreClosedError",
    "MetadataStoreError",
    "MetadataStoreUnavailableError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "Put",
    "SessionEvent",
    "Stat",
    "check_path",
    "decode_json",
    "decode_segment",
    "encode_json",
    "encode_segment",
]
