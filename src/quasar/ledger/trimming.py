"""Retention and trimming of ManagedLedger (a mixin; Pulsar ``ManagedLedgerImpl.internalTrimLedgers``,
semantics.md B1 "Retention and trimming").

A ledger is deleted once every durable cursor has passed it and the retention policy no longer keeps it: it
closed more than the retention time ago, or the ledgers after it exceed the retention size (``expired ||
overRetentionQuota`` in Pulsar; -1 = unlimited, 0 = none). The current ledger is never deleted. Deleting
means: drop the rows from the ledger table, write it, then tell the store which consume-queue units are no
longer needed (``MessageStore.set_queue_min_offset``); the store reclaims commit-log segments no queue needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quasar.errors import QuasarError
from quasar.ledger.errors import ManagedLedgerStorageError
from quasar.ledger.ledger_table_store import QUEUE_ID

if TYPE_CHECKING:
    from quasar.ledger.ledger_table import LedgerTable
    from quasar.ledger.ledger_table_store import LedgerTableStore
    from quasar.ledger.managed_cursor import ManagedCursor

__all__ = ["TrimmingMixin"]

log = logging.getLogger(__name__)


class TrimmingMixin:
    """Retention and trimming of ``ManagedLedger`` (which provides the attributes below)."""

    _name: str
    _store: Any
    _table: LedgerTable
    _table_store: LedgerTableStore
    _cursors: dict[str, ManagedCursor]
    _confirmed_end: int
    _clock_ms: Callable[[], int]
    _retention_time_ms: int
    _retention_size_bytes: int
    _trimming: bool

    total_size: int  # ManagedLedger.total_size

    def _trim_allowed(self) -> bool:
        """Whether the ledger is open (ManagedLedger overrides this)."""
        return False

    def set_retention(self, retention_time_ms: int, retention_size_bytes: int) -> None:
        """Retention of consumed ledgers (Pulsar retention policy): keep a consumed ledger while it closed less
        than ``retention_time_ms`` ago and while the ledgers left would not exceed ``retention_size_bytes``; -1
        = unlimited, 0 = none. Raises ``ValueError`` below -1."""
        if retention_time_ms < -1 or retention_size_bytes < -1:
            raise ValueError("retention time and size must be >= -1")
        self._retention_time_ms = retention_time_ms
        self._retention_size_bytes = retention_size_bytes

    @property
    def retention(self) -> tuple[int, int]:
        """(retention_time_ms, retention_size_bytes)."""
        return self._retention_time_ms, self._retention_size_bytes

    def trim_bound(self) -> int:
        """Queue offset of the first entry some durable cursor still needs (the slowest mark-delete + 1), or
        the confirmed end when there is no durable cursor (Pulsar ``getSlowestReaderPosition``)."""
        bound = self._confirmed_end
        table = self._table
        for cursor in self._cursors.values():
            bound = min(bound, table.offset_after(cursor.mark_delete_position))
        return bound

    async def trim_ledgers(self, bound: int | None = None) -> list[int]:
        """Delete the oldest ledgers that lie wholly below ``bound`` (default ``trim_bound()``; pass a bound
        taken *before* the cursors were persisted so a crash never restores a cursor into a deleted ledger)
        and that retention no longer keeps: a ledger goes when it closed more than the retention time ago or
        the ledgers after it exceed the retention size (Pulsar ``internalTrimLedgers``: ``expired ||
        overRetentionQuota``). The current ledger is never deleted. Writes the ledger table, then tells the
        store (``set_queue_min_offset``) that the consume-queue units below the new first entry are no longer
        needed. Returns the deleted ledger ids. Raises ``MetadataError``, ``ManagedLedgerStorageError`` when
        the store lacks ``set_queue_min_offset``."""
        if not self._trim_allowed() or self._trimming:
            return []
        if bound is None:
            bound = self.trim_bound()
        table = self._table
        now = self._clock_ms()
        time_ms, size_bytes = self._retention_time_ms, self._retention_size_bytes
        total = self.total_size
        rows = table.rows
        count = 0
        removed_size = 0
        for index in range(len(rows) - 1):
            if table.ledger_end(index) > bound:
                break
            closed_ms = rows[index + 1].created_ms
            expired = time_ms >= 0 and now - closed_ms > time_ms
            over_quota = size_bytes >= 0 and total - removed_size > size_bytes
            if not (expired or over_quota):
                break
            count += 1
            removed_size += rows[index].size_bytes or 0
        if count == 0:
            return []
        set_min = getattr(self._store, "set_queue_min_offset", None)
        if set_min is None:
            raise ManagedLedgerStorageError(
                f"{self._name}: the store has no set_queue_min_offset(topic, queue_id, queue_offset); "
                "ledgers cannot be trimmed"
            )
        self._trimming = True
        try:
            dropped = table.drop_first(count)
            await self._table_store.write(table)
            try:
                set_min(self._name, QUEUE_ID, table.first_offset)
            except QuasarError as exc:
                raise ManagedLedgerStorageError(f"store refused the trim of {self._name}: {exc}") from exc
        finally:
            self._trimming = False
        ids = [row.ledger_id for row in dropped]
        log.info("%s: trimmed ledgers %s (first queue offset now %d)", self._name, ids, table.first_offset)
        return ids
