"""Where the managed-ledger layer keeps its state in the metadata store (one place for every path).

Every name becomes ONE path segment through :func:`quasar.metadata.port.encode_segment` (percent-encoding
with no safe characters), so a topic name such as ``persistent://public/default/t`` never adds levels and a
cursor of ledger ``a`` cannot be confused with one of ledger ``a/b``::

    path                                   value (JSON, quasar.metadata.port.encode_json)     written by
    /managed-ledgers/<ledger>              {"ledgers": [row, ...]} (ledger_table)              ledger_table_store
    /cursors/<ledger>/<cursor>             one cursor's durable state (cursor_store)           cursor_store
    /ledger-ids/next                       int: the first ledger id not yet reserved            ledger_id_allocator

Pulsar keeps the same three things in ZooKeeper/etcd: ``/managed-ledgers/<name>`` (ManagedLedgerInfo), its
children (ManagedCursorInfo per cursor) and BookKeeper's ledger-id generator.
"""

from __future__ import annotations

from quasar.metadata.port import encode_segment

__all__ = [
    "CURSORS_ROOT",
    "LEDGER_ID_COUNTER_PATH",
    "MANAGED_LEDGERS_ROOT",
    "QUEUE_ID",
    "cursor_path",
    "cursors_path",
    "ledger_table_path",
]

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
CURSORS_ROOT = "/cursors"
LEDGER_ID_COUNTER_PATH = "/ledger-ids/next"

QUEUE_ID = 0
"""The store queue id of every managed ledger: the queue is ``(managed ledger name, 0)``."""


def ledger_table_path(ledger_name: str) -> str:
    """``/managed-ledgers/<ledger>``; raises ``ValueError`` (InvalidPathError) for an empty name."""
    return f"{MANAGED_LEDGERS_ROOT}/{encode_segment(ledger_name)}"


def cursors_path(ledger_name: str) -> str:
    """``/cursors/<ledger>``: the parent of the ledger's cursor states."""
    return f"{CURSORS_ROOT}/{encode_segment(ledger_name)}"


def cursor_path(ledger_name: str, cursor_name: str) -> str:
    """``/cursors/<ledger>/<cursor>``."""
    return f"{cursors_path(ledger_name)}/{encode_segment(cursor_name)}"
