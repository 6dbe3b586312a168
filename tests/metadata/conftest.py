"""Fixtures: ``backend`` runs a test once on each metadata backend (memory, sqlite).

A :class:`Backend` opens stores over one data set: for sqlite one file under ``tmp_path``, for memory one
:class:`MemoryData` (each store over it is a new session), so ``reopen()`` means "the previous process is gone,
a new one starts".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from quasar.metadata import MetadataStore
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore


class Backend:
    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.path = root / "meta" / "metadata.db"
        self.data = MemoryData()
        self.opened: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        store: MetadataStore
        if self.kind == "sqlite":
            store = await SqliteMetadataStore.open(self.path)
        else:
            store = MemoryMetadataStore(self.data)
        self.opened.append(store)
        return store

    async def reopen(self, store: MetadataStore) -> MetadataStore:
        await store.close()
        return await self.open()

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture(params=["memory", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = Backend(request.param, tmp_path)
    yield made
    await made.close_all()


@pytest.fixture
async def store(backend: Backend) -> MetadataStore:
    return await backend.open()
