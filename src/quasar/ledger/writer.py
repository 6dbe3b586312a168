"""LedgerWriter: the write path of one managed ledger (Pulsar ``ManagedLedgerImpl.asyncAddEntry`` and
``OpAddEntry``), composed into :class:`~quasar.ledger.managed_ledger.ManagedLedger`.

An add rolls over if the current ledger is full, puts the entry into the store (synchronous, so concurrent
adds keep their call order and get increasing positions) and registers ``store.on_flushed``: one callback per
entry, no future or task, called after the SYNC group commit's fsync. The add is answered when its flush is
done and, for the first entries of a new ledger, once the new ledger row is durable. ``confirmed_end`` only
moves over entries whose flush completed *and* whose ledger row is durable, so readers never see an entry a
crash could take away or renumber; the listeners are told when it moves.

Rollover (Pulsar ``currentLedgerIsFull``, semantics.md B1 and gotcha #10) is described in the managed
ledger's docstring. The writer asks its ``guard`` (the managed ledger) whether writes are allowed and tells it
to fence itself when the store or the ledger table went wrong.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from quasar.errors import QuasarError
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerStorageError,
    MetadataError,
    put_status_error,
)
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.ledger_table import LedgerInfo
from quasar.ledger.ledger_table_store import LedgerTableStore, RecoveredTable
from quasar.ledger.listeners import EntriesListeners
from quasar.ledger.paths import QUEUE_ID
from quasar.ledger.position import Position
from quasar.storage.port import MessageStorePort
from quasar.storage.status import PutStatus

__all__ = ["AddEntryCallback", "LedgerWriter", "WriteGuard"]

log = logging.getLogger(__name__)

AddEntryCallback = Callable[[Position | None, ManagedLedgerError | None], None]
"""``callback(position, None)`` once an add is durable, ``callback(None, error)`` when it failed."""


class WriteGuard(Protocol):
    """What the writer needs of its managed ledger's state."""

    def check_writable(self) -> None:
        """Raise ``ManagedLedgerAlreadyClosedError`` / ``ManagedLedgerFencedError`` unless writable."""
        ...

    def fence(self, reason: str) -> None:
        """Refuse further writes."""
        ...


def _settle(
    future: asyncio.Future[Position], position: Position | None, error: ManagedLedgerError | None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert position is not None
        future.set_result(position)


class LedgerWriter:
    """Adds, rollover and the confirmed end of one managed ledger. Loop thread only."""

    def __init__(
        self,
        name: str,
        store: MessageStorePort,
        config: ManagedLedgerConfig,
        allocator: LedgerIdAllocator,
        *,
        table_store: LedgerTableStore,
        listeners: EntriesListeners,
        recovered: RecoveredTable,
        clock_ms: Callable[[], int],
        guard: WriteGuard,
    ) -> None:
        self._name = name
        self._store = store
        self._config = config
        self._allocator = allocator
        self._table_store = table_store
        self._listeners = listeners
        self._clock_ms = clock_ms
        self._guard = guard
        self._table = recovered.table
        self._inflight: set[asyncio.Future[Any]] = set()  # ledger-row writes in flight
        self._adds_in_flight = 0  # adds put into the store whose flush is not answered yet
        self._adds_idle: asyncio.Future[None] | None = None  # resolved when _adds_in_flight drops to 0
        # rows not yet durable: (first queue offset, persist future)
        self._unpersisted: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._roll_pending = recovered.roll_pending  # a reopened ledger with entries: next add rolls over
        self._roll_delayed = False  # a rollover found no reserved ledger id (logged once)
        self.current_size = recovered.current_size
        """Bytes of entry data in the current (last) ledger."""
        self.confirmed_end = self._table.next_offset
        """One past the queue offset of the last confirmed entry."""
        self._flushed_end = self._table.next_offset  # one past the highest offset whose flush completed

    def add_entry_future(
        self, data: bytes | memoryview, *, properties: Mapping[str, str] | None = None, tag_hash: int = 0
    ) -> asyncio.Future[Position]:
        """:meth:`add_entry` as a plain future (no Task); built on :meth:`add_entry_callback`. Futures of
        successive calls resolve in call order."""
        result: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.add_entry_callback(
            data, functools.partial(_settle, result), properties=properties, tag_hash=tag_hash
        )
        return result

    def add_entry_callback(
        self,
        data: bytes | memoryview,
        callback: AddEntryCallback,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """:meth:`add_entry` for the publish path, with no future or task per entry (Pulsar's
        ``asyncAddEntry(data, AddEntryCallback, ctx)``): the put happens now, on the loop thread;
        ``callback(position, None)`` runs once the flush covering the entry (and its ledger row) is durable,
        ``callback(None, error)`` with one of the errors listed on :meth:`add_entry` otherwise. It runs exactly
        once, on the loop thread, never before this method returns; callbacks of successive calls run in call
        order."""
        try:
            self._append(data, properties, tag_hash, callback)
        except ManagedLedgerError as exc:
            asyncio.get_running_loop().call_soon(callback, None, exc)

    def _append(
        self,
        data: bytes | memoryview,
        properties: Mapping[str, str] | None,
        tag_hash: int,
        callback: AddEntryCallback,
    ) -> None:
        """The synchronous half of an append: put into the store and register the flush wait. Raises
        ManagedLedgerError subclasses when nothing was appended."""
        self._guard.check_writable()
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
            self._guard.fence(f"store returned queue offset {offset}, expected {table.next_offset}")
            raise ManagedLedgerFencedError(f"{self._name}: store queue offsets went backwards")
        table.next_offset = offset + 1
        self.current_size += len(data)
        last = table.last
        position = Position(last.ledger_id, offset - last.first_queue_offset)
        row = self._unpersisted[-1][1] if self._unpersisted else None
        flushed = functools.partial(self._entry_flushed, offset, position, row, callback)
        try:
            self._store.on_flushed(result.commit_log_offset + result.wrote_bytes, flushed)
        except QuasarError as exc:
            raise ManagedLedgerStorageError(f"store failed to flush {self._name}: {exc}") from exc
        self._adds_in_flight += 1

    def _entry_flushed(
        self,
        offset: int,
        position: Position,
        row: asyncio.Future[None] | None,
        callback: AddEntryCallback,
        status: PutStatus,
    ) -> None:
        """The store's answer for one entry: advance the flushed end, then answer the add (after its ledger
        row, when that is still being written)."""
        self._adds_in_flight -= 1
        if not self._adds_in_flight and self._adds_idle is not None:
            self._adds_idle.set_result(None)
            self._adds_idle = None
        if status is not PutStatus.PUT_OK:
            callback(None, put_status_error(status, self._name))
            return
        if offset + 1 > self._flushed_end:
            self._flushed_end = offset + 1
            self._update_confirmed()
        if row is None:
            callback(position, None)
        elif row.done():
            self._row_written(position, callback, row)
        else:
            row.add_done_callback(functools.partial(self._row_written, position, callback))

    def _row_written(self, position: Position, callback: AddEntryCallback, row: asyncio.Future[None]) -> None:
        if row.cancelled() or row.exception() is not None:
            callback(
                None,
                ManagedLedgerFencedError(f"{self._name}: the ledger of {position} could not be made durable"),
            )
        else:
            callback(position, None)

    @property
    def busy(self) -> bool:
        """An add awaits its flush, or a ledger-row write is in flight."""
        return bool(self._adds_in_flight or self._inflight)

    async def wait_idle(self) -> None:
        """Until every add put into the store has had its flush answered and every ledger-row write in flight
        has finished (close, tests)."""
        while self._adds_in_flight:
            if self._adds_idle is None:
                self._adds_idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._adds_idle)
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def _track(self, future: asyncio.Future[Any]) -> None:
        self._inflight.add(future)
        future.add_done_callback(self._untrack)

    def _untrack(self, future: asyncio.Future[Any]) -> None:
        self._inflight.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved here: the adds that care re-raise it themselves

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
            or self.current_size >= config.max_size_per_ledger_bytes
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
        reopened = self._roll_pending
        closing = table.last
        closing.entries = table.next_offset - closing.first_queue_offset
        closing.size_bytes = self.current_size
        table.append(LedgerInfo(ledger_id, table.next_offset, self._clock_ms()))
        self.current_size = 0
        self._roll_pending = False
        persisted = asyncio.ensure_future(self._persist_table(table.next_offset))
        self._track(persisted)
        self._unpersisted.append((table.next_offset, persisted))
        # the first add after a load always starts a ledger (10,000 of them after a restart): DEBUG, not INFO
        log.log(
            logging.DEBUG if reopened else logging.INFO,
            "%s: rolled over to ledger %d at queue offset %d",
            self._name,
            ledger_id,
            table.next_offset,
        )

    async def _persist_table(self, first_offset: int) -> None:
        # the table store's (FIFO) lock runs the writes in call order; each covers every row created so far
        try:
            await self._table_store.write(self._table)
        except (MetadataError, ManagedLedgerFencedError) as exc:
            self._guard.fence(str(exc))
            raise
        while self._unpersisted and self._unpersisted[0][0] <= first_offset:
            self._unpersisted.popleft()
        self._update_confirmed()

    def _update_confirmed(self) -> None:
        limit = self._flushed_end
        if self._unpersisted:
            limit = min(limit, self._unpersisted[0][0])
        if limit > self.confirmed_end:
            self.confirmed_end = limit
            self._listeners.notify()
