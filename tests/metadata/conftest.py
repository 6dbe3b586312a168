"""Fixtures: ``backend`` runs a test once on each metadata backend (memory, sqlite, etcd).

A :class:`Backend` opens stores over one data set: for sqlite one file under ``tmp_path``, for memory one
:class:`MemoryData` (each store over it is a new session), for etcd one key prefix (unique per test) on the
session's etcd process, so ``reopen()`` means "the previous process is gone, a new one starts". The etcd runs
are skipped, saying why, when no etcd binary is installed (scripts/ensure_etcd.sh installs Debian's).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from quasar.metadata import MetadataStore
from quasar.metadata.etcd import EtcdMetadataStore
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.testing.etcd import EtcdProcess, etcd_available

NO_ETCD = "no etcd binary on PATH: install Debian's etcd-server (bash scripts/ensure_etcd.sh)"


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One real etcd for the session (tests keep apart through unique key prefixes)."""
    if not etcd_available():
        pytest.skip(NO_ETCD)
    process = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def unique_prefix() -> str:
    return f"/test-{uuid.uuid4().hex[:12]}"


class Backend:
    def __init__(self, kind: str, root: Path, etcd: EtcdProcess | None = None) -> None:
        self.kind = kind
        self.path = root / "meta" / "metadata.db"
        self.data = MemoryData()
        self.etcd = etcd
        self.prefix = unique_prefix()
        self.opened: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        store: MetadataStore
        if self.kind == "sqlite":
            store = await SqliteMetadataStore.open(self.path)
        elif self.kind == "etcd":
            assert self.etcd is not None
            store = await EtcdMetadataStore.open(
                self.etcd.endpoint, prefix=self.prefix, operation_timeout_s=5.0
            )
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


@pytest.fixture(params=["memory", "sqlite", "etcd"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    etcd = request.getfixturevalue("etcd_server") if request.param == "etcd" else None
    made = Backend(request.param, tmp_path, etcd)
    yield made
    await made.close_all()


@pytest.fixture
async def store(backend: Backend) -> MetadataStore:
    return await backend.open()
