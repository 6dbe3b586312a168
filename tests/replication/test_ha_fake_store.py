"""HAService + HAClient over loopback with the in-memory fake store: shipping, epochs, resync, refusals."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from quasar.replication.config import BrokerRole
from quasar.replication.group_transfer import GroupTransfer
from quasar.replication.ha_client import HAClient
from quasar.replication.ha_protocol import (
    Handshake,
    HandshakeStatus,
    Hello,
    encode_handshake,
    encode_hello,
    encode_report,
)
from quasar.replication.ha_service import HAService
from quasar.replication.store_adapter import ReplicatedStore
from quasar.storage.status import PutStatus

from ._helpers import eventually, fast_config
from .fakes import FakeStore


class Group:
    """One master store + HAService and one replica store + HAClient (started on demand)."""

    def __init__(self, **config: object) -> None:
        self.config = fast_config(**config)
        self.master = FakeStore()
        self.master.epoch_file.append(1, 0)
        self.replica = FakeStore()
        self.replica.set_replica_mode(True)
        self.epoch: int | None = 1
        self.service = HAService(self.master, group="g", epoch_source=lambda: self.epoch, config=self.config)
        self.clients: list[HAClient] = []

    async def start(self) -> None:
        await self.service.start("127.0.0.1", 0)

    def client(self, store: FakeStore | None = None, group: str = "g", broker_id: int = 1) -> HAClient:
        client = HAClient(
            store or self.replica,
            group=group,
            broker_id=broker_id,
            master_address=lambda: ("127.0.0.1", self.service.port),
            config=self.config,
        )
        client.start()
        self.clients.append(client)
        return client

    def publish(self, count: int, start: int = 0, topic: str = "t") -> None:
        for i in range(start, start + count):
            self.master.put(topic, i % 3, f"message-{i}".encode() * (1 + i % 5))
        self.service.wakeup()

    async def in_sync(self, replica: FakeStore | None = None) -> None:
        replica = replica or self.replica
        await eventually(lambda: replica.data == self.master.data, what="replica bytes equal the master's")

    async def close(self) -> None:
        for client in self.clients:
            await client.stop()
        await self.service.stop()


@pytest.fixture
async def group() -> AsyncIterator[Group]:
    g = Group(ha_transfer_batch_size=256)
    await g.start()
    yield g
    await g.close()


async def test_replica_follows_puts_byte_for_byte(group: Group) -> None:
    group.publish(50)
    client = group.client()
    await group.in_sync()
    assert client.connected
    group.publish(100, start=50)
    await group.in_sync()
    assert group.replica.queues == group.master.queues
    assert group.replica.epoch_file.entries == group.master.epoch_file.entries
    await eventually(lambda: group.service.acked_offsets.get(1) == group.master.max_commit_log_offset)
    assert group.service.connected_slaves == {1}
    assert group.service.is_slave_in_sync(1)


async def test_transfers_stop_at_epoch_boundaries(group: Group) -> None:
    group.publish(10)
    boundary = group.master.max_commit_log_offset
    group.master.epoch_file.append(3, boundary)
    group.epoch = 3
    group.publish(10, start=10)
    seen: list[tuple[int, int]] = []
    original = group.replica.append_replicated

    def spy(offset: int, data: bytes | bytearray | memoryview) -> int:
        seen.append((offset, offset + len(data)))
        return original(offset, data)

    group.replica.append_replicated = spy  # type: ignore[method-assign]
    client = group.client()
    await group.in_sync()
    assert all(not (start < boundary < end) for start, end in seen)
    assert group.replica.epoch_file.entries == group.master.epoch_file.entries
    assert client.master_epoch == 3


async def test_restarted_client_resumes_from_its_offset(group: Group) -> None:
    group.publish(20)
    client = group.client()
    await group.in_sync()
    await client.stop()
    resumed_at = group.replica.max_commit_log_offset
    group.publish(20, start=20)
    reports: list[int] = []
    group.service.on_ack(lambda broker, offset: reports.append(offset))
    group.client()
    await group.in_sync()
    assert reports[0] == resumed_at
    assert group.replica.queues == group.master.queues


async def test_offset_mismatch_closes_and_resyncs(group: Group) -> None:
    group.publish(5)
    client = group.client()
    await group.in_sync()
    offset = group.master.max_commit_log_offset
    group.master.put("t", 0, b"next")  # no wakeup yet: the replica gets the same bytes from elsewhere first
    group.replica.append_replicated(offset, group.master.read_commit_log(offset, 1 << 20))
    group.service.wakeup()  # the master now ships bytes at an offset the replica already passed
    await eventually(lambda: client.sessions >= 2, what="a second session")
    group.publish(5, start=6)
    await group.in_sync()


async def test_wrong_group_and_not_master_are_refused(group: Group) -> None:
    group.publish(3)
    stranger = FakeStore()
    stranger.set_replica_mode(True)
    wrong = group.client(stranger, group="other", broker_id=7)
    await asyncio.sleep(0.2)
    assert not wrong.connected and wrong.sessions == 0
    await wrong.stop()
    group.epoch = None  # this broker is no longer the master
    client = group.client()
    await asyncio.sleep(0.2)
    assert client.sessions == 0 and group.replica.max_commit_log_offset == 0
    group.epoch = 1
    await group.in_sync()


async def test_connections_close_when_the_master_steps_down(group: Group) -> None:
    group.publish(3)
    client = group.client()
    await group.in_sync()
    group.master.set_replica_mode(True)
    await eventually(lambda: not group.service.connected_slaves, what="the slave dropped")
    assert client.sessions == 1 or not client.connected


async def test_report_beyond_the_masters_offset_closes_the_connection(group: Group) -> None:
    group.publish(3)
    reader, writer = await asyncio.open_connection("127.0.0.1", group.service.port)
    try:
        writer.write(encode_hello(Hello(group="g", broker_id=9, max_offset=0)))
        writer.write(encode_report(group.master.max_commit_log_offset + 100))
        await writer.drain()
        async with asyncio.timeout(2):
            data = await reader.read()  # the handshake, then the end of the stream
        assert data[:4] == b"QHA1" and struct.unpack_from(">i", data, 4)[0] == 0
        assert 9 not in group.service.connected_slaves
    finally:
        writer.close()


async def test_garbage_closes_the_connection(group: Group) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", group.service.port)
    try:
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(2):
            assert await reader.read() == b""
    finally:
        writer.close()


async def test_diverged_tail_is_truncated_to_the_consistent_point(group: Group) -> None:
    # old master A replicates to B, then writes a tail B never gets
    a, b = group.master, group.replica
    group.publish(10)
    client = group.client()
    await group.in_sync()
    await client.stop()
    common = b.max_commit_log_offset
    group.publish(5, start=100)
    diverged_end = a.max_commit_log_offset
    await group.service.stop()
    # B is elected at epoch 2 and writes; A returns as a slave of B
    b.set_replica_mode(False)
    b.epoch_file.append(2, b.max_commit_log_offset)
    for i in range(7):
        b.put("t", 0, f"new-{i}".encode())
    a.set_replica_mode(True)
    service_b = HAService(b, group="g", epoch_source=lambda: 2, config=group.config)
    await service_b.start("127.0.0.1", 0)
    try:
        returning = HAClient(
            a,
            group="g",
            broker_id=0,
            master_address=lambda: ("127.0.0.1", service_b.port),
            config=group.config,
        )
        returning.start()
        try:
            await eventually(lambda: a.data == b.data, what="A equals B")
            assert returning.truncations == [(diverged_end, common)]
            assert a.epoch_file.entries == b.epoch_file.entries
            assert a.queues == b.queues
        finally:
            await returning.stop()
    finally:
        await service_b.stop()


async def test_no_common_epoch_with_data_is_refused(group: Group) -> None:
    group.publish(3)
    stray = FakeStore()
    stray.epoch_file.append(5, 0)
    stray.put("x", 0, b"mine")
    stray.set_replica_mode(True)
    client = group.client(stray, broker_id=4)
    await eventually(lambda: client.diverged, what="the divergence to be seen")
    assert not client.connected and stray.data.endswith(b"mine")


async def test_sync_master_over_loopback() -> None:
    config = fast_config(broker_role=BrokerRole.SYNC_MASTER, slave_timeout_s=0.3)
    master, replica = FakeStore(), FakeStore()
    master.epoch_file.append(1, 0)
    replica.set_replica_mode(True)
    service = HAService(master, group="g", epoch_source=lambda: 1, config=config)
    await service.start("127.0.0.1", 0)
    transfer = GroupTransfer(service, config)
    adapter = ReplicatedStore(master, service, transfer)
    client = HAClient(
        replica, group="g", broker_id=1, master_address=lambda: ("127.0.0.1", service.port), config=config
    )
    try:
        result = adapter.put("t", 0, b"before any slave")
        assert await adapter.wait_flushed(result.end_offset) is PutStatus.SLAVE_NOT_AVAILABLE
        client.start()
        await eventually(lambda: service.is_slave_in_sync(1), what="the slave in sync")
        acked_before: list[int] = []
        service.on_ack(lambda broker, offset: acked_before.append(offset))
        result = adapter.put("t", 0, b"acked")
        status = await adapter.wait_flushed(result.end_offset)
        assert status is PutStatus.PUT_OK and replica.data == master.data
        assert max(acked_before) >= result.end_offset
        await eventually(lambda: 1 in service.sync_state_set, what="the slave joins the sync-state set")
        assert transfer.confirm_offset == master.max_commit_log_offset
        # the slave stops reading: receipts time out
        assert client._writer is not None
        client._writer.transport.pause_reading()
        result = adapter.put("t", 0, b"x" * 300_000)
        assert await adapter.wait_flushed(result.end_offset) is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert transfer.confirm_offset < master.max_commit_log_offset
        client._writer.transport.resume_reading()
        await eventually(lambda: replica.data == master.data)
    finally:
        await client.stop()
        await service.stop()


async def test_master_sends_heartbeats_and_closes_a_silent_slave() -> None:
    config = fast_config(ha_send_heartbeat_interval_s=0.1, ha_housekeeping_interval_s=0.5)
    master = FakeStore()
    master.epoch_file.append(1, 0)
    service = HAService(master, group="g", epoch_source=lambda: 1, config=config)
    await service.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
    try:
        writer.write(encode_hello(Hello(group="g", broker_id=3, max_offset=0)) + encode_report(0))
        await writer.drain()
        async with asyncio.timeout(3):
            data = await reader.read()  # handshake, heartbeats, then the end of the stream (no REPORTs sent)
        handshake_size = 4 + 4 + 4 + 8 + 4 + 12
        heartbeats = data[handshake_size:]
        assert len(heartbeats) >= 64 and len(heartbeats) % 32 == 0
        assert struct.unpack_from(">qiqqi", heartbeats, 0) == (0, 1, 0, 0, 0)
        assert not service.connected_slaves
    finally:
        writer.close()
        await service.stop()


async def test_client_closes_a_silent_master_and_reconnects() -> None:
    config = fast_config(ha_send_heartbeat_interval_s=0.1, ha_housekeeping_interval_s=0.3)
    accepted: list[asyncio.StreamWriter] = []

    async def silent_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read(100)  # the HELLO
        writer.write(encode_handshake(Handshake(status=HandshakeStatus.OK, master_epoch=1, max_offset=0)))
        await writer.drain()
        while await reader.read(100):  # REPORTs; never a TRANSFER back, until the client gives up
            pass
        writer.close()

    server = await asyncio.start_server(silent_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    replica = FakeStore()
    replica.set_replica_mode(True)
    client = HAClient(
        replica, group="g", broker_id=1, master_address=lambda: ("127.0.0.1", port), config=config
    )
    client.start()
    try:
        await eventually(lambda: client.sessions >= 2, timeout_s=3, what="a reconnection after silence")
    finally:
        await client.stop()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
