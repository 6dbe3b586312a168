"""ManagedLedger: Pulsar's managed ledger on the RocketMQ-style store (Pulsar ``ManagedLedgerImpl``).

Mapping (DESIGN.md): a managed ledger is the store queue ``(name, 0)``; a ledger is a consecutive range of
that queue's offsets (see ``ledger_table``). Ledger ids come from the factory's ``LedgerIdAllocator``; entry
ids restart at 0 in each ledger.

Write path (``add_entry``; ``add_entry_callback`` on the publish path): ``writer.LedgerWriter`` rolls over if
the current ledger is full, puts the entry into the store (synchronous, so concurrent calls keep their call
order and get increasing positions) and is called back by ``store.on_flushed`` after the SYNC group commit's
fsync (no future per entry); for the first entries of a new ledger it also waits for the durable write of the
new ledger row. ``last_confirmed_entry`` only moves over entries whose flush completed *and* whose ledger row
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

Composed of ``LedgerWriter`` (``writer``), ``LedgerReader`` (``reads``), ``LedgerTrimmer`` (``trimming``:
retention), ``LedgerCursors`` (``cursors``: the cursor registry) and ``LedgerTableStore``. Cursors use only the
public read/visibility API (``table``, ``confirmed_end_offset``, ``first_available_offset``,
``read_from_offset``, ``persist_cursor``, ``forget_cursor``: the ``CursorLedger`` protocol). Metadata paths:
``paths``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Literal

from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.cursors import InitialPosition, LedgerCursors
from quasar.ledger.entry import DEFAULT_READ_MAX_BYTES, Entry
from quasar.ledger.errors import (
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
    MetadataError,
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
from quasar.ledger.writer import AddEntryCallback, LedgerWriter
from quasar.metadata.port import MetadataStore
from quasar.storage.port import MessageStorePort

__all__ = ["QUEUE_ID", "AddEntryCallback", "InitialPosition", "ManagedLedger"]

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
        self._table = recovered.table
        self._writer = LedgerWriter(
            name,
            store,
            config,
            ledger_id_allocator,
            table_store=table_store,
            listeners=self._listeners,
            recovered=recovered,
            clock_ms=clock_ms,
            guard=self,
        )
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
        new: bool = False,
    ) -> ManagedLedger:
        """Open managed ledger ``name`` (also the store topic), creating it when new: read its ledger table
        (written back when new or repaired after a crash) and its durable cursors from ``metadata``.

        ``new=True`` (the factory lists no ledger of that name): nothing is read first; the table is written
        once with "must not exist yet" and the ledger starts without cursors (one metadata round trip instead
        of three). Should the table exist after all, it is read and reconciled as without ``new``.

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
        cursor_store = CursorStore(metadata, name)
        snapshots: Mapping[str, CursorSnapshot] = {}
        if new:
            recovered = await table_store.create(ledger_id_allocator.allocate_async, clock())
            if table_store.existed:  # the table was there after all: so may its cursors be
                snapshots = await cursor_store.load_all()
        else:
            recovered = await table_store.recover(ledger_id_allocator.allocate_async, clock())
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
    def is_terminated(self) -> bool:
        """Terminated (:meth:`terminate`): no more entries, ever; reads go on."""
        return self._table.terminated

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
        return self._table.position_of(self._writer.confirmed_end - 1)

    @property
    def first_position(self) -> Position:
        """Position of the first readable entry; when there is none, of the next entry to be confirmed."""
        return self._table.position_of(self._reader.first_available_offset())

    @property
    def number_of_entries(self) -> int:
        """Readable (confirmed, not removed by store retention) entries."""
        return max(self._writer.confirmed_end - self._reader.first_available_offset(), 0)

    @property
    def total_size(self) -> int:
        """Bytes of entry data in all ledgers (closed ledgers as recorded, plus the current one)."""
        closed = sum(r.size_bytes or 0 for r in self._table.rows[:-1])
        return closed + self._writer.current_size

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
        return self._writer.confirmed_end

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

    def read_matching(
        self,
        queue_offset: int,
        max_entries: int,
        tag_hashes: frozenset[int] | None,
        max_scan: int,
        max_bytes: int,
    ) -> tuple[list[Entry], int]:
        """Confirmed entries from ``queue_offset`` whose tag hash is in ``tag_hashes`` (None: all), filtered on
        the consume queue without reading skipped records, at most ``max_scan`` units examined; returns them
        and the offset after the last unit examined (:meth:`LedgerReader.read_matching`)."""
        return self._reader.read_matching(queue_offset, max_entries, tag_hashes, max_scan, max_bytes)

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
        return self._table.position_of(min(self._table.offset_after(position), self._writer.confirmed_end))

    def position_after(self, position: Position, count: int) -> Position:
        """Position of the ``count``-th entry after ``position`` (``count`` >= 1), at most the last confirmed
        entry (used to skip a number of entries, e.g. backlog eviction)."""
        offset = self._table.offset_after(position) + max(count, 1) - 1
        return self._table.position_of(min(offset, self._writer.confirmed_end - 1))

    def previous_position(self, position: Position) -> Position:
        """The last entry before ``position`` (``(first ledger, -1)`` if none; Pulsar ``getPreviousPosition``)."""
        return self._table.previous_position(position)

    def is_valid_position(self, position: Position) -> bool:
        """Whether ``position`` names a confirmed entry."""
        offset = self._table.offset_of(position)
        return offset is not None and offset < self._writer.confirmed_end

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
        """:meth:`add_entry` as a plain future (no Task): ``LedgerWriter.add_entry_future``."""
        return self._writer.add_entry_future(data, properties=properties, tag_hash=tag_hash)

    def add_entry_callback(
        self,
        data: bytes | memoryview,
        callback: AddEntryCallback,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """:meth:`add_entry` for the publish path, with no future or task per entry (Pulsar's
        ``asyncAddEntry(data, AddEntryCallback, ctx)``; ``LedgerWriter.add_entry_callback``):
        ``callback(position, None)`` once the entry and its ledger row are durable, ``callback(None, error)``
        with one of the errors listed on :meth:`add_entry` otherwise; exactly once, on the loop thread, never
        before this returns, in call order."""
        self._writer.add_entry_callback(data, callback, properties=properties, tag_hash=tag_hash)

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the event loop when ``last_confirmed_entry`` advances (coalesced: at most
        once per loop iteration, so once per flush round). Exceptions are logged, not raised."""
        self._listeners.add(callback)

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no error if it was not registered)."""
        self._listeners.remove(callback)

    def fence(self, reason: str) -> None:
        """Refuse further writes (the ledger table moved under this owner, or the store went backwards): a
        fenced ledger must be closed and reopened (Pulsar ``ManagedLedgerFencedException``)."""
        if self._state is _State.OPEN:
            log.error("%s: fenced: %s", self._name, reason)
            self._state = _State.FENCED

    def check_writable(self) -> None:
        """Raise ``ManagedLedgerAlreadyClosedError``, ``ManagedLedgerFencedError`` or
        ``ManagedLedgerTerminatedError`` unless writes are allowed."""
        self._check_not_closed()
        if self._state is _State.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self._name} is fenced; close and reopen it")
        if self._table.terminated:
            raise ManagedLedgerTerminatedError(f"managed ledger {self._name} was terminated")

    async def terminate(self) -> Position:
        """Take no more entries, for good (Pulsar ``ManagedLedgerImpl.asyncTerminate``): new adds fail with
        ``ManagedLedgerTerminatedError`` at once, adds in flight finish, then the ledger table is written with
        the terminated mark (so it survives restarts and travels to replicas with the metadata). Returns the
        last entry's position (``(ledger, -1)`` when the ledger holds none). Idempotent. Raises
        ``ManagedLedgerAlreadyClosedError``, ``ManagedLedgerFencedError``, ``MetadataError`` (the mark is then
        withdrawn: the ledger takes entries again, as before the call)."""
        self._check_not_closed()
        if self._state is _State.FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self._name} is fenced; close and reopen it")
        if not self._table.terminated:
            self._table.terminated = True
            await self._writer.wait_idle()
            try:
                await self._table_store.write(self._table)
            except ManagedLedgerFencedError as exc:
                self._table.terminated = False
                self.fence(str(exc))
                raise
            except MetadataError:
                self._table.terminated = False
                raise
            log.info("%s: terminated at %s", self._name, self.last_confirmed_entry)
        return self.last_confirmed_entry

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

    @property
    def has_dirty_cursors(self) -> bool:
        """Some durable cursor has state :meth:`flush_cursors` would persist."""
        return self._cursors.any_dirty

    @property
    def may_trim(self) -> bool:
        """Open with more than one ledger: :meth:`trim_ledgers` may have something to delete (the current
        ledger never goes)."""
        return self._state is _State.OPEN and len(self._table) > 1

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
        return self._cursors.slowest_read_bound(self._writer.confirmed_end)

    def trim_candidate(self) -> int | None:
        """The trim bound (:meth:`trim_bound`) when :meth:`trim_ledgers` would delete a ledger now, else None;
        cheap when nothing it depends on changed since the last check that found nothing
        (``LedgerTrimmer.bound_to_trim``). For the factory's background round."""
        if self._state is not _State.OPEN or len(self._table) < 2:
            return None
        writer = self._writer
        return self._trimmer.bound_to_trim(
            self._cursors.trim_inputs(writer.confirmed_end), self.trim_bound, lambda: self.total_size
        )

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
            self.fence(str(exc))
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
        await self._writer.wait_idle()
        errors: list[ManagedLedgerError] = list(await self._cursors.close_all())
        if was_open:
            last = self._table.last
            last.entries = self._table.next_offset - last.first_queue_offset
            last.size_bytes = self._writer.current_size
            try:
                await self._table_store.write(self._table)
            except (MetadataError, ManagedLedgerFencedError) as exc:
                errors.append(exc)
        self._listeners.clear()
        if errors:
            raise errors[0]

    @property
    def has_pending_work(self) -> bool:
        """An add awaits its flush (or replication), or a ledger-table write is in flight: closing now would
        have to wait for it (the broker does not unload such a ledger as idle)."""
        return self._writer.busy

    async def wait_idle(self) -> None:
        """Wait until every add and ledger-row write in flight has finished (tests, orderly shutdown)."""
        await self._writer.wait_idle()

    def __repr__(self) -> str:
        return (
            f"ManagedLedger({self._name!r}, state={self._state.value}, ledgers={len(self._table)}, "
            f"last_confirmed={self.last_confirmed_entry})"
        )


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
