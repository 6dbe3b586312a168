"""MemoryMetadataStore: the port on Python dicts (Pulsar ``LocalMemoryMetadataStore``), for tests.

Several stores may share one :class:`MemoryData` (each store is one session, as several brokers on one
metadata service): their ephemeral paths are theirs alone, and every store sharing the data is notified of
every change. A store made without ``data`` gets a private :class:`MemoryData`.

Each call yields to the event loop once before it runs (as a real backend would), then applies the whole
operation at once: ``multi`` is all or nothing through an undo log. Notifications are delivered with
``loop.call_soon``. For fault-injection tests, :meth:`MemoryMetadataStore.fail_next_writes` makes the next
writes raise, and :attr:`MemoryMetadataStore.write_count` counts the writes that succeeded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence

from quasar.metadata._engine import (
    Record,
    apply_delete,
    apply_delete_recursive,
    apply_multi,
    apply_put,
    check_delete,
    check_multi,
    check_put,
    now_ms,
    stat_of,
)
from quasar.metadata._notifier import Notifier
from quasar.metadata.errors import InvalidArgumentError, MetadataStoreClosedError, MetadataStoreError
from quasar.metadata.port import (
    Delete,
    GetResult,
    Notification,
    Put,
    SessionEvent,
    Stat,
    check_path,
)

__all__ = ["MemoryData", "MemoryMetadataStore"]

_sessions = itertools.count(1)


class MemoryData:
    """The paths of one in-memory metadata service, shared by the stores (sessions) made over it."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.owners: dict[str, int] = {}  # ephemeral path -> session id
        self.below: dict[str, dict[str, int]] = {}  # path -> child segment -> stored paths at or below it
        self.notifiers: dict[int, Notifier] = {}  # session id -> the notifier of an open store

    def set(self, path: str, record: Record | None, owner: int | None) -> None:
        """Store (``record``) or remove (None) ``path``, keeping the child index and ephemeral owners."""
        existed = path in self.records
        if record is None:
            if existed:
                del self.records[path]
                self._count(path, -1)
        else:
            self.records[path] = record
            if not existed:
                self._count(path, +1)
        if record is not None and record.ephemeral and owner is not None:
            self.owners[path] = owner
        else:
            self.owners.pop(path, None)

    def _count(self, path: str, delta: int) -> None:
        parent = "/"
        for segment in path[1:].split("/"):
            counts = self.below.setdefault(parent, {})
            left = counts.get(segment, 0) + delta
            if left > 0:
                counts[segment] = left
            else:
                counts.pop(segment, None)
                if not counts:
                    del self.below[parent]
            parent = f"{parent.rstrip('/')}/{segment}"

    def subtree(self, path: str) -> list[str]:
        if path == "/":
            return list(self.records)
        prefix = path + "/"
        return [p for p in self.records if p == path or p.startswith(prefix)]


class _Txn:
    """The engine's view of ``data`` with an undo log (for ``multi``'s all-or-nothing)."""

    def __init__(self, data: MemoryData, session: int) -> None:
        self._data = data
        self._session = session
        self._undo: list[tuple[str, Record | None, int | None]] = []

    def load(self, path: str) -> Record | None:
        return self._data.records.get(path)

    def store(self, path: str, record: Record) -> None:
        self._remember(path)
        self._data.set(path, record, self._session)

    def remove(self, path: str) -> None:
        self._remember(path)
        self._data.set(path, None, None)

    def subtree(self, path: str) -> list[str]:
        return self._data.subtree(path)

    def _remember(self, path: str) -> None:
        self._undo.append((path, self._data.records.get(path), self._data.owners.get(path)))

    def rollback(self) -> None:
        for path, record, owner in reversed(self._undo):
            self._data.set(path, record, owner)
        self._undo.clear()


class MemoryMetadataStore:
    """The port in memory (see the module docstring). ``data``: shared paths, a private set when None."""

    def __init__(self, data: MemoryData | None = None) -> None:
        self._data = data if data is not None else MemoryData()
        self._session = next(_sessions)
        self._notifier = Notifier()
        self._data.notifiers[self._session] = self._notifier
        self._closed = False
        self._fail_count = 0
        self._fail_error: MetadataStoreError | None = None
        self.write_count = 0
        """Write calls (put, delete, delete_recursive, multi) that succeeded."""

    def __repr__(self) -> str:
        return f"MemoryMetadataStore(session {self._session}, {len(self._data.records)} paths)"

    @property
    def data(self) -> MemoryData:
        """The shared paths (a new store over them is a new session)."""
        return self._data

    # -- fault injection -------------------------------------------------------------------------------------

    def fail_next_writes(self, n: int = 1, error: MetadataStoreError | None = None) -> None:
        """Make the next ``n`` write calls raise ``error`` (default: a :class:`MetadataStoreError`) without
        writing anything; ``n = 0`` cancels."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"n is a count >= 0, got {n!r}")
        self._fail_count = n
        self._fail_error = error

    # -- the port --------------------------------------------------------------------------------------------

    async def _enter(self) -> None:
        self._check_open()
        await asyncio.sleep(0)
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataStoreClosedError("metadata store is closed")

    async def _begin_write(self) -> _Txn:
        await self._enter()
        if self._fail_count > 0:
            self._fail_count -= 1
            raise self._fail_error or MetadataStoreError("injected metadata write failure")
        return _Txn(self._data, self._session)

    def _committed(self, events: Sequence[Notification]) -> None:
        self.write_count += 1
        loop = asyncio.get_running_loop()
        for notifier in list(self._data.notifiers.values()):
            notifier.schedule(loop, events)

    async def get(self, path: str) -> GetResult | None:
        check_path(path)
        await self._enter()
        record = self._data.records.get(path)
        return None if record is None else GetResult(record.value, stat_of(path, record))

    async def exists(self, path: str) -> bool:
        check_path(path)
        await self._enter()
        return path in self._data.records

    async def get_children(self, path: str) -> list[str]:
        check_path(path)
        await self._enter()
        return sorted(self._data.below.get(path, ()))

    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False
    ) -> Stat:
        op = check_put(Put(path, value, expected_version))
        txn = await self._begin_write()
        stat, events = apply_put(txn, op, ephemeral=bool(ephemeral), now=now_ms())
        self._committed(events)
        return stat

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        op = check_delete(Delete(path, expected_version))
        txn = await self._begin_write()
        events = apply_delete(txn, op, missing_ok=False)
        self._committed(events)

    async def delete_recursive(self, path: str) -> None:
        check_path(path)
        txn = await self._begin_write()
        self._committed(apply_delete_recursive(txn, path))

    async def multi(self, ops: Sequence[Put | Delete]) -> list[Stat | None]:
        checked = check_multi(ops)
        txn = await self._begin_write()
        try:
            results, events = apply_multi(txn, checked, now=now_ms())
        except BaseException:
            txn.rollback()
            raise
        self._committed(events)
        return results

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._notifier.register(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._notifier.register_session(listener)

    async def close(self) -> None:
        """End this session: its ephemeral paths are removed (other sessions are notified), later calls raise
        :class:`MetadataStoreClosedError`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._data.notifiers.pop(self._session, None)
        self._notifier.clear()
        mine = [path for path, owner in self._data.owners.items() if owner == self._session]
        if not mine:
            return
        txn = _Txn(self._data, self._session)
        events: list[Notification] = []
        for path in sorted(mine):
            events += apply_delete(txn, Delete(path), missing_ok=True)
        loop = asyncio.get_running_loop()
        for notifier in list(self._data.notifiers.values()):
            notifier.schedule(loop, events)
