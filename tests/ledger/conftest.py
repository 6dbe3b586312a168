"""Fixtures for the managed-ledger tests: a store + metadata environment that can be restarted.

``env`` runs on the in-memory fakes (with fault injection); ``any_env`` runs once on the fakes and once on
the real ``MessageStore`` + ``SqliteMetadataStore`` under ``tmp_path``. ``stored_json`` reads a metadata
value back for assertions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata.port import MetadataStore, decode_json
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

FAST = ManagedLedgerConfig(
    max_entries_per_ledger=3, min_ledger_rollover_time_ms=0, cursor_persist_interval_ms=10
)


async def stored_json(metadata: MetadataStore, path: str) -> Any:
    """The JSON value at ``path``, or None when absent."""
    stored = await metadata.get(path)
    return None if stored is None else decode_json(path, stored.value)


class FakeEnv:
    """Fake store and metadata; ``restart()`` = a new factory over the same (in-memory) data."""

    kind = "fake"

    def __init__(self, config: ManagedLedgerConfig) -> None:
        self.config = config
        self.store = FakeMessageStore()
        self.metadata = FakeMetadataStore()
        self.factory: ManagedLedgerFactory | None = None

    async def start(self) -> ManagedLedgerFactory:
        self.factory = ManagedLedgerFactory(self.store, self.metadata, self.config)
        await self.factory.start()
        return self.factory

    async def stop(self) -> None:
        if self.factory is not None:
            await self.factory.close()
            self.factory = None

    async def restart(self) -> ManagedLedgerFactory:
        await self.stop()
        return await self.start()


class RealEnv(FakeEnv):
    """The real MessageStore (small segments) and SqliteMetadataStore under ``tmp_path``; ``restart()``
    closes and reopens both over the same files."""

    kind = "real"

    def __init__(self, config: ManagedLedgerConfig, root) -> None:
        self.config = config
        self.root = root
        self.factory = None
        self.store = None
        self.metadata = None

    async def start(self) -> ManagedLedgerFactory:
        from quasar.metadata.sqlite import SqliteMetadataStore
        from quasar.storage.message_store import MessageStore, StoreConfig

        self.store = MessageStore(StoreConfig(root_dir=self.root / "store", commit_log_file_size=64 * 1024))
        await asyncio.get_running_loop().run_in_executor(None, self.store.open)
        await self.store.start()
        self.metadata = await SqliteMetadataStore.open(self.root / "metadata.db")
        return await super().start()

    async def stop(self) -> None:
        await super().stop()
        if self.store is not None:
            await self.store.close()
            self.store = None
        if self.metadata is not None:
            await self.metadata.close()
            self.metadata = None


@pytest.fixture
async def env():
    environment = FakeEnv(FAST)
    await environment.start()
    yield environment
    await environment.stop()


@pytest.fixture(params=["fake", "real"])
async def any_env(request, tmp_path):
    if request.param == "real":
        environment: FakeEnv = RealEnv(FAST, tmp_path)
    else:
        environment = FakeEnv(FAST)
    await environment.start()
    yield environment
    await environment.stop()
