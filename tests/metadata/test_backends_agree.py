"""Property test: the memory and sqlite backends answer every sequence of calls the same way (values,
versions, children, errors, ephemeral paths across sessions)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from quasar.metadata import Delete, MetadataStore, MetadataStoreError, Put, Stat
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore

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
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="quasar-metadata-"))
        self.data = MemoryData()
        self.memory: MetadataStore = MemoryMetadataStore(self.data)
        self.sqlite: MetadataStore = self.loop.run_until_complete(SqliteMetadataStore.open(self.dir / "m.db"))

    def both(self, call: str, *args: Any, **kwargs: Any) -> Any:
        async def run(store: MetadataStore) -> Any:
            try:
                return await getattr(store, call)(*args, **kwargs)
            except MetadataStoreError as exc:
                return exc

        memory = self.loop.run_until_complete(run(self.memory))
        sqlite = self.loop.run_until_complete(run(self.sqlite))
        assert _shape(memory) == _shape(sqlite), (call, args, memory, sqlite)
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
        async def reopen() -> None:
            await self.memory.close()
            await self.sqlite.close()
            self.memory = MemoryMetadataStore(self.data)
            self.sqlite = await SqliteMetadataStore.open(self.dir / "m.db")

        self.loop.run_until_complete(reopen())

    @invariant()
    def same_tree(self) -> None:
        self.both("get_children", "/")

    def teardown(self) -> None:
        async def close() -> None:
            await self.memory.close()
            await self.sqlite.close()

        try:
            self.loop.run_until_complete(close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


BackendsAgree.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestBackendsAgree = BackendsAgree.TestCase
