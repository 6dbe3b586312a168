"""ManagedLedgerFactory: opens and caches the managed ledgers of one broker (Pulsar
``ManagedLedgerFactoryImpl``), owns the ledger-id allocator and the background task that persists changed
cursor state at most once per ``cursor_persist_interval_ms``.

Lifecycle: construct -> ``await start()`` (reserves the first block of ledger ids, loads the names of the
existing managed ledgers, starts the cursor flusher) -> ``await open(name)`` as topics load ->
``await close()`` (stops the flusher and the allocator, closes every ledger: in-flight adds finish, every
cursor is persisted). Every metadata access is an await on the metadata port: nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator

from sortedcontainers import SortedSet

from quasar.errors import QuasarError
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.errors import (
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerStorageError,
    metadata_errors,
)
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.paths import MANAGED_LEDGERS_ROOT, QUEUE_ID, cursors_path, ledger_table_path
from quasar.metadata.port import MetadataStore, decode_segment
from quasar.storage.port import MessageStorePort

__all__ = ["ManagedLedgerFactory"]

log = logging.getLogger(__name__)


class ManagedLedgerFactory:
    """Opens managed ledgers on ``store`` (the message store port) with metadata in ``metadata`` (the
    metadata port), all with ``config``. One factory per broker and metadata store."""

    def __init__(
        self, store: MessageStorePort, metadata: MetadataStore, config: ManagedLedgerConfig | None = None
    ) -> None:
        self._store = store
        self._metadata = metadata
        self._config = config or ManagedLedgerConfig()
        self._allocator = LedgerIdAllocator(metadata)
        self._ledgers: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}  # close_ledger in progress: open/delete wait for it
        self._names: SortedSet[str] = (
            SortedSet()
        )  # every managed ledger that exists: loaded at start, kept current
        self._flusher: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    async def start(self) -> None:
        """Reserve the first block of ledger ids, load the names of the existing managed ledgers and start
        the background task that persists changed cursor state every ``cursor_persist_interval_ms``.
        Idempotent. Raises ``MetadataError``, ``ManagedLedgerAlreadyClosedError`` after ``close``."""
        if self._closed:
            raise ManagedLedgerAlreadyClosedError("the managed ledger factory is closed")
        if self._started:
            return
        await self._allocator.start()
        with metadata_errors("cannot list the managed ledgers"):
            children = await self._metadata.get_children(MANAGED_LEDGERS_ROOT)
        self._names.update(decode_segment(child) for child in children)
        self._started = True
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="managed-ledger-cursor-flusher")

    async def open(self, name: str) -> ManagedLedger:
        """The managed ledger ``name``, opened (and created when new) on first use, then cached. A cached
        ledger that was closed or fenced is opened afresh from its durable state. Concurrent opens of one name
        share one open (cancelling one caller does not cancel it for the others). Raises ``ValueError`` for an
        empty name, ``MetadataError``, ``ManagedLedgerAlreadyClosedError`` once the factory is closed,
        ``ManagedLedgerError`` before ``start``."""
        self._check_usable()
        if not name:
            raise ValueError("a managed ledger needs a non-empty name")
        ledger = self._ledgers.get(name)
        if ledger is not None and not (ledger.is_closed or ledger.is_fenced):
            return ledger
        pending = self._opening.get(name)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._open(name), name=f"open-ledger {name}")
            self._opening[name] = pending
            pending.add_done_callback(functools.partial(self._opened, name))
        return await asyncio.shield(pending)

    async def _open(self, name: str) -> ManagedLedger:
        closing = self._closing.get(name)
        if closing is not None:  # its cursors and table are being written: read them once they are
            await asyncio.wait([closing])
        ledger = await ManagedLedger.open(
            name, self._store, self._metadata, self._config, self._allocator, new=name not in self._names
        )
        if self._closed:  # the factory closed while the ledger was loading
            await ledger.close()
            raise ManagedLedgerAlreadyClosedError("the managed ledger factory is closed")
        self._ledgers[name] = ledger
        self._names.add(name)
        return ledger

    def _opened(self, name: str, task: asyncio.Task[ManagedLedger]) -> None:
        if self._opening.get(name) is task:
            del self._opening[name]
        if not task.cancelled():
            task.exception()  # retrieved here: every caller that still waits re-raises it

    def _check_usable(self) -> None:
        if self._closed:
            raise ManagedLedgerAlreadyClosedError("the managed ledger factory is closed")
        if not self._started:
            raise ManagedLedgerError("the managed ledger factory is not started: await start() first")

    def get(self, name: str) -> ManagedLedger | None:
        """The open managed ledger ``name``, or None when it is not open."""
        ledger = self._ledgers.get(name)
        return None if ledger is None or ledger.is_closed else ledger

    def names(self) -> list[str]:
        """Names of every managed ledger that exists (stored at ``start``, or opened since), sorted. An
        in-memory copy, O(number of ledgers): use :meth:`exists`, :meth:`names_with_prefix` or
        :meth:`count_with_prefix` on request paths."""
        return list(self._names)

    def exists(self, name: str) -> bool:
        """Whether managed ledger ``name`` exists (loaded or not); an O(1) in-memory look-up."""
        return name in self._names

    def names_with_prefix(self, prefix: str) -> Iterator[str]:
        """The existing managed ledgers whose names start with ``prefix``, sorted (O(log n + matches))."""
        names: Iterator[str] = self._names.irange(prefix, prefix + "\U0010ffff", inclusive=(True, False))
        return names

    def count_with_prefix(self, prefix: str) -> int:
        """How many existing managed ledgers have a name starting with ``prefix`` (O(log n))."""
        return int(self._names.bisect_left(prefix + "\U0010ffff") - self._names.bisect_left(prefix))

    async def close_ledger(self, name: str) -> None:
        """Close managed ledger ``name`` (in-flight adds finish, its cursors and table are persisted) and drop
        it from memory; it stays listed and :meth:`open` loads it again. An :meth:`open` or :meth:`delete` of
        the name meanwhile waits for the close (so it reads what the close wrote). The close goes on when the
        caller is cancelled. Raises the ledger's ``ManagedLedgerError`` when the final writes fail."""
        ledger = self._ledgers.pop(name, None)
        if ledger is None:
            pending = self._closing.get(name)
            if pending is not None:
                await asyncio.shield(pending)
            return
        task = asyncio.get_running_loop().create_task(ledger.close(), name=f"close-ledger {name}")
        self._closing[name] = task
        task.add_done_callback(functools.partial(self._closed_ledger, name))
        await asyncio.shield(task)

    def _closed_ledger(self, name: str, task: asyncio.Task[None]) -> None:
        if self._closing.get(name) is task:
            del self._closing[name]
        if not task.cancelled():
            task.exception()  # retrieved here: the caller that waits re-raises it

    async def delete(self, name: str) -> bool:
        """Delete managed ledger ``name`` for good (Pulsar ``ManagedLedgerImpl.delete``): close it when open,
        remove its cursors' state and its ledger table from the metadata store, then its entries from the
        message store (``MessageStorePort.delete_queue``: the queue offsets stay taken, so a managed ledger
        created later under the same name starts after them and never reads the old entries). Returns False
        when no such ledger exists. The caller makes sure nothing opens ``name`` meanwhile (the broker holds
        the topic's load slot). Raises ``MetadataError``, ``ManagedLedgerStorageError`` (the store could not
        delete the entries: the metadata is gone already, so the ledger no longer exists; calling again
        finishes the store's part), ``ManagedLedgerAlreadyClosedError`` once the factory is closed."""
        self._check_usable()
        for pending in (self._opening.get(name), self._closing.get(name)):
            if pending is not None:
                await asyncio.wait([pending])
        ledger = self._ledgers.pop(name, None)
        existed = ledger is not None or name in self._names
        if ledger is not None and not ledger.is_closed:
            await ledger.close()
        with metadata_errors(f"cannot delete the managed ledger {name}"):
            await self._metadata.delete_recursive(cursors_path(name))
            await self._metadata.delete_recursive(ledger_table_path(name))
        self._names.discard(name)
        try:
            await self._store.delete_queue(name, QUEUE_ID)
        except (QuasarError, OSError) as exc:
            raise ManagedLedgerStorageError(f"{name}: the store could not delete the entries: {exc}") from exc
        log.info("deleted managed ledger %s", name)
        return existed

    async def flush_cursors(self) -> None:
        """Persist every changed durable cursor of every open ledger now (all writes issued at once; errors
        are logged and the cursors stay dirty)."""
        ledgers = [ledger for ledger in self._ledgers.values() if not ledger.is_closed]
        await asyncio.gather(*(ledger.flush_cursors() for ledger in ledgers))

    async def flush_and_trim(self) -> None:
        """One background round: take each ledger's trim bound, persist the cursors, then trim ledgers below
        the bound that retention no longer keeps (so persisted cursors never point into deleted ledgers).
        One pass over the loaded ledgers; one whose cursors did not change and whose trim check would answer
        as last time (``ManagedLedger.trim_candidate``) costs a few attribute checks: no bound computation,
        coroutine or task per loaded ledger and round."""
        trimmable: list[tuple[ManagedLedger, int]] = []
        dirty = []
        for ledger in self._ledgers.values():
            if ledger.is_closed:
                continue
            bound = ledger.trim_candidate()
            if bound is not None:
                trimmable.append((ledger, bound))
            if ledger.has_dirty_cursors:
                dirty.append(ledger.flush_cursors())
        if dirty:
            await asyncio.gather(*dirty)
        for ledger, bound in trimmable:
            if ledger.is_closed:
                continue
            try:
                await ledger.trim_ledgers(bound)
            except QuasarError:
                log.exception("%s: trimming failed", ledger.name)

    async def _flush_loop(self) -> None:
        interval_s = self._config.cursor_persist_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush_and_trim()
            except Exception:  # never let the owned task die silently; the next round retries
                log.exception("cursor flush round failed")

    async def close(self) -> None:
        """Stop the flusher and the allocator, let pending opens finish, then close every ledger (in-flight
        adds finish, every cursor is persisted). Idempotent. Raises the first ``ManagedLedgerError`` met, after
        closing everything."""
        if self._closed:
            return
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        if self._opening:
            await asyncio.wait(list(self._opening.values()))
        if self._closing:
            await asyncio.wait(list(self._closing.values()))
        await self._allocator.close()
        first_error: ManagedLedgerError | None = None
        for name in list(self._ledgers):
            ledger = self._ledgers.pop(name)
            try:
                await ledger.close()
            except ManagedLedgerError as exc:
                log.error("closing %s: %s", name, exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
