"""LedgerTableStore: persistence and crash recovery of a managed ledger's ledger table.

The table lives under ``/managed-ledgers/<encoded name>`` (``paths``) as JSON ``{"ledgers": [row, ...]}`` (row
layout in ``ledger_table``; ``"terminated": true`` once the managed ledger was terminated). Every write is a
compare-and-set on the version last read or written, as Pulsar writes ``ManagedLedgerInfo`` with its ``Stat``
version: a version mismatch means another owner wrote the table, and the write fails with
``ManagedLedgerFencedError`` (the managed ledger then fences itself). Writes are
serialised by a lock, each writing the table as it is when its turn comes.

Recovery reconciles the stored table with the message store, which is the truth for what was written:

- rows whose first queue offset is at or past the store's end are dropped (they were created for entries that
  never reached the disk, so nothing in them was ever receipted); the first row is kept;
- the last ledger is open-ended: its entry count is the store's end minus its first offset; its size is taken
  from the row when the row's entry count matches (a clean close), otherwise summed from the store;
- a repaired table is written back before anything is appended, so positions never change afterwards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from quasar.ledger.errors import ManagedLedgerFencedError, MetadataError, metadata_errors
from quasar.ledger.ledger_table import LedgerInfo, LedgerTable
from quasar.ledger.paths import QUEUE_ID, ledger_table_path
from quasar.metadata.errors import BadVersionError
from quasar.metadata.port import MetadataStore, decode_json, encode_json
from quasar.storage.port import MessageStorePort

__all__ = ["LedgerTableStore", "RecoveredTable"]

log = logging.getLogger(__name__)

_SCAN_BATCH = 1024
_ABSENT = -1  # expected_version for "must not exist yet"


@dataclass(frozen=True, slots=True)
class RecoveredTable:
    """What :meth:`LedgerTableStore.recover` found: the table, whether the last ledger holds entries (so the
    next add starts a new ledger) and the byte size of the last ledger."""

    table: LedgerTable
    roll_pending: bool
    current_size: int


class LedgerTableStore:
    """Reads, repairs and writes the ledger table of managed ledger ``name``.

    ``metadata``: the metadata port; ``store``: the message store port (read for the queue's end and, after a
    crash, the last ledger's size). Every metadata failure raises ``MetadataError``.
    """

    __slots__ = ("_lock", "_metadata", "_name", "_store", "_version", "existed", "path")

    def __init__(self, metadata: MetadataStore, store: MessageStorePort, name: str) -> None:
        self._metadata = metadata
        self._store = store
        self._name = name
        self.path = ledger_table_path(name)
        self._version = _ABSENT  # version of the stored table as last read or written
        self._lock = asyncio.Lock()
        self.existed = True
        """False after :meth:`create` wrote a new table; True when the table was read (it existed)."""

    async def create(self, allocate: Callable[[], Awaitable[int]], now_ms: int) -> RecoveredTable:
        """Create the table of a managed ledger the caller knows to be new (its factory lists no such name):
        one ledger from the store's end, written with "must not exist yet" (one put, no read first). When the
        table exists after all (written by an earlier owner the caller did not know of), falls back to
        :meth:`recover`. Raises ``MetadataError``."""
        ledger_id = await allocate()
        store_end = self._store.max_queue_offset(self._name, QUEUE_ID)  # after the await: the newest
        table = LedgerTable([LedgerInfo(ledger_id, store_end, now_ms)], store_end)
        try:
            await self.write(table)
        except ManagedLedgerFencedError:  # it exists: read and reconcile it as any reopened table
            self._version = _ABSENT
            return await self.recover(allocate, now_ms)
        self.existed = False
        return RecoveredTable(table, False, 0)

    async def recover(self, allocate: Callable[[], Awaitable[int]], now_ms: int) -> RecoveredTable:
        """Load the table (creating it, with a ledger id from ``allocate``, when new) and reconcile it with
        the store. Writes the table back when it was created or repaired. Raises ``MetadataError``."""
        with metadata_errors(f"cannot read the ledger table of {self._name}"):
            stored = await self._metadata.get(self.path)
        if stored is None:
            ledger_id = await allocate()
            store_end = self._store.max_queue_offset(self._name, QUEUE_ID)  # after the awaits: the newest
            table = LedgerTable([LedgerInfo(ledger_id, store_end, now_ms)], store_end)
            await self.write(table)
            return RecoveredTable(table, False, 0)
        with metadata_errors(f"cannot read the ledger table of {self._name}"):
            value = decode_json(self.path, stored.value)
        self._version = stored.stat.version
        store_end = self._store.max_queue_offset(self._name, QUEUE_ID)
        try:
            rows = [LedgerInfo.from_json(row) for row in value["ledgers"]]
        except (KeyError, TypeError) as exc:
            raise MetadataError(f"malformed ledger table of {self._name}: {value!r}") from exc
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
        table = LedgerTable(rows, store_end, terminated=value.get("terminated") is True)
        last = table.last
        entries = table.entries_in(len(table) - 1)
        if entries > 0 and (last.entries != entries or last.size_bytes is None):
            last.entries = entries
            last.size_bytes = self.scan_size(last.first_queue_offset, store_end)
            repaired = True
        if repaired:
            await self.write(table)
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

    async def write(self, table: LedgerTable) -> None:
        """Write ``table`` as it is when this write's turn comes (one put, compare-and-set on the version
        last seen). Raises ``ManagedLedgerFencedError`` when another owner changed the stored table (Pulsar
        fences the managed ledger on ``BadVersionException``), ``MetadataError`` on other failures."""
        async with self._lock:
            with metadata_errors(f"cannot write the ledger table of {self._name}"):
                try:
                    stat = await self._metadata.put(self.path, encode_json(table.to_json()), self._version)
                except BadVersionError as exc:
                    raise ManagedLedgerFencedError(
                        f"{self._name}: the stored ledger table was changed by another owner: {exc}"
                    ) from exc
            self._version = stat.version
