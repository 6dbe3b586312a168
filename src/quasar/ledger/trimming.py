"""LedgerTrimmer: retention and trimming of one managed ledger (Pulsar ``ManagedLedgerImpl.internalTrimLedgers``,
semantics.md B1 "Retention and trimming").

A ledger is deleted once every durable cursor has passed it (the caller's ``bound``) and the retention policy
no longer keeps it: it closed more than the retention time ago, or the ledgers after it exceed the retention
size (``expired || overRetentionQuota`` in Pulsar; -1 = unlimited, 0 = none). The current ledger is never
deleted. Deleting means: drop the rows from the ledger table, write it (compare-and-set, through
``LedgerTableStore``), then tell the store which consume-queue units are no longer needed
(``MessageStorePort.set_queue_min_offset``); the store reclaims commit-log segments no queue needs.

The background round asks every loaded ledger whether a trim could delete something now
(:meth:`LedgerTrimmer.bound_to_trim`). A check that found nothing remembers what it depended on (the cursors'
mark-delete positions, the table's shape, the retention, whether the size quota is exceeded) and the time the
first ledger held only by its retention time expires; until one of those changes the answer is the same, so
the next rounds skip the ledger without computing its bound. Many loaded topics then cost the round an
attribute check each, not a bound computation and a coroutine each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from quasar.errors import QuasarError
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.errors import ManagedLedgerStorageError
from quasar.ledger.ledger_table import LedgerTable
from quasar.ledger.ledger_table_store import LedgerTableStore
from quasar.ledger.paths import QUEUE_ID
from quasar.storage.port import MessageStorePort

__all__ = ["LedgerTrimmer"]

log = logging.getLogger(__name__)


class LedgerTrimmer:
    """Retention settings and trimming of managed ledger ``name``: ``table`` is the ledger's own (mutable)
    ledger table, written through ``table_store``; ``clock_ms`` gives wall-clock ms; the initial retention
    comes from ``config`` (``retention_time_ms`` / ``retention_size_bytes``)."""

    __slots__ = (
        "_clock_ms",
        "_due_ms",
        "_idle_key",
        "_name",
        "_retention_size_bytes",
        "_retention_time_ms",
        "_store",
        "_table",
        "_table_store",
        "_trimming",
    )

    def __init__(
        self,
        name: str,
        store: MessageStorePort,
        table: LedgerTable,
        table_store: LedgerTableStore,
        clock_ms: Callable[[], int],
        config: ManagedLedgerConfig,
    ) -> None:
        self._name = name
        self._store = store
        self._table = table
        self._table_store = table_store
        self._clock_ms = clock_ms
        self._retention_time_ms = config.retention_time_ms  # validated by the config
        self._retention_size_bytes = config.retention_size_bytes
        self._trimming = False
        self._idle_key: Hashable | None = None  # inputs of the last check that found nothing to trim
        self._due_ms: int | None = None  # when that answer may change by time alone (None: never)

    def set_retention(self, retention_time_ms: int, retention_size_bytes: int) -> None:
        """Keep a consumed ledger while it closed less than ``retention_time_ms`` ago and while the ledgers
        left would not exceed ``retention_size_bytes``; -1 = unlimited, 0 = none. ``ValueError`` below -1."""
        if retention_time_ms < -1 or retention_size_bytes < -1:
            raise ValueError("retention time and size must be >= -1")
        self._retention_time_ms = retention_time_ms
        self._retention_size_bytes = retention_size_bytes

    @property
    def retention(self) -> tuple[int, int]:
        """(retention_time_ms, retention_size_bytes)."""
        return self._retention_time_ms, self._retention_size_bytes

    def bound_to_trim(
        self, inputs: Hashable, bound_of: Callable[[], int], total_size_of: Callable[[], int]
    ) -> int | None:
        """The trim bound (``bound_of()``) when :meth:`trim` would delete a ledger now, else None.

        ``inputs`` is what the bound depends on besides the table (the durable cursors' mark-delete positions,
        or the confirmed end without a cursor); ``total_size_of()`` gives the bytes of every ledger. After a
        check that found nothing, the same ``inputs``, table shape, retention and size-quota state answer None
        at once until the retention time of the first ledger below the bound runs out."""
        table = self._table
        time_ms, size_bytes = self._retention_time_ms, self._retention_size_bytes
        if time_ms == -1 and size_bytes == -1:
            return None  # unlimited retention: nothing is ever trimmed
        if self._idle_key is not None:
            over = size_bytes >= 0 and total_size_of() > size_bytes
            key = (inputs, len(table), table.first_offset, time_ms, size_bytes, over)
            if key == self._idle_key and (self._due_ms is None or self._clock_ms() < self._due_ms):
                return None
        bound = bound_of()
        total = total_size_of()
        if self.trimmable_count(bound, total)[0]:
            self._idle_key = None
            return bound
        over = size_bytes >= 0 and total > size_bytes
        self._idle_key = (inputs, len(table), table.first_offset, time_ms, size_bytes, over)
        self._due_ms = None
        rows = table.rows
        if time_ms >= 0 and len(rows) > 1 and table.ledger_end(0) <= bound:
            self._due_ms = rows[1].created_ms + time_ms + 1  # the first ledger's retention time runs out
        return None

    def trimmable_count(self, bound: int, total_size: int) -> tuple[int, int]:
        """How many of the oldest ledgers may go (wholly below queue offset ``bound``, retention no longer
        keeps them) and their bytes; ``total_size`` is the bytes of every ledger now."""
        table = self._table
        now = self._clock_ms()
        time_ms, size_bytes = self._retention_time_ms, self._retention_size_bytes
        rows = list(table)
        count = 0
        removed_size = 0
        for index in range(len(rows) - 1):
            if table.ledger_end(index) > bound:
                break
            closed_ms = rows[index + 1].created_ms
            expired = time_ms >= 0 and now - closed_ms > time_ms
            over_quota = size_bytes >= 0 and total_size - removed_size > size_bytes
            if not (expired or over_quota):
                break
            count += 1
            removed_size += rows[index].size_bytes or 0
        return count, removed_size

    async def trim(self, bound: int, total_size: int) -> list[int]:
        """Delete the ledgers :meth:`trimmable_count` allows, write the table, then tell the store the new
        first queue offset. Returns the deleted ledger ids (``[]`` when none, or while another trim runs).
        Raises ``MetadataError`` (the table write failed: the rows are gone from memory but still stored, so
        a reopen keeps them), ``ManagedLedgerStorageError`` (the store refused ``set_queue_min_offset``)."""
        if self._trimming:
            return []
        count, _ = self.trimmable_count(bound, total_size)
        if count == 0:
            return []
        table = self._table
        self._trimming = True
        try:
            dropped = table.drop_first(count)
            await self._table_store.write(table)
            try:
                self._store.set_queue_min_offset(self._name, QUEUE_ID, table.first_offset)
            except QuasarError as exc:
                raise ManagedLedgerStorageError(f"store refused the trim of {self._name}: {exc}") from exc
        finally:
            self._trimming = False
        ids = [row.ledger_id for row in dropped]
        log.info("%s: trimmed ledgers %s (first queue offset now %d)", self._name, ids, table.first_offset)
        return ids
