"""Failover of a replicated broker group with real processes (etcd, ``quasar broker`` masters and slaves) and the
official client: a SIGKILLed SYNC_MASTER loses no receipted message, a cut HA link takes the slave out of the
in-sync set and back, an emptied slave catches up to identical bytes, and what ASYNC_MASTER may lose."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

import quasar.client as quasar_client
from quasar.testing.etcd import etcd_available
from quasar.testing.fault_proxy import FaultProxy
from tests.replication._group import ReplicatedGroup, free_port, http, wait_until

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not etcd_available(), reason="etcd is not installed (scripts/ensure_etcd.sh)"),
]

_QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ACK_WINDOW_S = 2.5
"""A message acked this long before a kill may come again (cursor persist interval 200 ms + journal + slack)."""
FAILOVER_S = 15.0
"""Acks sent after a kill, until the client noticed, are lost with the master: those messages may come again."""


@dataclass
class Traffic:
    """One producer (send_async, no batching) and one exclusive consumer acking everything, on threads."""

    client: pulsar.Client
    topic: str
    receipted: set[int] = field(default_factory=set)
    failed: int = 0
    seen: list[int] = field(default_factory=list)
    acked_at: dict[int, float] = field(default_factory=dict)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Traffic:
        self.consumer = self.client.subscribe(self.topic, "sub", receiver_queue_size=100)
        self.producer = self.client.create_producer(
            self.topic,
            batching_enabled=False,
            send_timeout_millis=60_000,
            max_pending_messages=200,
            block_if_queue_full=True,
        )
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self.threads:
            thread.start()
        return self

    def _produce(self) -> None:
        while not self.stopping.is_set():
            n = self.sent
            self.sent += 1

            def done(result: pulsar.Result, _msg_id: object, n: int = n) -> None:
                with self.lock:
                    if result == pulsar.Result.Ok:
                        self.receipted.add(n)
                    else:
                        self.failed += 1

            self.producer.send_async(str(n).encode(), done)  # blocks while 200 are pending (a failover)
            time.sleep(0.002)

    def _consume(self) -> None:
        while not self.stopping.is_set() or self.consumer_busy:
            try:
                message = self.consumer.receive(200)
            except Exception:  # noqa: BLE001 - receive timeout: poll again
                continue
            n = int(message.data())
            with self.lock:
                self.seen.append(n)
            self.consumer.acknowledge(message)
            with self.lock:
                self.acked_at.setdefault(n, time.monotonic())

    consumer_busy: bool = True

    def receipts(self) -> int:
        with self.lock:
            return len(self.receipted)

    def stop_producing(self) -> None:
        self.stopping.set()
        self.threads[0].join(10)
        self.producer.flush()

    def drain(self, timeout_s: float) -> None:
        """Until every receipted message was seen (bounded), then stop the consumer."""

        def all_seen() -> bool:
            with self.lock:
                return self.receipted <= set(self.seen)

        try:
            wait_until(all_seen, timeout_s, "every receipted message consumed")
        finally:
            self.consumer_busy = False
            self.threads[1].join(10)


@pytest.fixture
def client_of() -> Iterator[list[pulsar.Client]]:
    clients: list[pulsar.Client] = []
    yield clients
    for client in clients:
        client.close()


def _client(group: ReplicatedGroup, clients: list[pulsar.Client]) -> pulsar.Client:
    client = pulsar.Client(group.url, operation_timeout_seconds=60, logger=_QUIET)
    clients.append(client)
    return client


def _kill_rounds(group: ReplicatedGroup, traffic: Traffic, rounds: int) -> list[float]:
    """SIGKILL the current master ``rounds`` times at a random moment; the killed broker comes back (as a
    slave) before the next round. Returns the kill times (monotonic)."""
    kills = []
    rng = random.Random(os.getpid())
    for _ in range(rounds):
        master = group.wait_master()
        group.wait_in_sync(master, len(group.brokers), timeout_s=60)
        before = traffic.receipts()
        target = before + rng.randint(50, 400)
        wait_until(lambda target=target: traffic.receipts() >= target, 60, "receipts before the kill")
        kills.append(time.monotonic())
        group.brokers[master].kill()
        new = group.wait_master(other_than=master, timeout_s=60)
        after = traffic.receipts()
        wait_until(lambda after=after: traffic.receipts() >= after + 100, 90, "receipts after the promotion")
        assert new != master
        group.brokers[master].restart()  # the old master returns as a slave of the new epoch
    return kills


def _check_nothing_lost(traffic: Traffic, kills: list[float]) -> None:
    with traffic.lock:
        receipted, seen, acked_at = set(traffic.receipted), list(traffic.seen), dict(traffic.acked_at)
    assert receipted, "nothing was receipted"
    missing = receipted - set(seen)
    assert not missing, f"{len(missing)} receipted messages never consumed, e.g. {sorted(missing)[:10]}"
    first_seen = list(dict.fromkeys(seen))
    assert first_seen == sorted(first_seen), "messages were first delivered out of order"
    counts: dict[int, int] = {}
    for n in seen:
        counts[n] = counts.get(n, 0) + 1
    for n, count in counts.items():
        if (
            count > 1 and n in acked_at
        ):  # redelivered although acked: only acks of the last window before a kill
            # acked in the window before a kill, or after it while the consumer had not noticed the dead master
            assert any(kill - ACK_WINDOW_S <= acked_at[n] <= kill + FAILOVER_S for kill in kills), (
                f"message {n} was acked at {acked_at[n]:.2f}, well before any kill {kills}, and came again"
            )


@pytest.mark.parametrize("rounds", [int(os.environ.get("QUASAR_FAILOVER_ROUNDS", "2"))])
def test_sigkilled_sync_master_loses_no_receipted_message(
    tmp_path: Path, client_of: list[pulsar.Client], rounds: int
) -> None:
    group = ReplicatedGroup(tmp_path, slaves=2).start()
    try:
        traffic = Traffic(_client(group, client_of), "persistent://public/default/failover").start()
        kills = _kill_rounds(group, traffic, rounds)
        traffic.stop_producing()
        traffic.drain(90)
        _check_nothing_lost(traffic, kills)
    finally:
        traffic.stopping.set()
        group.stop()


@pytest.mark.slow
def test_twenty_sigkill_rounds(tmp_path: Path, client_of: list[pulsar.Client]) -> None:
    group = ReplicatedGroup(tmp_path, slaves=2).start()
    try:
        traffic = Traffic(_client(group, client_of), "persistent://public/default/failover20").start()
        kills = _kill_rounds(group, traffic, 20)
        traffic.stop_producing()
        traffic.drain(120)
        _check_nothing_lost(traffic, kills)
    finally:
        traffic.stopping.set()
        group.stop()


def test_async_master_kill_reports_what_it_lost(
    tmp_path: Path, client_of: list[pulsar.Client], record_property: pytest.RecordProperty
) -> None:
    """ASYNC_MASTER receipts do not wait for the slave: a kill may lose the receipted tail the slave had not
    pulled yet (RocketMQ's trade-off, docs/replication.md). The count is reported, not asserted to be 0."""
    group = ReplicatedGroup(tmp_path, slaves=1, master_role="ASYNC_MASTER").start()
    try:
        traffic = Traffic(_client(group, client_of), "persistent://public/default/async").start()
        wait_until(lambda: traffic.receipts() >= 300, 60, "receipts before the kill")
        group.brokers[0].kill()
        group.wait_master(other_than=0, timeout_s=60)
        after = traffic.receipts()
        wait_until(lambda: traffic.receipts() >= after + 50, 60, "receipts after the promotion")
        traffic.stop_producing()
        with traffic.lock:
            receipted = set(traffic.receipted)
        try:
            traffic.drain(20)
        except AssertionError:
            pass  # lost messages are never consumed: counted below
        with traffic.lock:
            lost = len(receipted - set(traffic.seen))
        record_property("async_master_receipted", len(receipted))
        record_property("async_master_lost", lost)
        print(f"ASYNC_MASTER kill: {lost} of {len(receipted)} receipted messages lost")
        assert lost < len(receipted)
    finally:
        traffic.stopping.set()
        group.stop()


def test_cut_link_takes_the_slave_out_of_sync_and_back(
    tmp_path: Path, client_of: list[pulsar.Client]
) -> None:
    ha_port = free_port()
    proxy = FaultProxy(("127.0.0.1", ha_port)).start()
    group = ReplicatedGroup(
        tmp_path,
        slaves=1,
        master_ha_port=ha_port,
        master_settings=f'ha_advertised_address = "{proxy.address}"\n',
    )
    try:
        group.start()
        group.wait_in_sync(0, 2)
        client = _client(group, client_of)
        producer = client.create_producer(
            "persistent://public/default/cut", batching_enabled=False, send_timeout_millis=120_000
        )
        producer.send(b"before")

        proxy.cut()
        wait_until(lambda: group.replication(0).get("syncStateSet") == [0], 20, "the slave left the set")
        status = group.replication(0)
        assert status["slaves"].get("1", {}).get("connected") is not True
        receipts: list[pulsar.Result] = []
        producer.send_async(b"during", lambda result, _id: receipts.append(result))
        time.sleep(
            4
        )  # > slave_timeout_s: the send is refused (SLAVE_NOT_AVAILABLE) and retried by the client
        assert receipts == [], "a SYNC_MASTER receipted a message no slave has"

        proxy.restore()
        wait_until(lambda: receipts == [pulsar.Result.Ok], 30, "the send receipted once the slave is back")
        wait_until(lambda: group.replication(0).get("syncStateSet") == [0, 1], 20, "the slave rejoined")
        assert group.replication(1)["maxOffset"] >= group.replication(0)["confirmOffset"] > 0
    finally:
        group.stop()
        proxy.stop()


def test_emptied_slave_catches_up_to_identical_bytes(tmp_path: Path, client_of: list[pulsar.Client]) -> None:
    group = ReplicatedGroup(tmp_path, slaves=1).start()
    try:
        group.wait_in_sync(0, 2)
        client = _client(group, client_of)
        producer = client.create_producer("persistent://public/default/bytes", batching_enabled=True)
        for n in range(3000):  # records over more than one 256 KiB segment
            producer.send_async(os.urandom(200) + str(n).encode(), None)
        producer.flush()
        group.brokers[1].kill()
        shutil.rmtree(tmp_path / "b1" / "store")
        (tmp_path / "b1" / "metadata.db").unlink()
        group.brokers[1].restart()
        end = group.replication(0)["maxOffset"]
        wait_until(
            lambda: group.replication(1).get("maxOffset", -1) >= end, 60, "the emptied slave caught up"
        )
        assert group.replication(1)["maxOffset"] == end
        master, slave = group.commit_log_bytes(0, end), group.commit_log_bytes(1, end)
        assert len(master) == end
        assert hashlib.sha256(slave).hexdigest() == hashlib.sha256(master).hexdigest()

        # same segment names for the bytes both hold; the master may already have the next segment (records
        # written after ``end`` was read, or a segment allocated ahead)
        def segments(broker: str) -> list[str]:
            names = (p.name for p in (tmp_path / broker / "store" / "commitlog").iterdir())
            return sorted(name for name in names if int(name) < end)

        assert segments("b0") and segments("b1") == segments("b0")
    finally:
        group.stop()


def test_manual_failover_moves_the_master_to_the_in_sync_slave(
    tmp_path: Path, client_of: list[pulsar.Client]
) -> None:
    group = ReplicatedGroup(tmp_path, slaves=1).start()
    try:
        group.wait_in_sync(0, 2)
        producer = _client(group, client_of).create_producer("persistent://public/default/manual")
        producer.send(b"before")
        code, body = http("POST", f"{group.brokers[1].admin_url}/admin/v2/replication/failover")
        assert code == 204, body  # asked at the slave: redirected to the master, which resigned
        assert group.wait_master(other_than=0) == 1
        group.wait_in_sync(1, 2)  # the old master follows and catches up
        producer.send(b"after")
        code, body = http("POST", f"{group.brokers[1].admin_url}/admin/v2/replication/failover")
        assert code in (204, 409), body
    finally:
        group.stop()


def test_slave_serves_reads_when_no_slave_can_be_elected(
    tmp_path: Path, client_of: list[pulsar.Client]
) -> None:
    """The slave left the in-sync set (cut link), then the master dies: nobody may be elected, so the slave
    serves consumers from its copy and refuses publishing; the old master's return ends it."""
    ha_port = free_port()
    proxy = FaultProxy(("127.0.0.1", ha_port)).start()
    group = ReplicatedGroup(
        tmp_path,
        slaves=1,
        master_ha_port=ha_port,
        master_settings=f'ha_advertised_address = "{proxy.address}"\n',
    )
    try:
        group.start()
        group.wait_in_sync(0, 2)
        client = _client(group, client_of)
        topic = "persistent://public/default/slave-read"
        client.subscribe(topic, "sub").close()  # the subscription exists, its backlog is read later
        producer = client.create_producer(topic, batching_enabled=False)
        for n in range(20):
            producer.send(str(n).encode())
        wait_until(
            lambda: group.replication(1).get("maxOffset") == group.replication(0)["maxOffset"], 20, "copied"
        )
        proxy.cut()
        wait_until(lambda: group.replication(0).get("syncStateSet") == [0], 20, "the slave left the set")
        group.brokers[0].kill()
        wait_until(lambda: group.replication(1).get("slaveRead") is True, 30, "the slave serves reads")

        reader_client = _client(group, client_of)
        consumer = reader_client.subscribe(topic, "sub")
        got = [int(consumer.receive(10_000).data()) for _ in range(20)]
        assert got == list(range(20))
        with pytest.raises(pulsar.Timeout):  # ServiceNotReady: the official client retries until its timeout
            impatient = pulsar.Client(group.url, operation_timeout_seconds=3, logger=_QUIET)
            client_of.append(impatient)
            impatient.create_producer(topic)
        ours = quasar_client.Client(str(group.brokers[1].service_url), operation_timeout_seconds=3)
        try:  # Quasar's client shows the broker's reason
            with pytest.raises(
                Exception, match="no master and none can be elected now: publishing is refused"
            ):
                ours.create_producer(topic)
        finally:
            ours.close()
        assert group.replication(1)["role"] == "slave"

        proxy.restore()
        group.brokers[0].restart()  # in the set: elected again; the slave follows and stops serving reads
        group.wait_master(timeout_s=30)
        wait_until(lambda: group.replication(1).get("slaveRead") is False, 30, "slave reads ended")
        producer2 = reader_client.create_producer(topic, batching_enabled=False)
        group.wait_in_sync(group.master_index() or 0, 2)
        producer2.send(b"20")
        # acks given to the slave stayed on it (at-least-once): the master may deliver 0..19 again, then 20
        seen = [int(consumer.receive(15_000).data()) for _ in range(21)]
        assert seen[-1] == 20 or 20 in seen
    finally:
        group.stop()
        proxy.stop()
