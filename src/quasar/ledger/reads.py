"""Read path of ManagedLedger (a mixin): entries by position or queue offset, straight from the store's
consume queue and commit log (Pulsar ``ManagedLedgerImpl.asyncReadEntries`` / ``asyncFindNewestMatching``).

Only confirmed entries are returned (``_confirmed_end``); entries the store no longer has (retention) are
skipped forward, never backwards. The entry data are memoryviews into the store (no copy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quasar.errors import QuasarError
from quasar.ledger.entry import Entry
from quasar.ledger.errors import ManagedLedgerStorageError
from quasar.ledger.ledger_table_store import QUEUE_ID
from quasar.ledger.managed_cursor import DEFAULT_READ_MAX_BYTES
from quasar.ledger.position import Position
from quasar.storage.status import GetStatus

if TYPE_CHECKING:
    from quasar.ledger.ledger_table import LedgerTable

__all__ = ["LedgerReadsMixin"]

_SKIP_STATUSES = frozenset(
    {GetStatus.OFFSET_TOO_SMALL, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_FOUND_NULL}
)


class LedgerReadsMixin:
    """Reads of ``ManagedLedger`` (which provides the attributes below)."""

    _name: str
    _store: Any
    _table: LedgerTable
    _confirmed_end: int

    def _first_available_offset(self) -> int:
        return max(self._table.first_offset, self._store.min_queue_offset(self._name, QUEUE_ID))

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_READ_MAX_BYTES
    ) -> list[Entry]:
        """Up to ``max_entries`` confirmed entries from ``start`` (or the first entry after it when it names
        none), within about ``max_bytes`` (at least one entry is returned). ``[]`` when none."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        entries, _ = self._read_offsets(self._table.ceil_offset(start), max_entries, max_bytes)
        return entries

    def get_entry(self, position: Position) -> Entry | None:
        """The confirmed entry at ``position``, or None when there is none (or the store no longer has it)."""
        offset = self._table.offset_of(position)
        if offset is None or offset >= self._confirmed_end:
            return None
        entries, _ = self._read_offsets(offset, 1, DEFAULT_READ_MAX_BYTES)
        return entries[0] if entries and entries[0].queue_offset == offset else None

    def _read_offsets(self, offset: int, max_count: int, max_bytes: int) -> tuple[list[Entry], int]:
        """Confirmed entries from queue ``offset``; returns them and the queue offset after the last one (or
        where reading would resume when there are none: past entries removed by store retention)."""
        end = self._confirmed_end
        if offset >= end:
            return [], offset
        first = self._first_available_offset()
        if offset < first:
            offset = first
            if offset >= end:
                return [], offset
        while True:
            try:
                result = self._store.get(
                    self._name, QUEUE_ID, offset, min(max_count, end - offset), max_bytes
                )
            except QuasarError as exc:
                raise ManagedLedgerStorageError(
                    f"store failed to read {self._name} at {offset}: {exc}"
                ) from exc
            messages = result.messages
            if messages:
                break
            # removed or missing data: go on from where the store says the queue continues (never backwards)
            if result.status in _SKIP_STATUSES and offset < result.next_begin_offset < end:
                offset = result.next_begin_offset
                continue
            if result.status in _SKIP_STATUSES and result.next_begin_offset >= end:
                return [], end
            return [], offset
        table = self._table
        index = table.index_of_offset(messages[0].queue_offset)
        ledger_id = table.rows[index].ledger_id
        ledger_first = table.rows[index].first_queue_offset
        ledger_end = table.ledger_end(index)
        entries = []
        for message in messages:
            queue_offset = message.queue_offset
            if queue_offset >= end:
                break
            if queue_offset >= ledger_end:
                index = table.index_of_offset(queue_offset)
                ledger_id = table.rows[index].ledger_id
                ledger_first = table.rows[index].first_queue_offset
                ledger_end = table.ledger_end(index)
            entries.append(
                Entry(
                    Position(ledger_id, queue_offset - ledger_first),
                    message.body,
                    queue_offset,
                    message.store_timestamp,
                    message,
                )
            )
        return entries, (entries[-1].queue_offset + 1 if entries else offset)

    def find_newest_matching(self, condition: Callable[[Entry], bool]) -> Position | None:
        """The last confirmed entry for which ``condition`` holds, assuming it holds for a prefix of the
        ledger (binary search, one read per probe; Pulsar ``asyncFindNewestMatching``). None if no entry
        matches. Seek-by-publish-time passes ``lambda e: publish_time(e) < t``."""
        low, high = self._first_available_offset(), self._confirmed_end - 1
        found = None
        while low <= high:
            middle = (low + high) // 2
            entries, _ = self._read_offsets(middle, 1, 1)
            if not entries:
                break
            if condition(entries[0]):
                found = entries[0].position
                low = entries[0].queue_offset + 1
            else:
                high = middle - 1
        return found
