"""LedgerCursors: the cursors of one managed ledger (Pulsar ``ManagedLedgerImpl.cursors`` and
``asyncOpenCursor`` / ``asyncDeleteCursor``).

Durable cursors are kept by name: restored from their persisted state when the managed ledger opens, created
by :meth:`LedgerCursors.open` (the new cursor's state is written, with an await, before it is handed out, so
the subscription survives a crash), removed by :meth:`LedgerCursors.delete`. Concurrent opens of one name share
one pending open. Non-durable cursors (readers) are only tracked weakly, to be closed with the ledger.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import logging
import weakref
from collections.abc import Hashable, Iterable, Mapping

from quasar.ledger.ack_state import AckState
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.errors import CursorNotFoundError, ManagedLedgerAlreadyClosedError, MetadataError
from quasar.ledger.managed_cursor import CursorLedger, ManagedCursor
from quasar.ledger.position import Position

__all__ = ["InitialPosition", "LedgerCursors"]

log = logging.getLogger(__name__)


class InitialPosition(enum.Enum):
    """Where a new durable cursor starts (Pulsar ``CommandSubscribe.InitialPosition``). The ledger keeps its
    own enum (it may not import ``quasar.protocol``); the broker maps the wire value onto it explicitly."""

    LATEST = "latest"
    EARLIEST = "earliest"


class LedgerCursors:
    """Cursor registry of ``ledger``, persisting through ``store`` with the limits of ``config``;
    ``snapshots``: the persisted cursors, restored now."""

    def __init__(
        self,
        ledger: CursorLedger,
        store: CursorStore,
        config: ManagedLedgerConfig,
        snapshots: Mapping[str, CursorSnapshot],
    ) -> None:
        self._ledger = ledger
        self._store = store
        self._config = config
        self._durable: dict[str, ManagedCursor] = {}
        self._non_durable: weakref.WeakSet[ManagedCursor] = weakref.WeakSet()
        self._opening: dict[str, asyncio.Task[ManagedCursor]] = {}
        self._reader_ids = itertools.count()
        self._closed = False
        for snapshot in snapshots.values():
            self._durable[snapshot.name] = self._restore(snapshot)

    @property
    def durable(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors by name (a copy)."""
        return self._durable.copy()

    # ------------------------------------------------------------------ open
    async def open(self, name: str, initial: InitialPosition) -> ManagedCursor:
        """The durable cursor ``name`` (see ``ManagedLedger.open_cursor``). Concurrent calls for one name
        share one open; cancelling one caller does not cancel it for the others."""
        cursor = self._durable.get(name)
        if cursor is not None:
            return cursor
        pending = self._opening.get(name)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(
                self._open(name, initial), name=f"open-cursor {self._ledger.name}/{name}"
            )
            self._opening[name] = pending
            pending.add_done_callback(functools.partial(self._opened, name))
        return await asyncio.shield(pending)

    def _opened(self, name: str, task: asyncio.Task[ManagedCursor]) -> None:
        if self._opening.get(name) is task:
            del self._opening[name]
        if not task.cancelled():
            task.exception()  # retrieved here: every caller that still waits re-raises it

    async def _open(self, name: str, initial: InitialPosition) -> ManagedCursor:
        snapshot = await self._store.load(name)  # a cursor closed earlier keeps its persisted state
        self._check_open()
        if snapshot is not None:
            cursor = self._restore(snapshot)
        else:
            ledger = self._ledger
            if initial is InitialPosition.LATEST:
                mark_delete = ledger.last_confirmed_entry
            else:
                mark_delete = ledger.table.position_of(ledger.first_available_offset - 1)
            cursor = self._new(name, AckState(mark_delete), durable=True)
            await cursor.flush()
            self._check_open()
        self._durable[name] = cursor
        return cursor

    def new_non_durable(self, start: Position | None, *, inclusive: bool) -> ManagedCursor:
        """A reader's cursor (see ``ManagedLedger.new_non_durable_cursor``)."""
        table = self._ledger.table
        if start is None:
            read_offset = self._ledger.confirmed_end_offset
        elif inclusive:
            read_offset = table.ceil_offset(start)
        else:
            read_offset = table.offset_after(start)
        mark_delete = table.position_of(max(read_offset, table.first_offset) - 1)
        cursor = ManagedCursor(
            self._ledger,
            f"reader-{next(self._reader_ids)}",
            AckState(mark_delete),
            read_offset,
            durable=False,
            max_ranges_to_persist=0,
        )
        self._non_durable.add(cursor)
        return cursor

    def _restore(self, snapshot: CursorSnapshot) -> ManagedCursor:
        state = AckState(snapshot.mark_delete_position, snapshot.range_set(), snapshot.batch_deleted_map())
        return self._new(snapshot.name, state, durable=True, properties=snapshot.properties, persisted=True)

    def _new(
        self,
        name: str,
        state: AckState,
        *,
        durable: bool,
        properties: Mapping[str, int] | None = None,
        persisted: bool = False,
    ) -> ManagedCursor:
        return ManagedCursor(
            self._ledger,
            name,
            state,
            self._ledger.table.offset_after(state.mark_delete_position),
            durable=durable,
            max_ranges_to_persist=self._config.max_unacked_ranges_to_persist,
            max_batch_entries_to_persist=self._config.max_batch_deleted_index_to_persist,
            properties=properties,
            persisted=persisted,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ManagedLedgerAlreadyClosedError(f"managed ledger {self._ledger.name} is closed")

    # ------------------------------------------------------------------ persistence and removal
    async def persist(self, snapshot: CursorSnapshot) -> None:
        """Write one durable cursor's state. Raises ``MetadataError``."""
        await self._store.save(snapshot)

    async def delete(self, name: str) -> None:
        """Close durable cursor ``name`` and remove its persisted state (after any write of it in flight).
        Raises ``CursorNotFoundError``, ``MetadataError``."""
        cursor = self._durable.pop(name, None)
        if cursor is None:
            raise CursorNotFoundError(f"no cursor {name!r} on {self._ledger.name}")
        await cursor.invalidate()
        await self._store.delete(name)

    def forget(self, cursor: ManagedCursor) -> None:
        """Unregister ``cursor`` (it closed itself); its persisted state stays."""
        if self._durable.get(cursor.name) is cursor:
            del self._durable[cursor.name]
        self._non_durable.discard(cursor)

    def slowest_read_bound(self, limit: int) -> int:
        """The queue offset after the lowest mark-delete position of the durable cursors, at most ``limit``
        (Pulsar ``getSlowestReaderPosition``)."""
        table = self._ledger.table
        bound = limit
        for cursor in self._durable.values():
            bound = min(bound, table.offset_after(cursor.mark_delete_position))
        return bound

    def trim_inputs(self, limit: int) -> Hashable:
        """What :meth:`slowest_read_bound` depends on besides the ledger table: the durable cursors' mark-delete
        positions (none passes the confirmed end, so ``limit`` does not count then), or ``limit`` without a
        durable cursor. Equal inputs over the same table give the same bound."""
        if not self._durable:
            return limit
        return tuple(cursor.mark_delete_position for cursor in self._durable.values())

    @property
    def any_dirty(self) -> bool:
        """Some durable cursor's state changed since it was last persisted."""
        return any(cursor.is_dirty for cursor in self._durable.values())

    async def flush_all(self) -> None:
        """Persist every durable cursor whose state changed, all writes issued at once (a backend with group
        commit, such as sqlite, makes them one transaction). Errors are logged; the cursor stays dirty."""
        for cursor, error in await self._flush(self._durable.values()):
            log.error("%s: cannot persist cursor %s: %s", self._ledger.name, cursor.name, error)

    async def close_all(self) -> list[MetadataError]:
        """Refuse further opens, let pending ones finish, persist every durable cursor and close every cursor.
        Returns the persistence errors (each cursor is closed anyway)."""
        self._closed = True
        if self._opening:
            await asyncio.wait(list(self._opening.values()))
        durable = list(self._durable.values())
        failed = await self._flush(durable)
        for cursor in [*durable, *self._non_durable]:
            cursor.mark_closed()
        return [error for _, error in failed]

    @staticmethod
    async def _flush(cursors: Iterable[ManagedCursor]) -> list[tuple[ManagedCursor, MetadataError]]:
        dirty = [cursor for cursor in cursors if cursor.is_dirty and not cursor.is_closed]
        if not dirty:
            return []
        results = await asyncio.gather(*(cursor.flush() for cursor in dirty), return_exceptions=True)
        failed = []
        for cursor, result in zip(dirty, results, strict=True):
            if isinstance(result, MetadataError):
                failed.append((cursor, result))
            elif isinstance(result, BaseException):
                raise result
        return failed
