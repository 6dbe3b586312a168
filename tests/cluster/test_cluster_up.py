"""``quasar cluster up`` end to end: real etcd, ``quasar nameserver`` and ``quasar broker`` subprocesses.

The first test (etcd + 2 name servers + 3 brokers, admin answers, SIGTERM stops every member) is in the default
run; the longer scenarios are marked slow. Every process a test starts is stopped by PID at teardown
(``cluster_factory``), and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from quasar.cli.cluster_layout import pid_alive
from quasar.testing.cluster_process import ClusterProcessError
from tests.cluster.conftest import ClusterFactory, needs_etcd


def http_json(url: str, method: str = "GET", body: Any = None, timeout_s: float = 10.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        raw = response.read()
        return response.status, json.loads(raw) if raw else None


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def all_gone(pids: dict[str, int]) -> bool:
    return not any(pid_alive(pid) for pid in pids.values())


def quasar(
    *args: str, timeout_s: float = 30.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short ``quasar`` command (one that starts no cluster) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "quasar", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _rocketmq_route(address: str, topic: str) -> int:
    """The RocketMQ status code of a QueryRoute for ``topic`` at ``address`` (``HOST:PORT``), through the
    generated stubs."""
    import grpc

    from quasar.broker.rocketmq.stubs import definition, service, service_grpc

    with grpc.insecure_channel(address) as channel:
        stub = service_grpc.MessagingServiceStub(channel)
        request = service.QueryRouteRequest(
            topic=definition.Resource(name=topic),
            endpoints=definition.Endpoints(
                scheme=definition.IPv4, addresses=[definition.Address(host="127.0.0.1", port=1)]
            ),
        )
        answer = stub.QueryRoute(request, metadata=[("x-mq-client-id", "cluster-up-test")], timeout=10)
    return int(answer.status.code)


@needs_etcd
def test_up_starts_every_member_and_sigterm_stops_them(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=3, nameservers=2)
    state = cluster.state
    assert state["cluster"] == "quasar-cluster"
    assert state["state"] == "running"
    assert state["etcd"]["url"].startswith("etcd://127.0.0.1:")
    assert [b["group"] for b in state["brokers"]] == ["broker-a", "broker-b", "broker-c"]
    assert {(b["id"], b["role"]) for b in state["brokers"]} == {(0, "master")}
    assert len(state["nameservers"]) == 2
    assert state["nameserverUrl"] == "nameserver://" + ";".join(ns["address"] for ns in state["nameservers"])
    pids = cluster.member_pids()
    assert len(pids) == 6 and cluster.alive_members() == pids
    assert http_json(state["etcd"]["endpoint"] + "/health")[1]["health"] == "true"
    for broker in state["brokers"]:
        assert broker["serviceUrl"].startswith("pulsar://")
        assert http_json(broker["webServiceUrl"] + "/admin/v2/clusters") == (200, ["quasar-cluster"])
    for ns in state["nameservers"]:
        host, port = ns["address"].rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()
    # every broker serves RocketMQ clients too, on ports after the rest of the layout
    addresses = [b["rocketmqAddress"] for b in state["brokers"]]
    assert len(set(addresses)) == 3
    for address in addresses:
        assert _rocketmq_route(address, "cluster-up-topic") == 20000  # QueryRoute OK (topic auto-created)

    status = quasar("cluster", "status", "--data-dir", str(cluster.data_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count(" up ") >= 6

    assert cluster.stop() == 0
    assert all_gone(pids)
    assert cluster.reload()["state"] == "stopped"
    log = cluster.stderr_text()
    # brokers first, then the name servers, then etcd
    assert log.index("stopped broker-c") < log.index("stopped nameserver-0") < log.index("stopped etcd")


def test_missing_etcd_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    result = quasar("cluster", "up", "--data-dir", str(tmp_path / "c"), env={"PATH": str(empty)})
    assert result.returncode == 1
    assert "apt-get install etcd-server" in result.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()


@needs_etcd
def test_taken_base_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        base = taken - 3  # the layout's 4th port: name server 0's HTTP port
        result = quasar("cluster", "up", "--data-dir", str(tmp_path / "c"), "--base-port", str(base))
    assert result.returncode == 1
    assert f"127.0.0.1:{taken} (nameserver-0 http) in use" in result.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()


@needs_etcd
@pytest.mark.slow
def test_member_failing_to_start_stops_the_others(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    (data_dir / "broker-c").write_text("a file where broker-c's data directory should be\n")
    cluster = cluster_factory(data_dir=data_dir, start=False, startup_timeout_s=90)
    with pytest.raises(ClusterProcessError, match="before it was ready"):
        cluster.start()
    assert cluster.returncode == 1
    assert cluster.state["state"] == "failed"
    pids = cluster.member_pids()
    assert set(pids) == {"etcd", "nameserver-0", "nameserver-1", "broker-a", "broker-b", "broker-c"}
    assert all_gone(pids)
    err = cluster.stderr_text()
    assert "Error: the cluster did not start: broker-c (pid" in err
    assert "stopping what was started: " in err


@needs_etcd
@pytest.mark.slow
def test_a_member_dying_is_reported_and_the_others_keep_running(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=2, nameservers=1)
    pids = cluster.member_pids()
    os.kill(pids["broker-b"], signal.SIGKILL)
    wait_until(lambda: "broker-b" in cluster.stderr_text() and "exited unexpectedly" in cluster.stderr_text(),
               what="the report of broker-b's death")  # fmt: skip
    assert "ended by SIGKILL" in cluster.stderr_text()
    assert cluster.running
    assert set(cluster.alive_members()) == {"etcd", "nameserver-0", "broker-a"}
    wait_until(lambda: cluster.reload()["brokers"][1].get("exitCode") == -9, what="cluster.json to say so")
    status = quasar("cluster", "status", "--data-dir", str(cluster.data_dir))
    assert status.returncode == 1
    assert "pid gone" in status.stdout
    assert cluster.stop() == 0
    assert all_gone(pids)


@needs_etcd
@pytest.mark.slow
def test_rerun_refuses_while_running_then_recovers_the_data(cluster_factory: ClusterFactory) -> None:
    first = cluster_factory(brokers=2, nameservers=1)
    urls = first.broker_service_urls()
    admin_a = first.broker_admin_urls()[0]
    assert http_json(admin_a + "/admin/v2/tenants/cluster-up-test", "PUT", {"allowedClusters": []})[0] == 204
    topic = "persistent://public/default/cluster-up-restart"
    client = pulsar.Client(urls[0], operation_timeout_seconds=15)
    try:
        client.subscribe(topic, "kept")  # the subscription keeps the messages for after the restart
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
    finally:
        client.close()

    second = cluster_factory(data_dir=first.data_dir, brokers=2, nameservers=1, start=False)
    with pytest.raises(ClusterProcessError, match="is still running"):
        second.start()
    assert second.returncode == 1
    assert first.alive_members() == first.member_pids()

    old_pids = first.member_pids()
    assert first.stop() == 0
    assert all_gone(old_pids)
    first.start()
    assert first.broker_service_urls() == urls  # the previous ports were free, so they were reused
    for admin in first.broker_admin_urls():
        assert "cluster-up-test" in http_json(admin + "/admin/v2/tenants")[1]
    client = pulsar.Client(urls[-1], operation_timeout_seconds=15)  # any broker: lookup finds the owner
    try:
        consumer = client.subscribe(topic, "kept")
        assert [consumer.receive(10_000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    finally:
        client.close()
    assert (first.data_dir / "logs" / "broker-a.log").read_text().count("==== ") == 2


@needs_etcd
@pytest.mark.slow
def test_cluster_up_killed_leaves_members_that_a_rerun_names(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=1, nameservers=1)
    pids = cluster.member_pids()
    cluster.kill()  # SIGKILL `cluster up` alone: its members keep running, orphaned
    assert cluster.alive_members() == pids
    again = cluster_factory(data_dir=cluster.data_dir, brokers=1, nameservers=1, start=False)
    with pytest.raises(ClusterProcessError, match="its `cluster up` is gone"):
        again.start()
    assert f"etcd (pid {pids['etcd']})" in again.stderr_text()
    cluster.stop()  # stops the orphans by PID
    assert all_gone(pids)


# -- replication (--slaves) -----------------------------------------------------------------------------------


def live_brokers(admin_url: str) -> dict[int, dict[str, Any]]:
    """``{broker id: registration}`` of the live brokers one broker lists (``GET /admin/v2/brokers``)."""
    try:
        listed = http_json(admin_url + "/admin/v2/brokers", timeout_s=5)[1]
    except OSError:
        return {}
    return {b["brokerId"]: b for b in listed}


@needs_etcd
@pytest.mark.slow
def test_up_with_a_slave_per_group_reports_roles_and_stops_slaves_first(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=1, nameservers=1, slaves=1)
    master, slave = cluster.broker("broker-a"), cluster.broker("broker-a-1")
    assert (master["group"], master["id"], master["role"], master["brokerRole"]) == (
        "broker-a",
        0,
        "master",
        "SYNC_MASTER",
    )
    assert (slave["group"], slave["id"], slave["role"], slave["brokerRole"]) == (
        "broker-a",
        1,
        "slave",
        "SLAVE",
    )
    assert master["dataDir"] == str(cluster.data_dir / "broker-a")
    assert slave["dataDir"] == str(cluster.data_dir / "broker-a-1")
    for broker in (master, slave):
        host, port = broker["haAddress"].rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()
    pids = cluster.member_pids()
    assert set(pids) == {"etcd", "nameserver-0", "broker-a", "broker-a-1"}
    assert cluster.alive_members() == pids

    def registered() -> bool:
        live = live_brokers(master["webServiceUrl"])
        return {(i, b.get("role")) for i, b in live.items()} == {(0, "master"), (1, "slave")}

    wait_until(registered, timeout_s=30, what="the master and its slave registered with their live roles")
    status = quasar("cluster", "status", "--data-dir", str(cluster.data_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert "master epoch=" in status.stdout and "slave epoch=" in status.stdout
    assert "SYNC_MASTER" in status.stdout and "ha=" in status.stdout

    assert cluster.stop() == 0
    assert all_gone(pids)
    assert cluster.reload()["state"] == "stopped"
    log = cluster.stderr_text()
    assert log.index("stopped broker-a-1") < log.index("stopped broker-a ") < log.index("stopped etcd")


@needs_etcd
@pytest.mark.slow
def test_a_killed_replicated_broker_is_restarted_and_cluster_json_follows(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=1, nameservers=1, slaves=1)
    old = cluster.member_pids()["broker-a-1"]
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: "restarted broker-a-1" in cluster.stderr_text(), timeout_s=30, what="the restart")
    assert "Restarting it in" in cluster.stderr_text()
    wait_until(
        lambda: cluster.reload()["brokers"][1].get("restarts") == 1, what="cluster.json's restart count"
    )
    new = cluster.member_pids()["broker-a-1"]
    assert new != old and pid_alive(new)
    wait_until(lambda: "broker-a-1 (pid" in cluster.stderr_text() and "ready again" in cluster.stderr_text(),
               timeout_s=60, what="the restarted slave's readiness")  # fmt: skip
    assert cluster.running
    status = quasar("cluster", "status", "--data-dir", str(cluster.data_dir))
    assert "restarted 1x" in status.stdout
    pids = cluster.member_pids()
    assert cluster.stop() == 0
    assert all_gone(pids)


@needs_etcd
@pytest.mark.slow
def test_killing_the_master_elects_the_slave_and_the_restarted_master_follows(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=1, nameservers=1, slaves=1)
    master, slave = cluster.broker("broker-a"), cluster.broker("broker-a-1")

    def roles(admin_url: str) -> dict[int, str | None]:
        return {i: b.get("role") for i, b in live_brokers(admin_url).items()}

    wait_until(lambda: roles(slave["webServiceUrl"]) == {0: "master", 1: "slave"}, timeout_s=30,
               what="broker-a registered as master, broker-a-1 as slave")  # fmt: skip
    epoch = live_brokers(slave["webServiceUrl"])[0]["epoch"]
    os.kill(master["pid"], signal.SIGKILL)
    wait_until(lambda: roles(slave["webServiceUrl"]).get(1) == "master", timeout_s=60,
               what="broker-a-1 elected master after the lease expired")  # fmt: skip
    assert live_brokers(slave["webServiceUrl"])[1]["epoch"] > epoch
    wait_until(lambda: roles(slave["webServiceUrl"]) == {0: "slave", 1: "master"}, timeout_s=90,
               what="the restarted broker-a back as broker-a-1's slave")  # fmt: skip
    assert "restarted broker-a (pid" in cluster.stderr_text()
    status = quasar("cluster", "status", "--data-dir", str(cluster.data_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    lines = {line.split()[1]: line for line in status.stdout.splitlines() if line.startswith("│ broker-a")}
    assert "master id=0" in lines["broker-a"] and "slave epoch=" in lines["broker-a"]
    assert "slave id=1" in lines["broker-a-1"] and "master epoch=" in lines["broker-a-1"]
    pids = cluster.member_pids()
    assert cluster.stop() == 0
    assert all_gone(pids)
    log = cluster.stderr_text()
    assert log.index("stopped broker-a ") < log.index("stopped broker-a-1")  # the live slave first
