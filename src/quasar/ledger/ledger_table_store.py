"""LedgerTableStore: persistence and crash recovery of a managed ledger's ledger table.

The table lives under ``/managed-ledgers/<name>`` in the metadata store as ``{"ledgers": [row, ...]}`` (row
layout in ``ledger_table``). Recovery reconciles it with the store, which is the truth for what was written:

- rows whose first queue offset is at or past the store's end are dropped (they were created for entries that
  never reached the disk, so nothing in them was ever receipted); the first row is kept;
- the last ledger is open-ended: its entry count is the store's end minus its first offset; its size is taken
  from the row when the row's entry count matches (a clean close), otherwise summed from the store;
- a repaired table is written back before anything is appended, so positions never change afterwards.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from quasar.errors import QuasarError
from quasar.ledger.errors import MetadataError
from quasar.ledger.ledger_table import LedgerInfo, LedgerTable

__all__ = ["LEDGER_KEY_PREFIX", "QUEUE_ID", "LedgerTableStore", "RecoveredTable"]

log = logging.getLogger(__name__)

LEDGER_KEY_PREFIX = "/managed-ledgers/"
QUEUE_ID = 0
"""The store queue id of every managed ledger: the queue is ``(managed ledger name, 0)``."""

_METADATA_ERRORS = (QuasarError, OSError, sqlite3.Error)
_SCAN_BATCH = 1024


class RecoveredTable:
    """What ``LedgerTableStore.recover`` found: the table, whether the last ledger holds entries (so the next
    add starts a new ledger) and the byte size of the last ledger."""

    __slots__ = ("current_size", "roll_pending", "table")

    def __init__(self, table: LedgerTable, roll_pending: bool, current_size: int) -> None:
        self.table = table
        self.roll_pending = roll_pending
        self.current_size = current_size


class LedgerTableStore:
    """Reads, repairs and writes the ledger table of managed ledger ``name``.

    ``metadata``: a ``MetadataStore``; ``store``: the ``MessageStore`` (read for the queue's end and, after a
    crash, the last ledger's size). Synchronous methods run at open; ``write`` is async (worker thread).
    Every metadata failure raises ``MetadataError``.
    """

    def __init__(self, metadata: Any, store: Any, name: str) -> None:
        self._metadata = metadata
        self._store = store
        self._name = name
        self.key = LEDGER_KEY_PREFIX + name

    def recover(self, allocate: Callable[[], int], now_ms: int) -> RecoveredTable:
        """Load the table (creating it, with a ledger id from ``allocate``, when new) and reconcile it with
        the store. Writes the table back when it was created or repaired."""
        store_end = self._store.max_queue_offset(self._name, QUEUE_ID)
        try:
            stored = self._metadata.get(self.key)
        except KeyError:
            stored = None
        except _METADATA_ERRORS as exc:
            raise MetadataError(f"cannot read the ledger table of {self._name}: {exc}") from exc
        if stored is None:
            table = LedgerTable([LedgerInfo(allocate(), store_end, now_ms)], store_end)
            self.write_now(table)
            return RecoveredTable(table, False, 0)
        try:
            rows = [LedgerInfo.from_json(row) for row in stored["ledgers"]]
        except (KeyError, TypeError) as exc:
            raise MetadataError(f"malformed ledger table of {self._name}: {stored!r}") from exc
        if not rows:
            raise MetadataError(f"empty ledger table for {self._name}")
        repaired = False
        while len(rows) > 1 and rows[-1].first_queue_offset >= store_end:
            rows.pop()
            repaired = True
        if rows[0].first_queue_offset > store_end:
            log.warning(
                "%s: the store ends at queue offset %d, before the first ledger (%d)",
                self._name,
                store_end,
                rows[0].first_queue_offset,
            )
            rows[0].first_queue_offset = store_end
            repaired = True
        table = LedgerTable(rows, store_end)
        last = table.last
        entries = table.entries_in(len(table) - 1)
        if entries > 0 and (last.entries != entries or last.size_bytes is None):
            last.entries = entries
            last.size_bytes = self.scan_size(last.first_queue_offset, store_end)
            repaired = True
        if repaired:
            self.write_now(table)
        return RecoveredTable(table, entries > 0, last.size_bytes or 0)

    def scan_size(self, start: int, end: int) -> int:
        """Sum of entry data sizes (bytes) in queue offsets ``[start, end)``, read from the store."""
        size = 0
        offset = max(start, self._store.min_queue_offset(self._name, QUEUE_ID))
        while offset < end:
            result = self._store.get(self._name, QUEUE_ID, offset, min(_SCAN_BATCH, end - offset))
            if not result.messages:
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
                continue
            size += sum(m.body.nbytes for m in result.messages)
            offset = result.messages[-1].queue_offset + 1
        return size

    def write_now(self, table: LedgerTable) -> None:
        """Write ``table`` synchronously (at open only)."""
        try:
            self._metadata.put(self.key, table.to_json())
        except _METADATA_ERRORS as exc:
            raise MetadataError(f"cannot write the ledger table of {self._name}: {exc}") from exc

    async def write(self, table: LedgerTable) -> None:
        """Write ``table`` in one transaction on the metadata store's worker thread."""
        try:
            await self._metadata.aput(self.key, table.to_json())
        except _METADATA_ERRORS as exc:
            raise MetadataError(f"cannot write the ledger table of {self._name}: {exc}") from exc
