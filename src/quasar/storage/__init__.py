"""Quasar storage: a RocketMQ-style message store that knows nothing of Pulsar.

One commit log of records in mapped segment files (the next one pre-allocated in the background), a consume
queue of 20-byte units per (topic, queue id), a key index (IndexFile) built by a reput thread, a checkpoint,
group-commit flushing, crash recovery and retention with a disk guard. Start at :class:`MessageStore`
(``quasar.storage.message_store``). Metadata (ledger tables, cursors, admin state) lives behind the async
port of ``quasar.metadata``, not here.
"""

from quasar.storage.clean_service import CleanResult
from quasar.storage.config import StoreConfig
from quasar.storage.errors import (
    ConsumeQueueDeletingError,
    ConsumeQueueGapError,
    ConsumeQueueUnavailableError,
    CorruptRecordError,
    DiskFullError,
    InvalidMessageError,
    OffsetOutOfRangeError,
    ReplicaOffsetMismatchError,
    StorageError,
    StoreClosedError,
    StoreLoadError,
    StoreLockedError,
    StoreNotWritableError,
)
from quasar.storage.flush import FlushDiskType
from quasar.storage.message_store import (
    GetResult,
    MessageStore,
    PutBatchResult,
    PutResult,
    StoredMessage,
    StoreStatistics,
)
from quasar.storage.status import AppendMessageStatus, GetStatus, PutStatus

__all__ = [
    "AppendMessageStatus",
    "CleanResult",
    "ConsumeQueueDeletingError",
    "ConsumeQueueGapError",
    "ConsumeQueueUnavailableError",
    "CorruptRecordError",
    "DiskFullError",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "InvalidMessageError",
    "MessageStore",
    "OffsetOutOfRangeError",
    "PutBatchResult",
    "PutResult",
    "PutStatus",
    "ReplicaOffsetMismatchError",
    "StorageError",
    "StoreClosedError",
    "StoreConfig",
    "StoreLoadError",
    "StoreLockedError",
    "StoreNotWritableError",
    "StoreStatistics",
    "StoredMessage",
]
