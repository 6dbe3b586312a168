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
A rollover takes a ledger id the allocator reserved earlier and never waits for the metadata store; when none
is reserved at that moment, the current ledger takes the entry and a later add rolls over.

Opening (``await ManagedLedger.open(...)``, normally through the factory) reads the ledger table and the
durable cursors through the async metadata port and reconciles the table with the store (``ledger_table_store``:
rows past the store's end are dropped, the last ledger is sized from the store; everything the store recovered
counts as confirmed).

Composed of ``LedgerReader`` (``reads``), ``LedgerTrimmer`` (``trimming``: retention), ``LedgerCursors``
(``cursors``: the cursor registry) and ``LedgerTableStore``. Cursors use only the public read/visibility API
(``table``, ``confirmed_end_offset``, ``first_available_offset``, ``read_from_offset``, ``persist_cursor``,
``forget_cursor``: the ``CursorLedger`` protocol). Metadata paths: ``paths``.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal

from quasar.errors import QuasarError
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.cursors import InitialPosition, LedgerCursors
from quasar.ledger.entry import DEFAULT_READ_MAX_BYTES, Entry
from quasar.ledger.errors import (
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerStorageError,
    MetadataError,
    put_status_error,
)
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.ledger_table import LedgerInfo, LedgerTableView
from quasar.ledger.ledger_table_store import LedgerTableStore, RecoveredTable
from quasar.ledger.listeners import EntriesListeners
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.paths import QUEUE_ID
from quasar.ledger.position import Position
from quasar.ledger.reads import LedgerReader
from quasar.ledger.trimming import LedgerTrimmer
from quasar.metadata.port import MetadataStore
from quasar.storage.port import MessageStorePort
from quasar.storage.status import PutStatus

__all__ = ["QUEUE_ID", "InitialPosition", "ManagedLedger"]

log = logging.getLogger(__name__)


class _State(enum.Enum):
    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"


class ManagedLedger:
    """One managed ledger (a topic partition's log) on the message store port.

    Open it with ``await ManagedLedger.open(...)`` (or through ``ManagedLedgerFactory.open``); the
    constructor takes what ``open`` loaded and does no I/O. Use on one event loop; ``add_entry`` needs a
    running loop.
    """

    def __init__(
        self,
        name: str,
        store: MessageStorePort,
        config: ManagedLedgerConfig,
        ledger_id_allocator: LedgerIdAllocator,
        *,
        table_store: LedgerTableStore,
        cursor_store: CursorStore,
        recovered: RecoveredTable,
        cursor_snapshots: Mapping[str, CursorSnapshot],
        clock_ms: Callable[[], int],
    ) -> None:
        """Arguments as :meth:`open`, plus what it loaded: ``table_store`` and ``recovered`` (the ledger
        table, reconciled with the store), ``cursor_store`` and ``cursor_snapshots`` (durable cursors)."""
        self._name = name
        self._store = store
        self._config = config
        self._allocator = ledger_id_allocator
        self._clock_ms = clock_ms
        self._state = _State.OPEN
        self._table_store = table_store
        self._listeners = EntriesListeners(name)
        self._inflight: set[asyncio.Future[Any]] = set()
        # rows not yet durable: (first queue offset, persist future)
        self._unpersisted: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._roll_pending = recovered.roll_pending  # a reopened ledger with entries: next add rolls over
        self._roll_delayed = False  # a rollover found no reserved ledger id (logged once)
        self._current_size = recovered.current_size  # bytes of entry data in the current (last) ledger
        self._table = recovered.table
        self._confirmed_end = self._table.next_offset
        self._flushed_end = self._table.next_offset  # one past the highest offset whose flush completed
        self._reader = LedgerReader(name, store, self._table, self)
        self._trimmer = LedgerTrimmer(name, store, self._table, table_store, clock_ms, config)
        self._cursors = LedgerCursors(self, cursor_store, config, cursor_snapshots)

    @classmethod
    async def open(
        cls,
        name: str,
        store: MessageStorePort,
        metadata: MetadataStore,
        config: ManagedLedgerConfig,
        ledger_id_allocator: LedgerIdAllocator,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> ManagedLedger:
        """Open managed ledger ``name`` (also the store topic), creating it when new: read its ledger table
        (written back when new or repaired after a crash) and its durable cursors from ``metadata``.

        ``ledger_id_allocator`` is shared by every managed ledger of the metadata store; ``clock_ms`` gives
        wall-clock ms (injectable for tests). Raises ``ValueError`` for an empty name, ``MetadataError`` when
        the metadata store fails or holds data that cannot be parsed, ``ManagedLedgerFencedError`` when
        another owner wrote the ledger table meanwhile.
        """
        if not name:
            raise ValueError("a managed ledger needs a non-empty name")
        clock = clock_ms or _wall_clock_ms
        await ledger_id_allocator.start()  # ids for the first rollover (no metadata access once started)
        table_store = LedgerTableStore(metadata, store, name)
        recovered = await table_store.recover(ledger_id_allocator.allocate_async, clock())
        cursor_store = CursorStore(metadata, name)
        snapshots = await cursor_store.load_all()
        return cls(
            name,
            store,
            config,
            ledger_id_allocator,
            table_store=table_store,
            cursor_store=cursor_store,
            recovered=recovered,
            cursor_snapshots=snapshots,
            clock_ms=clock,
        )

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
        return self._table.position_of(self._reader.first_available_offset())

    @property
    def number_of_entries(self) -> int:
        """Readable (confirmed, not removed by store retention) entries."""
        return max(self._confirmed_end - self._reader.first_available_offset(), 0)

    @property
    def total_size(self) -> int:
        """Bytes of entry data in all ledgers (closed ledgers as recorded, plus the current one)."""
        closed = sum(r.size_bytes or 0 for r in self._table.rows[:-1])
        return closed + self._current_size

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors by name (a copy)."""
        return self._cursors.durable

    # ------------------------------------------------------------------ read/visibility API (cursors)
    @property
    def table(self) -> LedgerTableView:
        """Read-only view of the ledger table (Position <-> queue offset); it changes as the ledger rolls
        over and trims, so keep the view, not values read from it."""
        return self._table

    @property
    def confirmed_end_offset(self) -> int:
        """One past the queue offset of the last confirmed entry: reads stop before it."""
        return self._confirmed_end

    @property
    def first_available_offset(self) -> int:
        """Queue offset of the first entry still held (past what trimming and store retention removed)."""
        return self._reader.first_available_offset()

    def read_from_offset(
        self, queue_offset: int, max_entries: int, max_bytes: int
    ) -> tuple[list[Entry], int]:
        """Up to ``max_entries`` confirmed entries (about ``max_bytes``, at least one) from ``queue_offset``,
        skipping forward over entries the store removed; returns them and the queue offset to read next.
        Raises ``ManagedLedgerStorageError`` when the store fails."""
        return self._reader.read_offsets(queue_offset, max_entries, max_bytes)

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_READ_MAX_BYTES
    ) -> list[Entry]:
        """Up to ``max_entries`` confirmed entries from ``start`` (or the first entry after it when it names
        none), within about ``max_bytes`` (at least one entry is returned). ``[]`` when none. Raises
        ``ValueError`` for ``max_entries < 1``, ``ManagedLedgerStorageError``."""
        return self._reader.read_entries(start, max_entries, max_bytes)

    def get_entry(self, position: Position) -> Entry | None:
        """The confirmed entry at ``position``, or None when there is none (or the store no longer has it)."""
        return self._reader.get_entry(position)

    def find_newest_matching(self, condition: Callable[[Entry], bool]) -> Position | None:
        """The last confirmed entry for which ``condition`` holds, assuming it holds for a prefix of the
        ledger (binary search; Pulsar ``asyncFindNewestMatching``). None if no entry matches."""
        return self._reader.find_newest_matching(condition)

    async def persist_cursor(self, snapshot: CursorSnapshot) -> None:
        """Write a durable cursor's state (``ManagedCursor.flush`` calls it). Raises ``MetadataError``."""
        await self._cursors.persist(snapshot)

    def forget_cursor(self, cursor: ManagedCursor) -> None:
        """Unregister ``cursor`` (``ManagedCursor.close`` calls it); a durable cursor's state stays."""
        self._cursors.forget(cursor)

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
        """The last entry before ``position`` (``(first ledger, -1)`` if none; Pulsar ``getPreviousPosition``)."""
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
        ``ManagedLedgerAlreadyClosedError``. On any error ``last_confirmed_entry`` does not cover the entry.
        Cancelling the caller does not cancel the append. See :meth:`add_entry_future` for the same without a coroutine.
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
                result.set_exception(put_status_error(status, self._name))
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
            raise put_status_error(result.status, self._name)
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
        background and awaited by the adds that land in it. Without a reserved ledger id (the allocator's
        refill has not landed yet) the current ledger stays open and a later add rolls over."""
        table = self._table
        ledger_id = self._allocator.allocate()
        if ledger_id is None:
            if not self._roll_delayed:
                self._roll_delayed = True
                log.warning("%s: no ledger id reserved yet; the rollover waits for a later add", self._name)
            return
        self._roll_delayed = False
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
        # the table store's (FIFO) lock runs the writes in call order; each covers every row created so far
        try:
            await self._table_store.write(self._table)
        except (MetadataError, ManagedLedgerFencedError) as exc:
            self._fence(str(exc))
            raise
        while self._unpersisted and self._unpersisted[0][0] <= first_offset:
            self._unpersisted.popleft()
        self._update_confirmed()

    def _on_flushed(self, offset: int, future: asyncio.Future[Any]) -> None:
        self._inflight.discard(future)
        if future.cancelled() or future.exception() is not None or future.result() is not PutStatus.PUT_OK:
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
            self._listeners.notify()

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the event loop when ``last_confirmed_entry`` advances (coalesced: at most
        once per loop iteration, so once per flush round). Exceptions are logged, not raised."""
        self._listeners.add(callback)

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no error if it was not registered)."""
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
        self._check_not_closed()
        if self._state is _State.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self._name} is fenced; close and reopen it")

    # ------------------------------------------------------------------ cursors
    async def open_cursor(
        self,
        name: str,
        initial_position: Literal["earliest", "latest"] | InitialPosition = InitialPosition.LATEST,
    ) -> ManagedCursor:
        """The durable cursor ``name``: an existing one resumes from its persisted state; a new one starts at
        the end (``latest``: mark-delete = last confirmed entry) or before the first entry (``earliest``), and
        its state is written (awaited, one small metadata write) before it is returned, so the subscription
        survives a crash. Concurrent opens of one name share one open (Pulsar ``asyncOpenCursor``).
        Raises ``ManagedLedgerAlreadyClosedError``, ``MetadataError``, ``ValueError`` for an empty name or a
        bad position."""
        self._check_not_closed()
        if not name:
            raise ValueError("a durable cursor needs a non-empty name")
        return await self._cursors.open(name, InitialPosition(initial_position))

    def new_non_durable_cursor(
        self, start: Position | None = None, *, inclusive: bool = True
    ) -> ManagedCursor:
        """A cursor that persists nothing (readers, Pulsar ``NonDurableCursorImpl``). Its first read is
        ``start`` (``inclusive``) or the entry after it; ``None`` starts after the last confirmed entry.
        Raises ``ManagedLedgerAlreadyClosedError``."""
        self._check_not_closed()
        return self._cursors.new_non_durable(start, inclusive=inclusive)

    async def delete_cursor(self, name: str) -> None:
        """Close durable cursor ``name`` and remove its persisted state (Pulsar ``asyncDeleteCursor``).
        Raises ``CursorNotFoundError``, ``MetadataError``."""
        await self._cursors.delete(name)

    async def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed. Errors are logged; the cursor stays dirty."""
        await self._cursors.flush_all()

    def _check_not_closed(self) -> None:
        if self._state is _State.CLOSED:
            raise ManagedLedgerAlreadyClosedError(f"managed ledger {self._name} is closed")

    # ------------------------------------------------------------------ retention and trimming
    def set_retention(self, retention_time_ms: int, retention_size_bytes: int) -> None:
        """Retention of consumed ledgers (Pulsar retention policy): keep a consumed ledger while it closed less
        than ``retention_time_ms`` ago and while the ledgers left would not exceed ``retention_size_bytes``; -1
        = unlimited, 0 = none. Raises ``ValueError`` below -1."""
        self._trimmer.set_retention(retention_time_ms, retention_size_bytes)

    @property
    def retention(self) -> tuple[int, int]:
        """(retention_time_ms, retention_size_bytes)."""
        return self._trimmer.retention

    def trim_bound(self) -> int:
        """Queue offset of the first entry some durable cursor still needs (the slowest mark-delete + 1), or
        the confirmed end when there is no durable cursor (Pulsar ``getSlowestReaderPosition``)."""
        return self._cursors.slowest_read_bound(self._confirmed_end)

    async def trim_ledgers(self, bound: int | None = None) -> list[int]:
        """Delete the oldest ledgers wholly below queue offset ``bound`` that retention no longer keeps
        (``LedgerTrimmer.trim``; the current ledger never goes). ``bound`` defaults to :meth:`trim_bound`; pass
        one taken *before* the cursors were persisted so a crash never restores a cursor into a deleted
        ledger. Returns the deleted ledger ids (``[]`` unless open). Raises ``MetadataError``,
        ``ManagedLedgerStorageError``, ``ManagedLedgerFencedError`` (another owner wrote the table: the ledger
        is fenced)."""
        if self._state is not _State.OPEN:
            return []
        if bound is None:
            bound = self.trim_bound()
        try:
            return await self._trimmer.trim(bound, self.total_size)
        except ManagedLedgerFencedError as exc:
            self._fence(str(exc))
            raise

    # ------------------------------------------------------------------ close
    async def close(self) -> None:
        """Wait for in-flight adds, persist every durable cursor and the closing ledger's size, then refuse
        further use (``ManagedLedgerAlreadyClosedError``). A fenced ledger does not write its table. Idempotent.
        Raises ``MetadataError`` (or ``ManagedLedgerFencedError``) when the final writes fail (the ledger is
        closed anyway)."""
        if self._state is _State.CLOSED:
            return
        was_open = self._state is _State.OPEN
        self._state = _State.CLOSED
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        errors: list[ManagedLedgerError] = list(await self._cursors.close_all())
        if was_open:
            last = self._table.last
            last.entries = self._table.next_offset - last.first_queue_offset
            last.size_bytes = self._current_size
            try:
                await self._table_store.write(self._table)
            except (MetadataError, ManagedLedgerFencedError) as exc:
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


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
