"""ManagedLedgerFactory: opens and caches the managed ledgers of one broker (Pulsar
``ManagedLedgerFactoryImpl``), owns the ledger-id allocator and the background task that persists changed
cursor state at most once per ``cursor_persist_interval_ms``.

Lifecycle: construct -> ``await start()`` (starts the cursor flusher) -> ``open(name)`` as topics load ->
``await close()`` (stops the flusher, closes every ledger: in-flight adds finish, every cursor is persisted).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

from quasar.errors import QuasarError
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.errors import ManagedLedgerAlreadyClosedError, MetadataError
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.managed_ledger import LEDGER_KEY_PREFIX, ManagedLedger

__all__ = ["ManagedLedgerFactory"]

log = logging.getLogger(__name__)


class ManagedLedgerFactory:
    """Opens managed ledgers on ``store`` (a ``MessageStore``) with metadata in ``metadata`` (a
    ``MetadataStore``), all with ``config``. One factory per broker and metadata store."""

    def __init__(self, store: Any, metadata: Any, config: ManagedLedgerConfig | None = None) -> None:
        self._store = store
        self._metadata = metadata
        self._config = config or ManagedLedgerConfig()
        self._allocator = LedgerIdAllocator(metadata)
        self._ledgers: dict[str, ManagedLedger] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    def open(self, name: str) -> ManagedLedger:
        """The managed ledger ``name``, opened (and created when new) on first use, then cached. A cached
        ledger that was closed or fenced is opened afresh from its durable state. Synchronous: the first open
        of a name reads (and for a new one writes) the metadata store. Raises ``MetadataError``,
        ``ManagedLedgerAlreadyClosedError`` once the factory is closed."""
        if self._closed:
            raise ManagedLedgerAlreadyClosedError("the managed ledger factory is closed")
        ledger = self._ledgers.get(name)
        if ledger is not None and not (ledger.is_closed or ledger.is_fenced):
            return ledger
        ledger = ManagedLedger(name, self._store, self._metadata, self._config, self._allocator)
        self._ledgers[name] = ledger
        return ledger

    def get(self, name: str) -> ManagedLedger | None:
        """The open managed ledger ``name``, or None when it is not open."""
        ledger = self._ledgers.get(name)
        return None if ledger is None or ledger.is_closed else ledger

    def names(self) -> list[str]:
        """Names of every managed ledger that exists (persisted in the metadata store, or open), sorted."""
        try:
            stored = self._metadata.list(LEDGER_KEY_PREFIX)
        except (QuasarError, OSError, sqlite3.Error) as exc:
            raise MetadataError(f"cannot list managed ledgers: {exc}") from exc
        names = {key[len(LEDGER_KEY_PREFIX) :] for key in stored}
        names.update(name for name, ledger in self._ledgers.items() if not ledger.is_closed)
        return sorted(names)

    async def close_ledger(self, name: str) -> None:
        """Close managed ledger ``name`` (persisting its cursors) and drop it from the cache."""
        ledger = self._ledgers.pop(name, None)
        if ledger is not None:
            await ledger.close()

    async def start(self) -> None:
        """Start the background task that persists changed cursor state every
        ``cursor_persist_interval_ms``. Idempotent."""
        if self._closed:
            raise ManagedLedgerAlreadyClosedError("the managed ledger factory is closed")
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="managed-ledger-cursor-flusher")

    async def flush_cursors(self) -> None:
        """Persist every changed durable cursor of every open ledger now."""
        for ledger in list(self._ledgers.values()):
            if not ledger.is_closed:
                await ledger.flush_cursors()

    async def flush_and_trim(self) -> None:
        """One background round: take each ledger's trim bound, persist the cursors, then trim ledgers below
        the bound that retention no longer keeps (so persisted cursors never point into deleted ledgers)."""
        ledgers = [ledger for ledger in self._ledgers.values() if not ledger.is_closed]
        bounds = [ledger.trim_bound() for ledger in ledgers]
        for ledger, bound in zip(ledgers, bounds, strict=True):
            if ledger.is_closed:
                continue
            await ledger.flush_cursors()
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
        """Stop the flusher, then close every ledger (in-flight adds finish, every cursor is persisted).
        Idempotent. Raises the first ``MetadataError`` met, after closing everything."""
        if self._closed:
            return
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            try:
                await self._flusher
            except asyncio.CancelledError:
                pass
            self._flusher = None
        first_error: BaseException | None = None
        for name in list(self._ledgers):
            ledger = self._ledgers.pop(name)
            try:
                await ledger.close()
            except MetadataError as exc:
                log.error("closing %s: %s", name, exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
