"""Property test: the memory and sqlite backends (and etcd, when its binary is installed) answer every sequence
of calls the same way (values, versions, children, errors, ephemeral paths across sessions)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from quasar.metadata import Delete, MetadataStore, MetadataStoreError, Put, Stat
from quasar.metadata.etcd import EtcdMetadataStore
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.testing.etcd import EtcdProcess

from .conftest import unique_prefix

segments = st.sampled_from(["a", "b", "a-b", "a0", "%2F"])
paths = st.lists(segments, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
values = st.binary(max_size=4)
versions = st.sampled_from([None, -1, 0, 1, 2])
ops = st.one_of(
    st.builds(Put, paths, values, versions),
    st.builds(Delete, paths, versions),
)


def _shape(outcome: Any) -> Any:
    """What must agree: stats without their times; errors by type."""
    if isinstance(outcome, BaseException):
        return type(outcome).__name__
    if isinstance(outcome, Stat):
        return (outcome.path, outcome.version, outcome.ephemeral)
    if isinstance(outcome, list):
        return [_shape(item) for item in outcome]
    if outcome is not None and hasattr(outcome, "stat"):
        return (outcome.value, _shape(outcome.stat))
    return outcome


class BackendsAgree(RuleBasedStateMachine):
    etcd_endpoint: str | None = None
    """Set (in a subclass) to compare an etcd store (a fresh key prefix per run) as well."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="quasar-metadata-"))
        self.data = MemoryData()
        self.prefix = unique_prefix()
        self.stores: list[MetadataStore] = self.loop.run_until_complete(self.open_all())

    async def open_all(self) -> list[MetadataStore]:
        stores: list[MetadataStore] = [
            MemoryMetadataStore(self.data),
            await SqliteMetadataStore.open(self.dir / "m.db"),
        ]
        if self.etcd_endpoint is not None:
            stores.append(await EtcdMetadataStore.open(self.etcd_endpoint, prefix=self.prefix))
        return stores

    async def close_all(self) -> None:
        for store in self.stores:
            await store.close()

    def both(self, call: str, *args: Any, **kwargs: Any) -> Any:
        async def run(store: MetadataStore) -> Any:
            try:
                return await getattr(store, call)(*args, **kwargs)
            except MetadataStoreError as exc:
                return exc

        memory, *others = (self.loop.run_until_complete(run(store)) for store in self.stores)
        for other in others:
            assert _shape(memory) == _shape(other), (call, args, memory, other)
        return memory

    @rule(path=paths, value=values, version=versions, ephemeral=st.booleans())
    def put(self, path: str, value: bytes, version: int | None, ephemeral: bool) -> None:
        self.both("put", path, value, version, ephemeral=ephemeral)

    @rule(path=paths, version=versions)
    def delete(self, path: str, version: int | None) -> None:
        self.both("delete", path, version)

    @rule(path=paths)
    def delete_recursive(self, path: str) -> None:
        self.both("delete_recursive", path)

    @rule(batch=st.lists(ops, max_size=4))
    def multi(self, batch: list[Put | Delete]) -> None:
        self.both("multi", batch)

    @rule(path=paths)
    def read(self, path: str) -> None:
        self.both("get", path)
        self.both("exists", path)
        self.both("get_children", path)

    @rule()
    def new_session(self) -> None:
        self.loop.run_until_complete(self.close_all())
        self.stores = self.loop.run_until_complete(self.open_all())

    @invariant()
    def same_tree(self) -> None:
        self.both("get_children", "/")

    def teardown(self) -> None:
        try:
            self.loop.run_until_complete(self.close_all())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


BackendsAgree.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestBackendsAgree = BackendsAgree.TestCase


def test_etcd_agrees(etcd_server: EtcdProcess) -> None:
    """The same machine with an etcd store beside memory and sqlite (fewer runs: each call is a round trip)."""

    class WithEtcd(BackendsAgree):
        etcd_endpoint = etcd_server.endpoint

    run_state_machine_as_test(
        WithEtcd, settings=settings(max_examples=25, stateful_step_count=30, deadline=None)
    )
