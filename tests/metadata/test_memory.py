"""MemoryMetadataStore specifics: sessions over shared data, fault injection (and the testing fake)."""

from __future__ import annotations

import asyncio

import pytest

from quasar.metadata import InvalidArgumentError, MetadataStoreError, NotificationType, Put
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.testing.fake_store import FakeMetadataStore, FakeStoreError


async def test_sessions_share_paths_but_own_their_ephemerals():
    data = MemoryData()
    broker_a, broker_b = MemoryMetadataStore(data), MemoryMetadataStore(data)
    seen_by_b: list[tuple[NotificationType, str]] = []
    broker_b.register_listener(lambda n: seen_by_b.append((n.type, n.path)))
    await broker_a.put("/owner/topic-1", b"a", ephemeral=True)
    await broker_b.put("/owner/topic-2", b"b", ephemeral=True)
    got = await broker_b.get("/owner/topic-1")
    assert got is not None and got.value == b"a"
    await broker_a.close()  # broker a's session ends: only its ephemeral path goes
    await asyncio.sleep(0)
    assert await broker_b.get_children("/owner") == ["topic-2"]
    assert (NotificationType.CREATED, "/owner/topic-1") in seen_by_b
    assert (NotificationType.DELETED, "/owner/topic-1") in seen_by_b
    await broker_b.close()
    assert MemoryMetadataStore(data).data.records == {}


async def test_fail_next_writes():
    store = MemoryMetadataStore()
    await store.put("/a", b"0")
    assert store.write_count == 1
    store.fail_next_writes(2)
    with pytest.raises(MetadataStoreError, match="injected"):
        await store.put("/a", b"1")
    custom = MetadataStoreError("disk gone")
    store.fail_next_writes(1, custom)
    with pytest.raises(MetadataStoreError) as raised:
        await store.multi([Put("/b", b"")])
    assert raised.value is custom
    got = await store.get("/a")  # reads are never failed; nothing was written
    assert got is not None and got.value == b"0" and not await store.exists("/b")
    await store.put("/a", b"2")
    assert store.write_count == 2
    with pytest.raises(InvalidArgumentError):
        store.fail_next_writes(-1)


async def test_fake_metadata_store_is_the_memory_backend_with_fail_writes():
    fake = FakeMetadataStore()
    await fake.put("/x/1", b"")
    await fake.put("/y", b"")
    fake.fail_writes(1)
    with pytest.raises(FakeStoreError):
        await fake.delete("/y")
    assert isinstance(FakeStoreError("x"), MetadataStoreError)
    assert fake.keys() == ["/x/1", "/y"] and fake.keys("/x") == ["/x/1"]
