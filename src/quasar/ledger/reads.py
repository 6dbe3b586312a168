"""LedgerReader: the read path of a managed ledger, straight from the store's consume queue and commit log
(Pulsar ``ManagedLedgerImpl.asyncReadEntries`` / ``asyncFindNewestMatching``).

Only confirmed entries are returned (below :attr:`ReadBounds.confirmed_end_offset`); entries the store no
longer has (retention, RocketMQ ``OFFSET_TOO_SMALL`` and friends) are skipped forward, never backwards. Entry
data are memoryviews into the store (no copy). The reader owns no state: it is given the store port, the
ledger's (read-only) table and the ledger's confirmed end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from quasar.errors import QuasarError
from quasar.ledger.entry import DEFAULT_READ_MAX_BYTES, Entry
from quasar.ledger.errors import ManagedLedgerStorageError
from quasar.ledger.ledger_table import LedgerTableView
from quasar.ledger.paths import QUEUE_ID
from quasar.ledger.position import Position
from quasar.storage.port import MessageStorePort
from quasar.storage.results import StoredMessage
from quasar.storage.status import GetStatus

__all__ = ["LedgerReader", "ReadBounds"]

_SKIP_STATUSES = frozenset(
    {GetStatus.OFFSET_TOO_SMALL, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_FOUND_NULL}
)


class ReadBounds(Protocol):
    """What bounds a read: the managed ledger's confirmed end."""

    @property
    def confirmed_end_offset(self) -> int:
        """One past the queue offset of the last confirmed entry."""
        ...


class LedgerReader:
    """Reads of managed ledger ``name`` (store queue ``(name, 0)``) from ``store``, mapped to positions
    through ``table``, never past ``bounds.confirmed_end_offset``. Errors of the store become
    ``ManagedLedgerStorageError``."""

    __slots__ = ("_bounds", "_name", "_store", "_table")

    def __init__(
        self, name: str, store: MessageStorePort, table: LedgerTableView, bounds: ReadBounds
    ) -> None:
        self._name = name
        self._store = store
        self._table = table
        self._bounds = bounds

    def first_available_offset(self) -> int:
        """Queue offset of the first entry still held: the first ledger's start, or later where the store's
        retention already removed the queue's head."""
        return max(self._table.first_offset, self._store.min_queue_offset(self._name, QUEUE_ID))

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_READ_MAX_BYTES
    ) -> list[Entry]:
        """Up to ``max_entries`` confirmed entries from ``start`` (or the first entry after it when it names
        none), within about ``max_bytes`` (at least one entry is returned). ``[]`` when none. Raises
        ``ValueError`` for ``max_entries < 1``."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        entries, _ = self.read_offsets(self._table.ceil_offset(start), max_entries, max_bytes)
        return entries

    def get_entry(self, position: Position) -> Entry | None:
        """The confirmed entry at ``position``, or None when there is none (or the store no longer has it)."""
        offset = self._table.offset_of(position)
        if offset is None or offset >= self._bounds.confirmed_end_offset:
            return None
        entries, _ = self.read_offsets(offset, 1, DEFAULT_READ_MAX_BYTES)
        return entries[0] if entries and entries[0].queue_offset == offset else None

    def read_offsets(self, offset: int, max_count: int, max_bytes: int) -> tuple[list[Entry], int]:
        """Confirmed entries from queue ``offset`` (at most ``max_count``, about ``max_bytes``); returns them
        and the queue offset after the last one (or, when there are none, where reading would resume: past
        entries removed by store retention)."""
        end = self._bounds.confirmed_end_offset
        if offset >= end:
            return [], offset
        first = self.first_available_offset()
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
        entries = self._entries_of(messages, end)
        return entries, (entries[-1].queue_offset + 1 if entries else offset)

    def read_matching(
        self, offset: int, max_count: int, tag_hashes: frozenset[int] | None, max_scan: int, max_bytes: int
    ) -> tuple[list[Entry], int]:
        """Confirmed entries from queue ``offset`` whose consume queue tag hash is in ``tag_hashes`` (None: all),
        at most ``max_count`` of them, examining at most ``max_scan`` units, within about ``max_bytes``; units
        of other tags are skipped from the consume queue alone (the store's ``get_matching``, RocketMQ
        ``isMatchedByConsumeQueue``). Returns the entries and the queue offset after the last unit examined
        (past entries store retention removed, never past the confirmed end), so a filtered-out stretch is
        read once. Raises ``ValueError`` for ``max_count`` or ``max_scan`` < 1, ``ManagedLedgerStorageError``
        when the store fails."""
        if max_count < 1 or max_scan < 1:
            raise ValueError(f"max_count and max_scan must be >= 1, got {max_count}, {max_scan}")
        end = self._bounds.confirmed_end_offset
        offset = max(offset, self.first_available_offset())
        while offset < end:
            try:
                result = self._store.get_matching(
                    self._name,
                    QUEUE_ID,
                    offset,
                    max_count,
                    tag_hashes,
                    min(max_scan, end - offset),
                    max_bytes,
                )
            except QuasarError as exc:
                raise ManagedLedgerStorageError(
                    f"store failed to read {self._name} at {offset}: {exc}"
                ) from exc
            if result.messages or result.status is GetStatus.NO_MATCHED_MESSAGE:
                return self._entries_of(result.messages, end), min(result.next_begin_offset, end)
            if result.status in _SKIP_STATUSES and offset < result.next_begin_offset:
                offset = min(result.next_begin_offset, end)  # removed data: go on where the queue continues
                continue
            break
        return [], offset

    def _entries_of(self, messages: list[StoredMessage], end: int) -> list[Entry]:
        """The confirmed entries (below ``end``) of ``messages`` read from the store, with their positions."""
        if not messages:
            return []
        table = self._table
        ledger_id, ledger_first, ledger_end = table.ledger_at(table.index_of_offset(messages[0].queue_offset))
        entries = []
        for message in messages:
            queue_offset = message.queue_offset
            if queue_offset >= end:
                break
            if queue_offset >= ledger_end:
                ledger_id, ledger_first, ledger_end = table.ledger_at(table.index_of_offset(queue_offset))
            entries.append(
                Entry(
                    Position(ledger_id, queue_offset - ledger_first),
                    message.body,
                    queue_offset,
                    message.store_timestamp,
                    message,
                )
            )
        return entries

    def find_newest_matching(self, condition: Callable[[Entry], bool]) -> Position | None:
        """The last confirmed entry for which ``condition`` holds, assuming it holds for a prefix of the
        ledger (binary search, one read per probe; Pulsar ``asyncFindNewestMatching``). None if no entry
        matches. Seek-by-publish-time passes ``lambda e: publish_time(e) < t``."""
        low, high = self.first_available_offset(), self._bounds.confirmed_end_offset - 1
        found = None
        while low <= high:
            middle = (low + high) // 2
            entries, _ = self.read_offsets(middle, 1, 1)
            if not entries:
                break
            if condition(entries[0]):
                found = entries[0].position
                low = entries[0].queue_offset + 1
            else:
                high = middle - 1
        return found
