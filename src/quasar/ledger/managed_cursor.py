"""ManagedCursor: a subscription's position in a managed ledger (Pulsar ``ManagedCursorImpl``).

State:

- ``read_position``: the next entry to read. Kept at or after the entry following the mark-delete position.
- ``mark_delete_position`` and ``individually_deleted``: the ack state, held by a pure ``AckState``.

Internally the read position is a queue offset, so it stays right across ledger rollovers: "the entry after
the last one of ledger 7" and "entry 0 of ledger 9" are the same offset.

A cursor sees its managed ledger only through :class:`CursorLedger`, the ledger's public read/visibility API
(read from a queue offset, the confirmed end, a read-only ledger table, persist a snapshot, forget a cursor).

Durable cursors are persisted (``CursorLedger.persist_cursor``) when created, then at most once per
``cursor_persist_interval_ms`` by the factory's background flusher (only when changed), and always on close.
Non-durable cursors (readers, Pulsar ``NonDurableCursorImpl``) persist nothing. Every method runs on the event
loop thread; only ``flush``, ``close`` and ``invalidate`` await (the metadata store).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from quasar.ledger.ack_state import AckState
from quasar.ledger.cursor_store import CursorSnapshot
from quasar.ledger.entry import DEFAULT_READ_MAX_BYTES, Entry
from quasar.ledger.errors import CursorAlreadyClosedError, InvalidCursorPositionError
from quasar.ledger.ledger_table import LedgerTableView
from quasar.ledger.position import Position
from quasar.ledger.range_set import PositionRangeSet

__all__ = ["DEFAULT_READ_MAX_BYTES", "CursorLedger", "ManagedCursor"]


class CursorLedger(Protocol):
    """The public API of ``ManagedLedger`` that its cursors use (and nothing else of it)."""

    @property
    def name(self) -> str: ...

    @property
    def table(self) -> LedgerTableView:
        """Read-only view of the ledger table (position <-> queue offset)."""
        ...

    @property
    def confirmed_end_offset(self) -> int:
        """One past the queue offset of the last confirmed entry."""
        ...

    @property
    def first_available_offset(self) -> int:
        """Queue offset of the first entry still held."""
        ...

    @property
    def last_confirmed_entry(self) -> Position: ...

    def next_valid_position(self, position: Position) -> Position: ...

    def read_from_offset(
        self, queue_offset: int, max_entries: int, max_bytes: int
    ) -> tuple[list[Entry], int]:
        """Confirmed entries from ``queue_offset`` and the queue offset after them."""
        ...

    async def persist_cursor(self, snapshot: CursorSnapshot) -> None:
        """Write a durable cursor's state; raises ``MetadataError``."""
        ...

    def forget_cursor(self, cursor: ManagedCursor) -> None:
        """Unregister a cursor that closed itself."""
        ...


class ManagedCursor:
    """A cursor over one ManagedLedger. Created by ``ManagedLedger.open_cursor`` (durable) or
    ``ManagedLedger.new_non_durable_cursor``; not constructed directly."""

    def __init__(
        self,
        ledger: CursorLedger,
        name: str,
        state: AckState,
        read_offset: int,
        *,
        durable: bool,
        max_ranges_to_persist: int,
        max_batch_entries_to_persist: int = 10_000,
        properties: Mapping[str, int] | None = None,
        persisted: bool = False,
    ) -> None:
        """``state``: the ack state; ``read_offset``: the queue offset of the first read (moved up to just
        after the mark-delete position); ``properties``: restored cursor properties; ``persisted``: the state
        was just read from the metadata store (nothing to write yet)."""
        self._ledger = ledger
        self._name = name
        self._state = state
        self._table = ledger.table
        self._read_offset = max(read_offset, self._table.offset_after(state.mark_delete_position))
        self._durable = durable
        self._max_ranges = max_ranges_to_persist
        self._max_batch_entries = max_batch_entries_to_persist
        # durable state versions: changed on every ack/reset, persisted when a write of that version completed
        self._version = 1 if durable else 0
        self._persisted_version = self._version if persisted else 0
        self._closed = False
        self._persist_lock = asyncio.Lock() if durable else None
        self._properties: dict[str, int] = dict(properties or {})

    # ------------------------------------------------------------------ identity and state
    @property
    def name(self) -> str:
        return self._name

    @property
    def durable(self) -> bool:
        """Whether the cursor's state is persisted (a subscription) or not (a reader)."""
        return self._durable

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def ledger(self) -> CursorLedger:
        return self._ledger

    @property
    def read_position(self) -> Position:
        """The next entry to read (may be the position the next written entry will get)."""
        return self._table.position_of(self._read_offset)

    @property
    def mark_delete_position(self) -> Position:
        """Everything at or below this position is acknowledged."""
        return self._state.mark_delete_position

    @property
    def individually_deleted(self) -> PositionRangeSet:
        """Acknowledged positions above the mark-delete position (read-only view: do not mutate)."""
        return self._state.individually_deleted

    @property
    def properties(self) -> dict[str, int]:
        """Properties stored with the mark-delete position (Pulsar ``PositionInfo.properties``: name -> int64;
        the deduplication cursor keeps producer name -> highest persisted sequence id there). A copy."""
        return dict(self._properties)

    @property
    def is_dirty(self) -> bool:
        """Whether the durable state changed since it was last persisted."""
        return self._version != self._persisted_version

    # ------------------------------------------------------------------ reads
    def read_entries(self, max_entries: int, max_bytes: int = DEFAULT_READ_MAX_BYTES) -> list[Entry]:
        """Read up to ``max_entries`` confirmed entries (and about ``max_bytes`` bytes: at least one entry is
        returned even if larger) from the read position, skipping individually deleted ones, and move the
        read position past what was read. Returns ``[]`` when nothing is available.

        Raises ``ValueError`` for ``max_entries < 1``, ``CursorAlreadyClosedError`` when closed, and the
        ledger's errors when the store fails.
        """
        self._check_open()
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        ledger = self._ledger
        deleted = self._state.individually_deleted
        out: list[Entry] = []
        budget = max_bytes
        offset = self._skip_deleted(self._read_offset)
        full = False
        while not full and len(out) < max_entries:
            entries, next_offset = ledger.read_from_offset(offset, max_entries - len(out), max(budget, 1))
            if not entries:
                offset = max(offset, next_offset)
                break
            for entry in entries:
                size = entry.data.nbytes
                if out and size > budget:
                    full = True  # the first entry always goes out; later ones only within the budget
                    break
                offset = entry.queue_offset + 1
                if deleted and deleted.contains(entry.position):
                    continue
                out.append(entry)
                budget -= size
            offset = self._skip_deleted(offset)
        self._read_offset = max(offset, self._read_offset)
        return out

    def has_more_entries(self) -> bool:
        """Whether a confirmed entry that is not individually deleted lies at or after the read position."""
        self._check_open()
        self._read_offset = self._skip_deleted(self._read_offset)
        return self._read_offset < self._ledger.confirmed_end_offset

    def _skip_deleted(self, offset: int) -> int:
        deleted = self._state.individually_deleted
        if not deleted:
            return offset
        table = self._table
        while offset < table.next_offset:
            found = deleted.range_containing(table.position_of(offset))
            if found is None:
                break
            offset = table.offset_after(found[1])
        return offset

    def seek(self, position: Position, *, force: bool = False) -> None:
        """Make ``position`` (or the first entry after it when it names none) the next entry to read.
        Without ``force`` the read position never goes at or before the mark-delete position (Pulsar
        ``ManagedCursorImpl.seek``)."""
        self._check_open()
        table = self._table
        offset = table.ceil_offset(position)
        if not force:
            offset = max(offset, table.offset_after(self._state.mark_delete_position))
        self._read_offset = offset

    def rewind(self) -> None:
        """Read again from the first entry after the mark-delete position (Pulsar ``rewind``)."""
        self._check_open()
        self._read_offset = self._table.offset_after(self._state.mark_delete_position)

    # ------------------------------------------------------------------ acks
    def mark_delete(self, position: Position, properties: dict[str, int] | None = None) -> None:
        """Cumulative ack: everything up to and including ``position`` (Pulsar ``asyncMarkDelete``).

        ``properties`` (name -> int64), when given, replace the cursor's properties and are persisted with the
        position (Pulsar ``asyncMarkDelete(position, properties)``).
        The mark-delete position may then jump further over individually deleted ranges that follow. Raises
        ``InvalidCursorPositionError`` past the last confirmed entry, ``MarkDeletingMarkedPositionError``
        behind the current mark-delete position (the same position is a no-op).
        """
        self._check_open()
        if properties is not None and position >= self._state.mark_delete_position:
            self._properties = dict(properties)
            self._touch()
        if position > self._ledger.last_confirmed_entry:
            raise InvalidCursorPositionError(
                f"cannot mark-delete {position}: past the last confirmed entry "
                f"{self._ledger.last_confirmed_entry}",
                position=position,
            )
        before = self._state.mark_delete_position
        after = self._state.ack_cumulative(position, self._table.next_position)
        if after != before:
            self._after_mark_delete_moved()

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks (Pulsar ``asyncDelete``): each position becomes deleted; the mark-delete position
        advances over the first contiguous range, across ledger boundaries. Positions at or below the
        mark-delete position are ignored. Raises ``InvalidCursorPositionError`` (and acks nothing) when a
        position names no confirmed entry."""
        self._check_open()
        state = self._state
        mark_delete = state.mark_delete_position
        table = self._table
        confirmed_end = self._ledger.confirmed_end_offset
        todo = []
        for position in positions:
            if position <= mark_delete:
                continue
            offset = table.offset_of(position)
            if offset is None or offset >= confirmed_end:
                raise InvalidCursorPositionError(
                    f"cannot acknowledge {position}: no confirmed entry has that position", position=position
                )
            todo.append(position)
        if not todo:
            return
        count = state.individually_deleted.cardinality
        state.ack_individual(todo, table.next_position)
        if state.mark_delete_position != mark_delete:
            self._after_mark_delete_moved()
        elif state.individually_deleted.cardinality != count:
            self._touch()

    def delete_batch_indexes(self, position: Position, ack_set: int) -> None:
        """Batch-index ack (PIP-54): ``ack_set`` has bit i set for each index of the entry at ``position``
        still unacknowledged; it is ANDed into the stored set and the entry is deleted once the set is empty
        (Pulsar ``ManagedCursorImpl.internalDelete`` with ``deletionAtBatchIndexLevelEnabled``). An entry
        already deleted is ignored. Raises ``InvalidCursorPositionError`` when ``position`` names no confirmed
        entry, ``ValueError`` for a negative ``ack_set``."""
        self._check_open()
        if ack_set < 0:
            raise ValueError(f"ack_set must be a non-negative bit set, got {ack_set}")
        offset = self._table.offset_of(position)
        if offset is None or offset >= self._ledger.confirmed_end_offset:
            raise InvalidCursorPositionError(
                f"cannot acknowledge {position}: no confirmed entry has that position", position=position
            )
        state = self._state
        before = (state.mark_delete_position, state.batch_deleted_indexes.get(position))
        state.ack_batch_indexes(position, ack_set, self._table.next_position)
        if state.mark_delete_position != before[0]:
            self._after_mark_delete_moved()
        elif state.batch_deleted_indexes.get(position) != before[1]:
            self._touch()

    def batch_ack_set(self, position: Position) -> int | None:
        """The unacknowledged batch indexes of a partly acked entry (bit i = index i), None otherwise."""
        return self._state.batch_deleted_indexes.get(position)

    def is_acked(self, position: Position) -> bool:
        """Whether ``position`` is at or below the mark-delete position or individually deleted."""
        return self._state.is_acked(position)

    def reset_cursor(self, position: Position) -> None:
        """Move the cursor so that ``position`` is the next entry read and everything before it counts as
        acknowledged; individual acks are forgotten (Pulsar ``resetCursor``; may move backwards). Positions
        before the first entry or past the last confirmed one are clamped to those ends."""
        self._check_open()
        ledger = self._ledger
        table = self._table
        offset = min(
            max(table.ceil_offset(position), ledger.first_available_offset), ledger.confirmed_end_offset
        )
        self._state.reset(table.position_of(offset - 1))
        self._read_offset = offset
        self._touch()

    def _after_mark_delete_moved(self) -> None:
        after = self._table.offset_after(self._state.mark_delete_position)
        if self._read_offset < after:
            self._read_offset = after
        self._touch()

    def _touch(self) -> None:
        if self._durable:
            self._version += 1

    # ------------------------------------------------------------------ stats
    @property
    def number_of_entries_in_backlog(self) -> int:
        """Confirmed entries after the mark-delete position that are not individually deleted (Pulsar
        ``getNumberOfEntriesInBacklog``)."""
        start = max(self._table.offset_after(self._state.mark_delete_position), self._table.first_offset)
        backlog = self._ledger.confirmed_end_offset - start - self._state.individually_deleted.cardinality
        return max(backlog, 0)

    @property
    def number_of_entries(self) -> int:
        """Confirmed entries from the read position on (Pulsar ``getNumberOfEntries``)."""
        return max(self._ledger.confirmed_end_offset - self._read_offset, 0)

    # ------------------------------------------------------------------ persistence and lifecycle
    def snapshot(self) -> CursorSnapshot:
        """The durable state now (at most ``max_unacked_ranges_to_persist`` ranges)."""
        return CursorSnapshot.take(
            self._name,
            self._state.mark_delete_position,
            self._state.individually_deleted,
            max_ranges=self._max_ranges,
            now_ms=int(time.time() * 1000),
            properties=self._properties,
            batch_deleted=self._state.batch_deleted_indexes,
            max_batch_entries=self._max_batch_entries,
        )

    async def flush(self) -> None:
        """Persist the state now if it changed (durable cursors; a no-op for non-durable or closed ones).
        Writes are serialised per cursor. Raises ``MetadataError``; the state stays dirty then."""
        if self._persist_lock is None or not self.is_dirty:
            return
        async with self._persist_lock:
            version = self._version
            if version == self._persisted_version or self._closed:
                return
            await self._ledger.persist_cursor(self.snapshot())
            self._persisted_version = max(self._persisted_version, version)

    async def close(self) -> None:
        """Persist (durable cursors) and close; later calls raise ``CursorAlreadyClosedError``. Idempotent."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            self._ledger.forget_cursor(self)

    def mark_closed(self) -> None:
        """Close without persisting (the ledger calls it once it has flushed the cursor on its own close)."""
        self._closed = True

    async def invalidate(self) -> None:
        """Close without persisting, once a write of the state in flight has finished: the ledger calls it
        before deleting the cursor's state, so no late write brings the state back."""
        self._closed = True
        if self._persist_lock is not None:
            async with self._persist_lock:
                pass

    def _check_open(self) -> None:
        if self._closed:
            raise CursorAlreadyClosedError(f"cursor {self._name!r} on {self._ledger.name} is closed")

    def __repr__(self) -> str:
        kind = "durable" if self.durable else "non-durable"
        return (
            f"ManagedCursor({self._name!r}, {kind}, read={self.read_position}, "
            f"mark_delete={self._state.mark_delete_position}, ranges={len(self._state.individually_deleted)})"
        )
