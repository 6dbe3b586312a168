"""Pulsar's managed ledger on Quasar's RocketMQ-style storage.

A managed ledger is one store queue; its ledgers are consecutive ranges of that queue's offsets, addressed by
``Position(ledger_id, entry_id)``. Cursors track a subscription's read position, mark-delete position and
individually deleted ranges, persisted in the metadata store. Entries are opaque bytes here.

Ports: the ledger talks to the message store only through ``quasar.storage.port.MessageStorePort`` (put,
wait_flushed, get, query, min/max queue offset, set_queue_min_offset) and to the metadata store only through
the async ``quasar.metadata.port.MetadataStore`` (every metadata access is an await; failures of the port
become ``MetadataError``).

Modules: ``position``, ``entry``, ``config``, ``errors``, ``paths`` (metadata paths), ``range_set``
(PositionRangeSet), ``ack_state`` (pure ack algorithm), ``ledger_table`` (Position <-> queue offset, and the
read-only ``LedgerTableView``), ``ledger_table_store`` (its persistence and crash recovery),
``ledger_id_allocator``, ``cursor_store``, ``managed_cursor`` (with the ``CursorLedger`` protocol: the
ledger API a cursor uses), ``cursors`` (the cursor registry of a ledger), ``reads`` (``LedgerReader``),
``trimming`` (``LedgerTrimmer``: retention), ``listeners``, ``managed_ledger`` (composes them), ``factory``.
Batch-index ack sets (PIP-54) live in ``AckState.batch_deleted_indexes`` and persist with the cursor; cursor
properties (``mark_delete(position, properties)``) carry the deduplication snapshot.
"""

from quasar.ledger.ack_state import AckState
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.entry import Entry
from quasar.ledger.errors import (
    CursorAlreadyClosedError,
    CursorNotFoundError,
    InvalidCursorPositionError,
    InvalidEntryError,
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerFlushTimeoutError,
    ManagedLedgerStorageError,
    MarkDeletingMarkedPositionError,
    MetadataError,
    NoMoreEntriesError,
    TooManyRequestsError,
)
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.managed_ledger import InitialPosition, ManagedLedger
from quasar.ledger.position import EARLIEST, LATEST, Position
from quasar.ledger.range_set import PositionRangeSet

__all__ = [
    "EARLIEST",
    "LATEST",
    "AckState",
    "CursorAlreadyClosedError",
    "CursorNotFoundError",
    "Entry",
    "InitialPosition",
    "InvalidCursorPositionError",
    "InvalidEntryError",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerAlreadyClosedError",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "ManagedLedgerFencedError",
    "ManagedLedgerFlushTimeoutError",
    "ManagedLedgerStorageError",
    "MarkDeletingMarkedPositionError",
    "MetadataError",
    "NoMoreEntriesError",
    "Position",
    "PositionRangeSet",
    "TooManyRequestsError",
]
