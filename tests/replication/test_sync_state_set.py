"""The master's sync-state set: grows when a slave caught up, shrinks when it stops catching up, stops on
fencing; removals are applied locally only after the store accepted them."""

from __future__ import annotations

import asyncio

from quasar.replication.ha_client import HAClient
from quasar.replication.ha_service import HAService

from ._helpers import eventually, fast_config
from .fakes import FakeStore


class RecordingSetStore:
    def __init__(self) -> None:
        self.calls: list[frozenset[int]] = []
        self.answer = True
        self.gate: asyncio.Event | None = None

    async def alter(self, new_set: frozenset[int]) -> bool:
        self.calls.append(new_set)
        if self.gate is not None:
            await self.gate.wait()
        return self.answer


async def start(set_store: RecordingSetStore, **config: object) -> tuple[HAService, FakeStore, FakeStore]:
    master, replica = FakeStore(), FakeStore()
    master.epoch_file.append(1, 0)
    replica.set_replica_mode(True)
    service = HAService(
        master,
        group="g",
        epoch_source=lambda: 1,
        config=fast_config(ha_max_time_slave_not_catchup_s=0.4, **config),
        sync_state_set_store=set_store,
    )
    await service.start("127.0.0.1", 0)
    return service, master, replica


def client_for(service: HAService, replica: FakeStore) -> HAClient:
    client = HAClient(
        replica,
        group="g",
        broker_id=1,
        master_address=lambda: ("127.0.0.1", service.port),
        config=service.config,
    )
    client.start()
    return client


async def test_grow_then_shrink_after_disconnection() -> None:
    set_store = RecordingSetStore()
    service, master, replica = await start(set_store)
    client = client_for(service, replica)
    try:
        master.put("t", 0, b"a")
        service.wakeup()
        await eventually(lambda: service.recorded_sync_state_set == {0, 1}, what="the slave joins")
        assert set_store.calls[0] == {0, 1}
        await client.stop()
        await eventually(lambda: service.sync_state_set == {0}, what="the slave leaves", timeout_s=3)
        assert set_store.calls[-1] == {0}
        assert not service.fenced
    finally:
        await client.stop()
        await service.stop()


async def test_addition_counts_while_pending_and_removal_only_after_acceptance() -> None:
    set_store = RecordingSetStore()
    set_store.gate = asyncio.Event()
    service, _, replica = await start(set_store)
    client = client_for(service, replica)
    try:
        await eventually(lambda: bool(set_store.calls), what="an alter call")
        assert service.sync_state_set == {0, 1} and service.recorded_sync_state_set == {0}
        set_store.gate.set()
        await eventually(lambda: service.recorded_sync_state_set == {0, 1})
        set_store.gate = asyncio.Event()
        await client.stop()
        await eventually(lambda: set_store.calls[-1] == {0}, what="a removal asked", timeout_s=3)
        assert service.sync_state_set == {0, 1}  # still counted until the store accepted
        set_store.gate.set()
        await eventually(lambda: service.sync_state_set == {0})
    finally:
        if set_store.gate is not None:
            set_store.gate.set()
        await client.stop()
        await service.stop()


async def test_a_refused_change_fences_the_master() -> None:
    set_store = RecordingSetStore()
    set_store.answer = False
    service, master, replica = await start(set_store)
    client = client_for(service, replica)
    try:
        await eventually(lambda: service.fenced, what="fenced")
        assert service.sync_state_set == {0}
        calls = len(set_store.calls)
        master.put("t", 0, b"more")
        service.wakeup()
        await eventually(lambda: replica.data == master.data)
        await asyncio.sleep(0.1)
        assert len(set_store.calls) == calls  # no more changes once fenced
    finally:
        await client.stop()
        await service.stop()
