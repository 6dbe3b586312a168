"""A broker group's state and leader key (quasar.replication.group_state) and the campaign order
(quasar.replication.election.campaign_rank), on a REAL etcd (one store session per simulated broker, lease
TTL 2 s) and on the memory backend (sessions that cannot expire: the pure transaction logic). The campaign
loop itself is ReplicaNode's, exercised with broker processes in test_failover.

Every wait is bounded in time and count; every store and process opened is closed.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aetcd
import pytest

from quasar.metadata import MetadataStore, SessionEvent, decode_json
from quasar.metadata.etcd import EtcdMetadataStore
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.replication.election import campaign_rank
from quasar.replication.group_state import (
    GroupLeadership,
    GroupState,
    GroupStateError,
    LeaderInfo,
    NothingToFailOverError,
    NotMasterError,
    leader_path,
    state_path,
)
from quasar.testing.etcd import EtcdProcess, etcd_available

NO_ETCD = "no etcd binary on PATH: install Debian's etcd-server (bash scripts/ensure_etcd.sh)"
GROUP = "broker-a/1"  # a '/' in the name: the path segment is encoded


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    if not etcd_available():
        pytest.skip(NO_ETCD)
    process = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


class Cluster:
    """Brokers of one group, each with its own metadata store session over shared data (an etcd prefix, or
    one MemoryData)."""

    def __init__(self, kind: str, etcd: EtcdProcess | None) -> None:
        self.kind = kind
        self.etcd = etcd
        self.prefix = f"/test-{uuid.uuid4().hex[:12]}"
        self.data = MemoryData()
        self.stores: list[MetadataStore] = []
        self.handles: list[GroupLeadership] = []

    async def store(self) -> MetadataStore:
        store: MetadataStore
        if self.kind == "etcd":
            assert self.etcd is not None
            store = await EtcdMetadataStore.open(self.etcd.endpoint, prefix=self.prefix, session_ttl_s=2)
        else:
            store = MemoryMetadataStore(self.data)
        self.stores.append(store)
        return store

    async def broker(self, broker_id: int) -> GroupLeadership:
        handle = GroupLeadership(await self.store(), GROUP, broker_id, address=f"10.0.0.{broker_id}:10912")
        self.handles.append(handle)
        return handle

    async def close(self) -> None:
        for handle in self.handles:
            await handle.close()
        for store in self.stores:
            await store.close()


@pytest.fixture(params=["memory", "etcd"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    etcd = request.getfixturevalue("etcd_server") if request.param == "etcd" else None
    made = Cluster(request.param, etcd)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def etcd_cluster(etcd_server: EtcdProcess) -> AsyncIterator[Cluster]:
    made = Cluster("etcd", etcd_server)
    try:
        yield made
    finally:
        await made.close()


async def eventually(check: Callable[[], Awaitable[bool] | bool], what: str, timeout_s: float = 8.0) -> None:
    """Poll ``check`` every 20 ms until it is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.02) + 1):
        result = check()
        if await result if isinstance(result, Awaitable) else result:
            return
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {timeout_s} s: {what}")


async def group_of(
    cluster: Cluster, *ids: int, in_sync: frozenset[int] | None = None
) -> list[GroupLeadership]:
    """Brokers ``ids``; the first bootstraps as master, then the SyncStateSet becomes ``in_sync``."""
    brokers = [await cluster.broker(i) for i in ids]
    state = await brokers[0].try_acquire(bootstrap=True)
    assert state is not None
    if in_sync is not None:
        assert await brokers[0].alter_sync_state_set(in_sync, state) is not None
    return brokers


async def kill_session(cluster: Cluster, handle: GroupLeadership) -> None:
    """The broker's session ends without a resign (its store is closed: etcd revokes the lease, memory drops
    the session's ephemeral paths)."""
    await handle.close()
    await handle.metadata.close()


# -- the transactions -------------------------------------------------------------------------------------------


async def test_bootstrap_creates_epoch_1(cluster: Cluster):
    master, slave = await cluster.broker(0), await cluster.broker(1)
    assert await master.read() == (None, None)
    assert await master.try_acquire() is None  # no state and no bootstrap: nobody may start the group
    state = await master.try_acquire(bootstrap=True)
    assert state == GroupState(
        epoch=1, master=0, sync_state_set=frozenset({0}), sync_state_set_epoch=1, version=0
    )
    assert master.is_master and master.master_epoch == 1
    read_state, leader = await slave.read()
    assert read_state == state
    assert leader is not None and (leader.broker_id, leader.epoch, leader.address) == (0, 1, "10.0.0.0:10912")
    assert abs(leader.since_ms - time.time() * 1000) < 60_000
    # the stored shapes, under the encoded group name
    assert state_path(GROUP) == "/cluster/groups/broker-a%2F1/state"
    raw = await slave.metadata.get(state_path(GROUP))
    assert raw is not None and decode_json("", raw.value) == {
        "epoch": 1, "master": 0, "sync_state_set": [0], "sync_state_set_epoch": 1,
    }  # fmt: skip
    raw_leader = await slave.metadata.get(leader_path(GROUP))
    assert raw_leader is not None and raw_leader.stat.ephemeral
    assert set(decode_json("", raw_leader.value)) == {"broker_id", "epoch", "address", "since_ms"}
    # a second bootstrap finds the state: the slave is not in the set
    assert await slave.try_acquire(bootstrap=True) is None
    assert not slave.is_master


async def test_nobody_acquires_while_the_leader_lives(cluster: Cluster):
    master, slave, other = await group_of(cluster, 0, 1, 2, in_sync=frozenset({0, 1}))
    assert await slave.try_acquire() is None
    assert await other.try_acquire(unclean=True) is None
    assert await master.try_acquire() == (await master.read())[0]  # idempotent for the holder
    state, leader = await slave.read()
    assert state is not None and state.epoch == 1 and leader is not None and leader.broker_id == 0


async def test_alter_sync_state_set_grows_shrinks_and_checks(cluster: Cluster):
    (master,) = await group_of(cluster, 0)
    state, _ = await master.read()
    assert state is not None
    grown = await master.alter_sync_state_set(frozenset({0, 1}), state)
    assert grown is not None and grown.sync_state_set == {0, 1}
    assert (grown.epoch, grown.sync_state_set_epoch, grown.master) == (1, 2, 0)
    assert (await master.read())[0] == grown
    grown = await master.alter_sync_state_set(frozenset({0, 1, 2}), grown)
    assert grown is not None
    shrunk = await master.alter_sync_state_set(frozenset({0, 2}), grown)
    assert shrunk is not None and shrunk.sync_state_set == {0, 2} and shrunk.sync_state_set_epoch == 4
    assert await master.alter_sync_state_set(frozenset({0, 2}), shrunk) == shrunk  # no change, no write
    assert await master.alter_sync_state_set(frozenset({0, 1}), grown) is None  # stale expected state
    with pytest.raises(GroupStateError, match="must contain the master"):
        await master.alter_sync_state_set(frozenset({1, 2}), shrunk)
    assert master.is_master  # an alter keeps the leadership (the leader key is rewritten, still ours)
    _, leader = await master.read()
    assert leader is not None and leader.broker_id == 0 and leader.epoch == 1


async def test_in_sync_slave_takes_over_a_dead_master(cluster: Cluster):
    master, slave, outsider = await group_of(cluster, 0, 1, 2, in_sync=frozenset({0, 1}))
    await kill_session(cluster, master)
    await eventually(lambda: _leader_absent(slave), "the dead master's leader key is gone")
    assert await outsider.try_acquire() is None  # not in the SyncStateSet: never elected (clean)
    state = await slave.try_acquire()
    assert state is not None
    assert (state.epoch, state.master, state.sync_state_set, state.sync_state_set_epoch) == (2, 1, {1}, 3)
    _, leader = await outsider.read()
    assert leader is not None and (leader.broker_id, leader.epoch) == (1, 2)


async def test_unclean_election_of_a_broker_outside_the_set(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
):
    master, outsider = await group_of(cluster, 0, 2)
    await kill_session(cluster, master)
    await eventually(lambda: _leader_absent(outsider), "the dead master's leader key is gone")
    assert await outsider.try_acquire() is None
    with caplog.at_level(logging.WARNING, logger="quasar.replication.group_state"):
        state = await outsider.try_acquire(unclean=True)
    assert state is not None and state.master == 2 and state.epoch == 2 and state.sync_state_set == {2}
    assert "UNCLEAN election" in caplog.text


async def test_exactly_one_of_two_racing_candidates_wins(cluster: Cluster):
    master, first, second = await group_of(cluster, 0, 1, 2, in_sync=frozenset({0, 1, 2}))
    await kill_session(cluster, master)
    await eventually(lambda: _leader_absent(first), "the dead master's leader key is gone")
    for _ in range(3):  # a few rounds: each is one race of two campaigns
        results = await asyncio.gather(first.try_acquire(), second.try_acquire())
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        winner = first if results[0] is not None else second
        loser = second if winner is first else first
        assert winner.is_master and not loser.is_master
        state = winners[0]
        again = await winner.alter_sync_state_set(frozenset({1, 2}), state)  # both in sync again
        assert again is not None
        await winner.resign()
        await eventually(lambda: _leader_absent(first), "the resigned key is gone")


async def test_a_stale_master_is_fenced(cluster: Cluster):
    master, slave = await group_of(cluster, 0, 1, in_sync=frozenset({0, 1}))
    stale, _ = await master.read()
    assert stale is not None
    lost: list[tuple[int, str]] = []
    master.on_leadership_lost(lambda epoch, reason: lost.append((epoch, reason)))
    master.watch(lambda _s, _l: None)
    # the master's key disappears behind its back (its lease expired at etcd, say), a slave is elected
    admin = await cluster.store()
    await admin.delete(leader_path(GROUP))
    new = await slave.try_acquire()
    assert new is not None and new.epoch == 2
    assert await master.alter_sync_state_set(frozenset({0, 1}), stale) is None
    assert await master.alter_sync_state_set(frozenset({0}), stale) is None
    await eventually(lambda: bool(lost), "the old master is told it lost the leadership")
    assert lost[0][0] == 1 and not master.is_master
    # the new master's alter is refused on an expected state older than its own
    assert await slave.alter_sync_state_set(frozenset({0, 1}), stale) is None
    assert await slave.alter_sync_state_set(frozenset({0, 1}), new) is not None


async def test_resign_deletes_only_my_key(cluster: Cluster):
    master, slave = await group_of(cluster, 0, 1, in_sync=frozenset({0, 1}))
    await slave.resign()  # not the master: nothing happens
    assert (await slave.read())[1] is not None
    lost: list[str] = []
    master.on_leadership_lost(lambda _epoch, reason: lost.append(reason))
    await master.resign()
    assert lost == ["resigned"] and not master.is_master
    state, leader = await slave.read()
    assert leader is None and state is not None and state.master == 0  # the state stays: members may campaign
    await master.resign()  # idempotent


async def test_request_failover_hands_over_to_the_in_sync_slave(cluster: Cluster):
    master, slave, outsider = await group_of(cluster, 0, 1, 2)
    with pytest.raises(NothingToFailOverError, match="no slave is in the SyncStateSet"):
        await master.request_failover()
    assert master.is_master  # refused: nothing changed
    with pytest.raises(NotMasterError):
        await slave.request_failover()
    state, _ = await master.read()
    assert state is not None and await master.alter_sync_state_set(frozenset({0, 1}), state) is not None
    await master.request_failover(hold_off_s=5.0)
    assert not master.is_master and master.hold_off_remaining_s() > 4.0
    assert await outsider.try_acquire() is None
    new = await slave.try_acquire()
    assert new is not None and (new.master, new.epoch, new.sync_state_set) == (1, 2, {1})


async def test_watch_reports_changes(cluster: Cluster):
    master, slave = await group_of(cluster, 0, 1)
    seen: list[tuple[GroupState | None, LeaderInfo | None]] = []
    unwatch = slave.watch(lambda state, leader: seen.append((state, leader)))
    await eventually(lambda: bool(seen), "the first view")
    state = seen[-1][0]
    assert state is not None and state.sync_state_set == {0}
    assert await master.alter_sync_state_set(frozenset({0, 1}), state) is not None
    await eventually(lambda: seen[-1][0] is not None and seen[-1][0].sync_state_set == {0, 1}, "the alter")
    await master.resign()
    await eventually(lambda: seen[-1][1] is None, "the resignation")
    unwatch()
    count = len(seen)
    await slave.try_acquire()
    await asyncio.sleep(0.2)
    assert len(seen) == count


# -- the campaign order -----------------------------------------------------------------------------------------


def test_campaign_rank():
    state = GroupState(
        epoch=3, master=0, sync_state_set=frozenset({0, 2, 5}), sync_state_set_epoch=4, version=7
    )
    assert [campaign_rank(state, i) for i in (0, 1, 2, 5)] == [2, None, 0, 1]
    assert campaign_rank(state, 1, unclean=True) == 4
    assert campaign_rank(None, 0) is None and campaign_rank(None, 0, bootstrap=True) == 0
    no_master = GroupState(1, None, frozenset({3, 1}), 1, 0)
    assert [campaign_rank(no_master, i) for i in (1, 3)] == [0, 1]


# -- etcd only: the lease ---------------------------------------------------------------------------------------


async def test_a_lost_lease_ends_the_leadership_and_a_slave_wins(etcd_cluster: Cluster):
    master, slave = await group_of(etcd_cluster, 0, 1, in_sync=frozenset({0, 1}))
    lost: list[tuple[int, str]] = []
    sessions: list[SessionEvent] = []
    master.on_leadership_lost(lambda epoch, reason: lost.append((epoch, reason)))
    master.metadata.register_session_listener(sessions.append)
    store = master.metadata
    assert isinstance(store, EtcdMetadataStore) and store.lease_id is not None
    host, port = store.endpoints[0].rsplit(":", 1)
    async with aetcd.Client(host, int(port), timeout=5) as client:
        await client.revoke_lease(store.lease_id)  # etcd's verdict: the master's session is over
    # told once, by whichever comes first: the key's deletion (the watch) or the keep-alive's SESSION_LOST
    await eventually(lambda: bool(lost), "the master hears that its lease is gone", timeout_s=5.0)
    assert lost[0][0] == 1 and not master.is_master
    await eventually(lambda: SessionEvent.SESSION_LOST in sessions, "the keep-alive finds the lease gone")
    assert len(lost) == 1
    new = await slave.try_acquire()
    assert new is not None and (new.master, new.epoch) == (1, 2)
    await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in sessions, "the old master's new session")
    assert await master.try_acquire() is None  # the new master lives


#: A second process: broker 0 bootstraps the group, puts broker 1 in the SyncStateSet, says "ready", then
#: waits; the test SIGKILLs it, so its lease is never revoked and must expire at etcd (TTL 2 s).
CRASHING_MASTER = """
import asyncio, sys
from quasar.metadata.etcd import EtcdMetadataStore
from quasar.replication.group_state import GroupLeadership

async def main():
    store = await EtcdMetadataStore.open(sys.argv[1], prefix=sys.argv[2], session_ttl_s=2)
    master = GroupLeadership(store, sys.argv[3], 0, address="10.0.0.0:10912")
    state = await master.try_acquire(bootstrap=True)
    await master.alter_sync_state_set(frozenset({0, 1}), state)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

asyncio.run(main())
"""


async def test_a_crashed_master_key_expires_with_its_lease(etcd_cluster: Cluster):
    """The master's process is killed (nothing revokes its lease): etcd expires the lease after its TTL and the
    in-sync slave's campaign wins at epoch 2, and not before."""
    assert etcd_cluster.etcd is not None
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CRASHING_MASTER, etcd_cluster.etcd.endpoint, etcd_cluster.prefix, GROUP,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line.strip() == b"ready"
        slave = await etcd_cluster.broker(1)
        state, leader = await slave.read()
        assert state is not None and leader is not None and (leader.broker_id, leader.epoch) == (0, 1)
        assert campaign_rank(state, 1) == 0  # the first in line once the key is gone
        assert await slave.try_acquire() is None  # the master's key lives
        child.kill()  # a crash
        started = time.monotonic()
        won: list[GroupState] = []

        async def campaign() -> bool:
            new = await slave.try_acquire()
            if new is not None:
                won.append(new)
            return new is not None

        await eventually(campaign, "the slave is elected once the lease expired", timeout_s=8.0)
        assert time.monotonic() - started >= 0.5  # not before etcd expired the lease
        assert (won[0].master, won[0].epoch) == (1, 2) and slave.is_master
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


async def _leader_absent(handle: GroupLeadership) -> bool:
    return (await handle.read())[1] is None
