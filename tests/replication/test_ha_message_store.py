"""Replication between two real MessageStores in one process over loopback: byte-identical commit log
segments, equal consume queues, SYNC_MASTER receipts, restart/resume, and a diverged tail truncated away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from quasar.replication.config import BrokerRole, ReplicationConfig
from quasar.replication.group_transfer import GroupTransfer
from quasar.replication.ha_client import HAClient
from quasar.replication.ha_service import HAService
from quasar.replication.store_adapter import ReplicatedStore
from quasar.storage import MessageStore, StoreConfig
from quasar.storage.status import PutStatus

from ._helpers import eventually, fast_config

SEGMENT_SIZE = 4096


def open_store(root: Path) -> MessageStore:
    store = MessageStore(
        StoreConfig(
            root_dir=root,
            commit_log_file_size=SEGMENT_SIZE,
            consume_queue_file_size=200,
            max_hash_slot_num=64,
            max_index_num=100,
        )
    )
    store.open()
    return store


def body(i: int) -> bytes:
    return f"message-{i:05d}|".encode() * (1 + i % 7)


def segments(store: MessageStore) -> dict[str, bytes]:
    """Segment name -> content, for the segments below the max offset."""
    directory = store.config.root_dir / "commitlog"
    end = store.max_commit_log_offset
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if int(p.name) < end}


def queue_contents(store: MessageStore) -> dict[tuple[str, int], list[bytes]]:
    contents = {}
    for topic, queue_id in store.queues():
        result = store.get(topic, queue_id, store.min_queue_offset(topic, queue_id), 10_000, 1 << 30)
        contents[(topic, queue_id)] = [bytes(m.body) for m in result.messages]
    return contents


class Pair:
    def __init__(self, tmp_path: Path, config: ReplicationConfig) -> None:
        self.config = config
        self.tmp_path = tmp_path
        self.master = open_store(tmp_path / "master")
        self.replica = open_store(tmp_path / "replica")
        self.service: HAService | None = None
        self.client: HAClient | None = None

    async def start(self) -> None:
        await self.master.start()
        await self.replica.start()
        self.master.epoch_file.append(1, self.master.max_commit_log_offset)
        self.replica.set_replica_mode(True)
        self.service = HAService(self.master, group="g", epoch_source=lambda: 1, config=self.config)
        await self.service.start("127.0.0.1", 0)

    def start_client(self, store: MessageStore | None = None) -> HAClient:
        service = self.service
        assert service is not None
        self.client = HAClient(
            store or self.replica,
            group="g",
            broker_id=1,
            master_address=lambda: ("127.0.0.1", service.port),
            config=self.config,
        )
        self.client.start()
        return self.client

    async def caught_up(self) -> None:
        await eventually(
            lambda: self.replica.max_commit_log_offset == self.master.max_commit_log_offset,
            what="the replica at the master's max offset",
        )

    def assert_equal(self) -> None:
        assert segments(self.replica) == segments(self.master)
        assert queue_contents(self.replica) == queue_contents(self.master)
        assert self.replica.epoch_file.entries == self.master.epoch_file.entries

    async def close(self) -> None:
        if self.client is not None:
            await self.client.stop()
        if self.service is not None:
            await self.service.stop()
        await self.master.close()
        await self.replica.close()


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    p = Pair(tmp_path, fast_config(ha_transfer_batch_size=1024))
    await p.start()
    yield p
    await p.close()


def publish(store: MessageStore, wake: HAService | None, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        if i % 10 == 9:
            result = store.put_batch(f"t{i % 3}", 0, [body(i), body(i + 1), body(i + 2)])
        else:
            result = store.put(f"t{i % 3}", i % 2, body(i), properties={"k": str(i)})
        assert result.status is PutStatus.PUT_OK
    if wake is not None:
        wake.wakeup()


async def test_replica_segments_are_byte_identical(pair: Pair) -> None:
    publish(pair.master, pair.service, 120)
    pair.start_client()
    await pair.caught_up()
    publish(pair.master, pair.service, 120, start=120)
    await pair.caught_up()
    assert pair.master.max_commit_log_offset > 3 * SEGMENT_SIZE
    pair.assert_equal()


async def test_restarted_client_resumes(pair: Pair) -> None:
    publish(pair.master, pair.service, 50)
    client = pair.start_client()
    await pair.caught_up()
    await client.stop()
    publish(pair.master, pair.service, 50, start=50)
    client = pair.start_client()
    await pair.caught_up()
    assert client.truncations == []
    pair.assert_equal()


async def test_sync_master_receipts(tmp_path: Path) -> None:
    config = fast_config(broker_role=BrokerRole.SYNC_MASTER, slave_timeout_s=0.3)
    pair = Pair(tmp_path, config)
    await pair.start()
    try:
        assert pair.service is not None
        transfer = GroupTransfer(pair.service, config)
        adapter = ReplicatedStore(pair.master, pair.service, transfer)
        result = adapter.put("t", 0, b"alone")
        assert await adapter.wait_flushed(result.end_offset) is PutStatus.SLAVE_NOT_AVAILABLE
        client = pair.start_client()
        await eventually(lambda: pair.service is not None and pair.service.is_slave_in_sync(1))
        results = [adapter.put("t", 0, body(i)) for i in range(20)]
        statuses = await asyncio.gather(*(adapter.wait_flushed(r.end_offset) for r in results))
        assert set(statuses) == {PutStatus.PUT_OK}
        assert pair.service.acked_offset(1) >= results[-1].end_offset
        assert client._writer is not None
        client._writer.transport.pause_reading()
        big = adapter.put("t", 0, b"x" * 3000)
        for i in range(200):
            adapter.put("t", 1, body(i))
        assert await adapter.wait_flushed(big.end_offset) is PutStatus.FLUSH_SLAVE_TIMEOUT
        client._writer.transport.resume_reading()
        await pair.caught_up()
        pair.assert_equal()
    finally:
        await pair.close()


async def test_diverged_tail_is_truncated(pair: Pair) -> None:
    old_master, new_master = pair.master, pair.replica
    publish(old_master, pair.service, 40)
    client = pair.start_client()
    await pair.caught_up()
    await client.stop()
    common = new_master.max_commit_log_offset
    publish(old_master, pair.service, 30, start=40)  # a tail the replica never gets
    diverged_end = old_master.max_commit_log_offset
    assert pair.service is not None
    await pair.service.stop()
    # the replica is elected at epoch 2 and writes different data; the old master returns as its slave
    new_master.set_replica_mode(False)
    new_master.epoch_file.append(2, new_master.max_commit_log_offset)
    publish(new_master, None, 45, start=1000)
    old_master.set_replica_mode(True)
    service = HAService(new_master, group="g", epoch_source=lambda: 2, config=pair.config)
    await service.start("127.0.0.1", 0)
    returning = HAClient(
        old_master,
        group="g",
        broker_id=0,
        master_address=lambda: ("127.0.0.1", service.port),
        config=pair.config,
    )
    returning.start()
    try:
        await eventually(lambda: old_master.max_commit_log_offset == new_master.max_commit_log_offset)
        assert returning.truncations == [(diverged_end, common)]
        assert segments(old_master) == segments(new_master)
        assert queue_contents(old_master) == queue_contents(new_master)
        assert old_master.epoch_file.entries == new_master.epoch_file.entries
    finally:
        await returning.stop()
        await service.stop()


async def test_offset_mismatch_closes_and_resyncs(pair: Pair) -> None:
    publish(pair.master, pair.service, 10)
    client = pair.start_client()
    await pair.caught_up()
    offset = pair.master.max_commit_log_offset
    publish(pair.master, None, 3, start=10)  # not shipped yet: the replica gets the same bytes first
    pair.replica.append_replicated(offset, pair.master.read_commit_log(offset, 1 << 20))
    assert pair.service is not None
    pair.service.wakeup()  # the master ships at an offset the replica already passed: close, then resync
    await eventually(lambda: client.sessions >= 2, what="a second session")
    publish(pair.master, pair.service, 10, start=20)
    await pair.caught_up()
    pair.assert_equal()
