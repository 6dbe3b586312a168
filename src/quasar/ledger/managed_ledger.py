"""ManagedLedger: Pulsar's managed ledger on the RocketMQ-style store (Pulsar ``ManagedLedgerImpl``).

Mapping (DESIGN.md): a managed ledger is the store queue ``(name, 0)``; a ledger is a consecutive range of
that queue's offsets (see ``ledger_table``). Ledger ids come from the factory's ``LedgerIdAllocator``; entry
ids restart at 0 in each ledger.

Write path (``add_entry``): roll over if the current ledger is full -> ``store.put`` (synchronous, so
concurrent calls keep their call order and get increasing positions) -> await ``store.wait_flushed`` (the
SYNC group commit's fsync) and, for the first entries of a new ledger, the durable write of the new ledger
row -> receipt. ``last_confirmed_entry`` only moves over entries whose flush completed *and* whose ledger row
is durable, so readers never see an entry a crash could take away or renumber.

Rollover (Pulsar ``currentLedgerIsFull``, semantics.md B1 and gotcha #10): the ledger is full when it holds
``max_entries_per_ledger`` entries or ``max_size_per_ledger_bytes`` bytes, or is older than
``max_ledger_rollover_time_ms``; a full ledger rolls only once older than ``min_ledger_rollover_time_ms`` (at
once when that is 0). The check runs before each put, so the add that fills a ledger is its last entry. A
reopened managed ledger starts a new ledger at its first add (as Pulsar opens a new ledger on every load).

Crash recovery (at construction): ledger rows whose first offset lies past the store's end are dropped (they
were never receipted), the last ledger is sized from the store's max queue offset, and everything the store
recovered counts as confirmed.

Reads live in ``reads`` (``LedgerReadsMixin``), retention and trimming in ``trimming`` (``TrimmingMixin``).

Metadata: ``/managed-ledgers/<name>`` holds the ledger table (``LedgerTable.to_json``); cursors live under
``/cursors/<name>/`` (``cursor_store``).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal

from quasar.errors import QuasarError
from quasar.ledger.ack_state import AckState
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.errors import (
    CursorNotFoundError,
    InvalidEntryError,
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerFlushTimeoutError,
    ManagedLedgerStorageError,
    MetadataError,
    TooManyRequestsError,
)
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.ledger_table import LedgerInfo
from quasar.ledger.ledger_table_store import LEDGER_KEY_PREFIX, QUEUE_ID, LedgerTableStore
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.position import Position
from quasar.ledger.reads import LedgerReadsMixin
from quasar.ledger.trimming import TrimmingMixin
from quasar.storage.status import PutStatus

__all__ = ["LEDGER_KEY_PREFIX", "QUEUE_ID", "InitialPosition", "ManagedLedger"]

log = logging.getLogger(__name__)

_FLUSH_TIMEOUT_STATUSES = frozenset(
    {PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE}
)
_INVALID_ENTRY_STATUSES = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})
_BUSY_STATUSES = frozenset({PutStatus.OS_PAGE_CACHE_BUSY})


class InitialPosition(enum.Enum):
    """Where a new durable cursor starts (Pulsar ``CommandSubscribe.InitialPosition``)."""

    LATEST = "latest"
    EARLIEST = "earliest"


class _State(enum.Enum):
    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"


def _put_error(status: PutStatus, name: str) -> ManagedLedgerError:
    """Map a non-OK RocketMQ PutStatus to the ManagedLedgerError to raise."""
    message = f"store refused an entry of {name}: {status.name}"
    if status in _FLUSH_TIMEOUT_STATUSES:
        return ManagedLedgerFlushTimeoutError(message, status=status.name)
    if status in _INVALID_ENTRY_STATUSES:
        return InvalidEntryError(message, status=status.name)
    if status in _BUSY_STATUSES:
        return TooManyRequestsError(message, status=status.name)
    return ManagedLedgerStorageError(message, status=status.name)


class ManagedLedger(LedgerReadsMixin, TrimmingMixin):
    """One managed ledger (a topic partition's log) on ``store``.

    Arguments: ``name`` (the managed ledger / topic name; also the store topic), ``store`` (a
    ``quasar.storage.message_store.MessageStore`` or ``quasar.testing.fake_store.FakeMessageStore``),
    ``metadata`` (a ``quasar.storage.metadata.MetadataStore``), ``config``, ``ledger_id_allocator`` (shared by
    every managed ledger of the metadata store), ``clock_ms`` (wall clock in ms; injectable for tests).

    Construction opens it: loads the ledger table and the durable cursors (synchronous metadata reads, plus
    one write for a new or repaired table). Raises ``MetadataError`` on unreadable metadata.
    Use on one event loop; ``add_entry`` needs a running loop.
    """

    def __init__(
        self,
        name: str,
        store: Any,
        metadata: Any,
        config: ManagedLedgerConfig,
        ledger_id_allocator: LedgerIdAllocator,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if not name:
            raise ValueError("a managed ledger needs a non-empty name")
        self._name = name
        self._store = store
        self._config = config
        self._allocator = ledger_id_allocator
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._state = _State.OPEN
        self._table_store = LedgerTableStore(metadata, store, name)
        self._cursor_store = CursorStore(metadata, name)
        self._cursors: dict[str, ManagedCursor] = {}
        self._non_durable: weakref.WeakSet[ManagedCursor] = weakref.WeakSet()
        self._reader_ids = itertools.count()
        self._listeners: list[Callable[[], None]] = []
        self._notify_scheduled = False
        self._inflight: set[asyncio.Future[Any]] = set()
        # rows not yet durable: (first queue offset, persist future)
        self._unpersisted: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._flushed_end = 0  # one past the highest queue offset whose flush completed
        self._retention_time_ms = config.retention_time_ms  # -1 = unlimited, 0 = delete once consumed
        self._retention_size_bytes = config.retention_size_bytes
        self._trimming = False
        recovered = self._table_store.recover(self._allocator.allocate, self._clock_ms())
        self._roll_pending = recovered.roll_pending  # a reopened ledger with entries: next add rolls over
        self._current_size = recovered.current_size  # bytes of entry data in the current (last) ledger
        self._table = recovered.table
        self._confirmed_end = self._table.next_offset
        self._flushed_end = self._table.next_offset
        for snapshot in self._cursor_store.load_all().values():
            self._cursors[snapshot.name] = self._restore_cursor(snapshot)

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    @property
    def is_closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def is_fenced(self) -> bool:
        return self._state is _State.FENCED

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """A copy of the ledger rows (oldest first)."""
        return [LedgerInfo(**r.to_json()) for r in self._table]

    @property
    def current_ledger_id(self) -> int:
        return self._table.last.ledger_id

    @property
    def last_confirmed_entry(self) -> Position:
        """The last entry whose flush completed and whose ledger row is durable: readers never see past it.
        ``Position(first ledger id, -1)`` when the managed ledger has no entry."""
        return self._table.position_of(self._confirmed_end - 1)

    @property
    def first_position(self) -> Position:
        """Position of the first readable entry; when there is none, of the next entry to be confirmed."""
        return self._table.position_of(self._first_available_offset())

    @property
    def number_of_entries(self) -> int:
        """Readable (confirmed, not removed by store retention) entries."""
        return max(self._confirmed_end - self._first_available_offset(), 0)

    @property
    def total_size(self) -> int:
        """Bytes of entry data in all ledgers (closed ledgers as recorded, plus the current one)."""
        closed = sum(r.size_bytes or 0 for r in self._table.rows[:-1])
        return closed + self._current_size

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors by name (read-only view)."""
        return self._cursors.copy()

    def _trim_allowed(self) -> bool:
        return self._state is _State.OPEN

    # ------------------------------------------------------------------ positions
    def next_valid_position(self, position: Position) -> Position:
        """Position of the first entry after ``position``; at most the position after the last confirmed
        entry (Pulsar ``getNextValidPosition``)."""
        return self._table.position_of(min(self._table.offset_after(position), self._confirmed_end))

    def position_after(self, position: Position, count: int) -> Position:
        """Position of the ``count``-th entry after ``position`` (``count`` >= 1), at most the last confirmed
        entry (used to skip a number of entries, e.g. backlog eviction)."""
        offset = self._table.offset_after(position) + max(count, 1) - 1
        return self._table.position_of(min(offset, self._confirmed_end - 1))

    def previous_position(self, position: Position) -> Position:
        """Position of the last entry before ``position`` (``(first ledger, -1)`` when none), Pulsar
        ``getPreviousPosition``."""
        return self._table.previous_position(position)

    def is_valid_position(self, position: Position) -> bool:
        """Whether ``position`` names a confirmed entry."""
        offset = self._table.offset_of(position)
        return offset is not None and offset < self._confirmed_end

    # ------------------------------------------------------------------ writes
    async def add_entry(
        self, data: bytes | memoryview, *, properties: Mapping[str, str] | None = None, tag_hash: int = 0
    ) -> Position:
        """Append one entry; returns its Position once it is on disk (SYNC flush) and its ledger is durable.

        The put happens synchronously at call time, so concurrent calls get increasing positions in call
        order. Raises ``ManagedLedgerFlushTimeoutError`` (the entry may still appear later),
        ``InvalidEntryError`` (too large / malformed), ``TooManyRequestsError``, ``ManagedLedgerStorageError``
        (other store failures), ``ManagedLedgerFencedError`` (ledger table not durable) and
        ``ManagedLedgerAlreadyClosedError``, ``MetadataError`` (no ledger id could be reserved for a
        rollover). On any error ``last_confirmed_entry`` does not cover the entry. Cancelling the caller does
        not cancel the append. See :meth:`add_entry_future` for the same without a coroutine.
        """
        return await self.add_entry_future(data, properties=properties, tag_hash=tag_hash)

    def add_entry_future(
        self, data: bytes | memoryview, *, properties: Mapping[str, str] | None = None, tag_hash: int = 0
    ) -> asyncio.Future[Position]:
        """:meth:`add_entry` as a plain future, driven by callbacks: no Task per entry on the publish path.

        The put happens now (on the loop thread); the future resolves with the Position, or with one of the
        errors listed on :meth:`add_entry`, once the flush covering the entry (and the ledger's table row)
        is durable. Futures of successive calls resolve in call order.
        """
        result: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        try:
            position, flushed, row_future = self._append(data, properties, tag_hash)
        except ManagedLedgerError as exc:
            result.set_exception(exc)
            return result

        def finish(row: asyncio.Future[Any] | None) -> None:
            if result.done():
                return
            if row is not None and (row.cancelled() or row.exception() is not None):
                result.set_exception(
                    ManagedLedgerFencedError(
                        f"{self._name}: the ledger of {position} could not be made durable"
                    )
                )
            else:
                result.set_result(position)

        def on_flushed(future: asyncio.Future[Any]) -> None:
            if result.done():
                return
            if future.cancelled():
                result.set_exception(ManagedLedgerStorageError(f"store flush of {self._name} was cancelled"))
                return
            exc = future.exception()
            if exc is not None:
                error = (
                    ManagedLedgerStorageError(f"store failed to flush {self._name}: {exc}")
                    if isinstance(exc, QuasarError)
                    else exc
                )
                result.set_exception(error)
                return
            status = future.result()
            if status is not PutStatus.PUT_OK:
                result.set_exception(_put_error(status, self._name))
            elif row_future is not None and not row_future.done():
                row_future.add_done_callback(finish)
            else:
                finish(row_future)

        flushed.add_done_callback(on_flushed)
        return result

    def _append(
        self, data: bytes | memoryview, properties: Mapping[str, str] | None, tag_hash: int
    ) -> tuple[Position, asyncio.Future[Any], asyncio.Future[Any] | None]:
        """The synchronous half of an append: put into the store and register the flush wait.

        Returns (position, flush future, the pending ledger-table-row future or None); raises
        ManagedLedgerError subclasses when nothing was appended."""
        self._check_writable()
        if self._should_roll():
            self._roll()
        try:
            result = self._store.put(self._name, QUEUE_ID, data, properties=properties, tag_hash=tag_hash)
        except QuasarError as exc:
            raise ManagedLedgerStorageError(f"store failed to append to {self._name}: {exc}") from exc
        if result.status is not PutStatus.PUT_OK:
            raise _put_error(result.status, self._name)
        table = self._table
        offset = result.queue_offset
        if offset < table.next_offset:
            self._fence(f"store returned queue offset {offset}, expected {table.next_offset}")
            raise ManagedLedgerFencedError(f"{self._name}: store queue offsets went backwards")
        table.next_offset = offset + 1
        self._current_size += len(data)
        last = table.last
        position = Position(last.ledger_id, offset - last.first_queue_offset)
        try:
            flushed = asyncio.ensure_future(
                self._store.wait_flushed(result.commit_log_offset + result.wrote_bytes)
            )
        except QuasarError as exc:
            raise ManagedLedgerStorageError(f"store failed to flush {self._name}: {exc}") from exc
        self._inflight.add(flushed)
        flushed.add_done_callback(functools.partial(self._on_flushed, offset))
        row_future = self._unpersisted[-1][1] if self._unpersisted else None
        return position, flushed, row_future

    def _should_roll(self) -> bool:
        table = self._table
        entries = table.next_offset - table.last.first_queue_offset
        if entries == 0:
            return False
        if self._roll_pending:
            return True
        config = self._config
        age_ms = self._clock_ms() - table.last.created_ms
        full = (
            entries >= config.max_entries_per_ledger
            or self._current_size >= config.max_size_per_ledger_bytes
            or age_ms >= config.max_ledger_rollover_time_ms
        )
        if not full:
            return False
        return config.min_ledger_rollover_time_ms == 0 or age_ms > config.min_ledger_rollover_time_ms

    def _roll(self) -> None:
        """Close the current ledger and start a new one at the next queue offset; its row is written in the
        background and awaited by the adds that land in it."""
        table = self._table
        ledger_id = self._allocator.allocate()
        closing = table.last
        closing.entries = table.next_offset - closing.first_queue_offset
        closing.size_bytes = self._current_size
        table.append(LedgerInfo(ledger_id, table.next_offset, self._clock_ms()))
        self._current_size = 0
        self._roll_pending = False
        persisted = asyncio.ensure_future(self._persist_table(table.next_offset))
        self._track(persisted)
        self._unpersisted.append((table.next_offset, persisted))
        log.info("%s: rolled over to ledger %d at queue offset %d", self._name, ledger_id, table.next_offset)

    async def _persist_table(self, first_offset: int) -> None:
        previous = [fut for first, fut in self._unpersisted if first < first_offset]
        if previous:  # one writer at a time, in order: each write covers every row created so far
            await asyncio.gather(*previous, return_exceptions=True)
        try:
            await self._table_store.write(self._table)
        except MetadataError as exc:
            self._fence(str(exc))
            raise
        while self._unpersisted and self._unpersisted[0][0] <= first_offset:
            self._unpersisted.popleft()
        self._update_confirmed()

    def _on_flushed(self, offset: int, future: asyncio.Future[Any]) -> None:
        self._inflight.discard(future)
        if future.cancelled() or future.exception() is not None:
            return
        if future.result() is not PutStatus.PUT_OK:
            return
        if offset + 1 > self._flushed_end:
            self._flushed_end = offset + 1
            self._update_confirmed()

    def _update_confirmed(self) -> None:
        limit = self._flushed_end
        if self._unpersisted:
            limit = min(limit, self._unpersisted[0][0])
        if limit > self._confirmed_end:
            self._confirmed_end = limit
            if self._listeners and not self._notify_scheduled:
                self._notify_scheduled = True
                asyncio.get_running_loop().call_soon(self._notify_listeners)

    def _notify_listeners(self) -> None:
        self._notify_scheduled = False
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("%s: entries listener %r failed", self._name, callback)

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the event loop when ``last_confirmed_entry`` advances (coalesced: at most
        once per loop iteration, so once per flush round). Exceptions are logged, not raised."""
        self._listeners.append(callback)

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no error if it was not registered)."""
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _track(self, future: asyncio.Future[Any]) -> None:
        self._inflight.add(future)
        future.add_done_callback(self._untrack)

    def _untrack(self, future: asyncio.Future[Any]) -> None:
        self._inflight.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved here: the adds that care re-raise it themselves

    def _fence(self, reason: str) -> None:
        if self._state is _State.OPEN:
            log.error("%s: fenced: %s", self._name, reason)
            self._state = _State.FENCED

    def _check_writable(self) -> None:
        if self._state is _State.CLOSED:
            raise ManagedLedgerAlreadyClosedError(f"managed ledger {self._name} is closed")
        if self._state is _State.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self._name} is fenced; close and reopen it")

    # ------------------------------------------------------------------ cursors
    def open_cursor(
        self,
        name: str,
        initial_position: Literal["earliest", "latest"] | InitialPosition = InitialPosition.LATEST,
    ) -> ManagedCursor:
        """The durable cursor ``name``: an existing one resumes from its persisted state; a new one starts at
        the end (``latest``: mark-delete = last confirmed entry) or before the first entry (``earliest``), and
        its state is written at once (one small metadata write) so the subscription survives a crash.
        Raises ``ManagedLedgerAlreadyClosedError``, ``MetadataError``, ``ValueError`` for a bad position."""
        if self._state is _State.CLOSED:
            raise ManagedLedgerAlreadyClosedError(f"managed ledger {self._name} is closed")
        if not name:
            raise ValueError("a durable cursor needs a non-empty name")
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        initial = InitialPosition(initial_position)
        snapshot = self._cursor_store.load(name)  # a cursor closed earlier keeps its persisted state
        if snapshot is not None:
            cursor = self._restore_cursor(snapshot)
            self._cursors[name] = cursor
            return cursor
        if initial is InitialPosition.LATEST:
            mark_delete = self.last_confirmed_entry
        else:
            mark_delete = self._table.position_of(self._first_available_offset() - 1)
        cursor = self._make_cursor(name, AckState(mark_delete), durable=True)
        cursor._persist_now()
        self._cursors[name] = cursor
        return cursor

    def new_non_durable_cursor(
        self, start: Position | None = None, *, inclusive: bool = True
    ) -> ManagedCursor:
        """A cursor that persists nothing (readers, Pulsar ``NonDurableCursorImpl``). Its first read is
        ``start`` (``inclusive``) or the entry after it; ``None`` starts after the last confirmed entry."""
        if self._state is _State.CLOSED:
            raise ManagedLedgerAlreadyClosedError(f"managed ledger {self._name} is closed")
        table = self._table
        if start is None:
            read_offset = self._confirmed_end
        elif inclusive:
            read_offset = table.ceil_offset(start)
        else:
            read_offset = table.offset_after(start)
        mark_delete = table.position_of(max(read_offset, table.first_offset) - 1)
        name = f"reader-{next(self._reader_ids)}"
        cursor = ManagedCursor(
            self, name, AckState(mark_delete), read_offset, store=None, max_ranges_to_persist=0
        )
        self._non_durable.add(cursor)
        return cursor

    def _restore_cursor(self, snapshot: CursorSnapshot) -> ManagedCursor:
        state = AckState(snapshot.mark_delete_position, snapshot.range_set(), snapshot.batch_deleted_map())
        cursor = self._make_cursor(snapshot.name, state, durable=True)
        cursor._properties = dict(snapshot.properties)
        cursor._mark_persisted()
        return cursor

    def _make_cursor(self, name: str, state: AckState, *, durable: bool) -> ManagedCursor:
        return ManagedCursor(
            self,
            name,
            state,
            self._table.offset_after(state.mark_delete_position),
            store=self._cursor_store if durable else None,
            max_ranges_to_persist=self._config.max_unacked_ranges_to_persist,
            max_batch_entries_to_persist=self._config.max_batch_deleted_index_to_persist,
        )

    async def delete_cursor(self, name: str) -> None:
        """Close durable cursor ``name`` and remove its persisted state. Raises ``CursorNotFoundError``."""
        cursor = self._cursors.pop(name, None)
        if cursor is None:
            raise CursorNotFoundError(f"no cursor {name!r} on {self._name}")
        cursor._mark_closed()
        await self._cursor_store.delete(name)

    def _forget_cursor(self, cursor: ManagedCursor) -> None:
        if self._cursors.get(cursor.name) is cursor:
            del self._cursors[cursor.name]
        self._non_durable.discard(cursor)

    async def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed. Errors are logged; the cursor stays dirty."""
        for cursor in list(self._cursors.values()):
            if cursor.is_dirty and not cursor.is_closed:
                try:
                    await cursor.flush()
                except MetadataError:
                    log.exception("%s: cannot persist cursor %s", self._name, cursor.name)

    # ------------------------------------------------------------------ close
    async def close(self) -> None:
        """Wait for in-flight adds, persist every durable cursor and the closing ledger's size, then refuse
        further use (``ManagedLedgerAlreadyClosedError``). Idempotent. Raises ``MetadataError`` when the
        final writes fail (the ledger is closed anyway)."""
        if self._state is _State.CLOSED:
            return
        was_open = self._state is _State.OPEN
        self._state = _State.CLOSED
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        errors: list[BaseException] = []
        for cursor in list(self._cursors.values()):
            try:
                await cursor.flush()
            except MetadataError as exc:
                errors.append(exc)
            cursor._mark_closed()
        for cursor in list(self._non_durable):
            cursor._mark_closed()
        if was_open:
            last = self._table.last
            last.entries = self._table.next_offset - last.first_queue_offset
            last.size_bytes = self._current_size
            try:
                await self._table_store.write(self._table)
            except MetadataError as exc:
                errors.append(exc)
        self._listeners.clear()
        if errors:
            raise errors[0]

    async def wait_idle(self) -> None:
        """Wait until every add and ledger-row write in flight has finished (tests, orderly shutdown)."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def __repr__(self) -> str:
        return (
            f"ManagedLedger({self._name!r}, state={self._state.value}, ledgers={len(self._table)}, "
            f"last_confirmed={self.last_confirmed_entry})"
        )
