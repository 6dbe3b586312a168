"""GroupTransfer (needAckNums, allAckInSyncStateSet, ordering, one timer) and ReplicatedStore, with a fake
ack source (SYNC_MASTER receipts over loopback are in test_ha_fake_store)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from quasar.replication.config import BrokerRole
from quasar.replication.group_transfer import GroupTransfer
from quasar.replication.store_adapter import ReplicatedStore
from quasar.storage.status import PutStatus

from ._helpers import eventually, fast_config
from .fakes import FakeStore

OK = PutStatus.PUT_OK


class FakeAcks:
    broker_id = 0

    def __init__(self) -> None:
        self.sync_state_set: frozenset[int] = frozenset({0})
        self.connected_slaves: frozenset[int] = frozenset()
        self.acked: dict[int, int] = {}
        self.in_sync = 0
        self.listeners: list[Callable[[int, int], None]] = []
        self.confirm_offset = 0

    def acked_offset(self, broker_id: int) -> int:
        return self.acked.get(broker_id, -1)

    def in_sync_slave_count(self) -> int:
        return self.in_sync

    def on_ack(self, listener: Callable[[int, int], None]) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def ack(self, broker_id: int, offset: int) -> None:
        self.acked[broker_id] = offset
        for listener in list(self.listeners):
            listener(broker_id, offset)


def sync_config(**overrides: object) -> object:
    return fast_config(**{"broker_role": BrokerRole.SYNC_MASTER, "slave_timeout_s": 0.2, **overrides})


async def test_alone_answers_at_once_and_no_slave_is_not_available_after_the_timeout() -> None:
    acks = FakeAcks()
    answers: list[PutStatus] = []
    GroupTransfer(acks, fast_config()).wait(10, answers.append)  # ASYNC config: needAckNums 1
    assert answers == [OK]
    transfer = GroupTransfer(acks, sync_config())
    transfer.wait(10, answers.append)
    assert answers == [OK]  # no slave in sync: the wait gives one a chance (slave_timeout_s) ...
    await eventually(lambda: len(answers) == 2, timeout_s=2)
    assert answers == [OK, PutStatus.SLAVE_NOT_AVAILABLE]  # ... then refuses clearly
    assert transfer.need_ack_nums() == 2


async def test_a_slave_back_within_the_timeout_completes_the_waits() -> None:
    acks = FakeAcks()
    transfer = GroupTransfer(acks, sync_config(slave_timeout_s=5.0))
    answers: list[PutStatus] = []
    transfer.wait(10, answers.append)
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    acks.ack(1, 10)
    assert answers == [OK]


async def test_waits_complete_in_offset_order_on_acks() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    transfer = GroupTransfer(acks, sync_config())
    answers: list[tuple[int, PutStatus]] = []
    for end in (10, 20, 30):
        transfer.wait(end, lambda status, end=end: answers.append((end, status)))
    assert answers == [] and transfer.pending == 3
    acks.ack(1, 20)
    assert answers == [(10, OK), (20, OK)]
    acks.ack(1, 35)
    assert answers[-1] == (30, OK) and transfer.pending == 0


async def test_every_sync_state_set_member_must_ack() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1, 2})
    acks.sync_state_set = frozenset({0, 1, 2})
    acks.in_sync = 2
    transfer = GroupTransfer(acks, sync_config())
    answers: list[PutStatus] = []
    transfer.wait(10, answers.append)
    acks.ack(1, 10)  # needAckNums (2) reached, but broker 2 of the set has not acked
    assert answers == []
    acks.ack(2, 10)
    assert answers == [OK]


async def test_timeout_with_one_timer_and_order_kept_for_decided_answers() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    transfer = GroupTransfer(acks, sync_config())
    answers: list[tuple[int, PutStatus]] = []
    transfer.wait(10, lambda s: answers.append((10, s)))
    acks.in_sync = 0  # the slave fell out of sync: the next answer is decided, but waits its turn
    transfer.wait(20, lambda s: answers.append((20, s)))
    assert answers == []
    await eventually(lambda: len(answers) == 2, timeout_s=2)
    # at the deadline no replica is in sync any more: both are refused as SLAVE_NOT_AVAILABLE, in order
    assert answers == [(10, PutStatus.SLAVE_NOT_AVAILABLE), (20, PutStatus.SLAVE_NOT_AVAILABLE)]


async def test_an_in_sync_slave_that_does_not_ack_times_out() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    transfer = GroupTransfer(acks, sync_config())
    answers: list[PutStatus] = []
    transfer.wait(10, answers.append)
    await eventually(lambda: len(answers) == 1, timeout_s=2)
    assert answers == [PutStatus.FLUSH_SLAVE_TIMEOUT]


async def test_auto_in_sync_replicas() -> None:
    acks = FakeAcks()
    config = sync_config(in_sync_replicas=3, min_in_sync_replicas=1, enable_auto_in_sync_replicas=True)
    transfer = GroupTransfer(acks, config)
    assert transfer.need_ack_nums() == 1  # nobody in sync: min(3, 1) then max(.., 1)
    acks.in_sync = 1
    assert transfer.need_ack_nums() == 2
    acks.in_sync = 5
    assert transfer.need_ack_nums() == 3


async def test_close_answers_service_not_available() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    transfer = GroupTransfer(acks, sync_config())
    answers: list[PutStatus] = []
    transfer.wait(10, answers.append)
    transfer.close()
    transfer.wait(20, answers.append)
    assert answers == [PutStatus.SERVICE_NOT_AVAILABLE] * 2 and not acks.listeners


class Wakeups:
    def __init__(self) -> None:
        self.count = 0

    def wakeup(self) -> None:
        self.count += 1


async def test_replicated_store_chains_flush_then_transfer() -> None:
    store = FakeStore()
    wakeups = Wakeups()
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    adapter = ReplicatedStore(store, wakeups, None)
    result = adapter.put("t", 0, b"x")
    adapter.put_batch("t", 0, [b"y", b"z"])
    assert wakeups.count == 2 and result.end_offset == store.max_commit_log_offset - 2 * (result.wrote_bytes)
    assert await adapter.wait_flushed(result.end_offset) is OK  # ASYNC: the store's own wait
    adapter.group_transfer = GroupTransfer(acks, sync_config())
    waiting = adapter.wait_flushed(result.end_offset)
    await asyncio.sleep(0.01)
    assert not asyncio.ensure_future(waiting).done()
    acks.ack(1, result.end_offset)
    assert await waiting is OK
    store.flush_status = PutStatus.FLUSH_DISK_TIMEOUT
    assert await adapter.wait_flushed(store.max_commit_log_offset) is PutStatus.FLUSH_DISK_TIMEOUT


async def test_needacknums_one_still_waits_for_a_listed_member_of_the_sync_state_set() -> None:
    acks = FakeAcks()
    acks.sync_state_set = frozenset({0, 1})  # slave 1 is listed (electable) but disconnected
    transfer = GroupTransfer(acks, sync_config(enable_auto_in_sync_replicas=True, min_in_sync_replicas=1))
    assert transfer.need_ack_nums() == 1
    answers: list[PutStatus] = []
    transfer.wait(10, answers.append)
    assert answers == []  # a receipt now could be lost if slave 1 were elected
    await eventually(lambda: len(answers) == 1, timeout_s=2)
    assert answers == [PutStatus.FLUSH_SLAVE_TIMEOUT]
    acks.sync_state_set = frozenset({0})  # the master shrank the set: alone, it answers at once
    transfer.wait(20, answers.append)
    assert answers == [PutStatus.FLUSH_SLAVE_TIMEOUT, OK]


async def test_writes_are_refused_before_the_append_once_an_outage_outlasts_the_slave_timeout() -> None:
    acks = FakeAcks()
    transfer = GroupTransfer(acks, sync_config(slave_timeout_s=0.2))
    store = FakeStore()
    adapter = ReplicatedStore(store, Wakeups(), transfer)
    assert transfer.refusing_writes is False  # the outage starts: stored, and waits (a blip)
    assert adapter.put("t", 0, b"a").status is OK
    await asyncio.sleep(0.3)
    assert transfer.refusing_writes is True  # it lasts: refused before anything is appended
    written = store.max_commit_log_offset
    assert adapter.put("t", 0, b"b").status is PutStatus.SLAVE_NOT_AVAILABLE
    assert adapter.put_batch("t", 0, [b"c"]).status is PutStatus.SLAVE_NOT_AVAILABLE
    assert adapter.put_unchecked("t", 0, b"journal").status is OK  # journal records are never refused
    assert store.max_commit_log_offset > written
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    acks.ack(1, 0)  # the slave is back (HAService notifies on connection and on REPORT)
    assert transfer.refusing_writes is False
    assert adapter.put("t", 0, b"d").status is OK
    transfer.close()


async def test_the_refusal_flag_flips_on_ack_and_connection_events_and_on_its_timer() -> None:
    acks = FakeAcks()
    acks.connected_slaves = frozenset({1})
    acks.in_sync = 1
    transfer = GroupTransfer(acks, sync_config(slave_timeout_s=0.2))
    assert transfer.refusing_writes is False and transfer._refusal_timer is None  # in sync: no clock runs
    # the slave disconnects: the event starts the outage clock, the flag stays down for slave_timeout_s
    acks.connected_slaves, acks.in_sync = frozenset(), 0
    acks.ack(1, 10)
    assert transfer.refusing_writes is False and transfer._refusal_timer is not None
    await asyncio.sleep(0.1)
    acks.ack(1, 10)  # another event during the outage does not restart the clock
    await eventually(lambda: transfer.refusing_writes, timeout_s=2)
    assert transfer._refusal_timer is None
    # a reconnection within the next outage's timeout cancels its timer: no refusal later
    acks.connected_slaves, acks.in_sync = frozenset({1}), 1
    acks.ack(1, 10)
    assert transfer.refusing_writes is False
    acks.connected_slaves, acks.in_sync = frozenset(), 0
    acks.ack(1, 10)
    acks.connected_slaves, acks.in_sync = frozenset({1}), 1
    acks.ack(1, 10)
    assert transfer._refusal_timer is None
    await asyncio.sleep(0.3)
    assert transfer.refusing_writes is False
    # a put finding the replicas too few (wait() re-reads who is in sync) starts the clock too
    acks.in_sync = 0  # e.g. the slave fell more than ha_max_gap_not_in_sync behind: no event for that
    answers: list[PutStatus] = []
    transfer.wait(20, answers.append)
    assert transfer._refusal_timer is not None
    await eventually(
        lambda: transfer.refusing_writes and answers == [PutStatus.SLAVE_NOT_AVAILABLE], timeout_s=2
    )
    # close owns the timer: cancelled with the transfer
    acks.in_sync = 1
    acks.ack(1, 30)
    acks.in_sync = 0
    acks.ack(1, 30)
    timer = transfer._refusal_timer
    assert timer is not None
    transfer.close()
    assert timer.cancelled() and transfer._refusal_timer is None and not acks.listeners
