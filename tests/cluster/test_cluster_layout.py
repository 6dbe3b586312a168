"""``quasar cluster up``'s port layout, cluster.json helpers and child supervision, without a cluster."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from quasar.cli.cluster import BROKER_READY, NAMESERVER_READY, _Run
from quasar.cli.cluster_layout import (
    group_name,
    pid_alive,
    plan_cluster,
    previous_ports,
    read_state,
    running_members,
    taken_ports,
    write_state,
)
from quasar.cli.cluster_supervisor import Child, ChildStartError, Supervisor, describe_status, line_probe


def test_base_port_layout_is_the_documented_one(tmp_path: Path) -> None:
    plan = plan_cluster(
        name="c", data_dir=tmp_path, host="127.0.0.1", brokers=3, nameservers=2, base_port=7000
    )
    assert (plan.etcd.client_port, plan.etcd.peer_port) == (7000, 7001)
    assert [(ns.port, ns.http_port) for ns in plan.nameservers] == [(7002, 7003), (7004, 7005)]
    assert [(b.group, b.broker_id, b.port, b.admin_port) for b in plan.brokers] == [
        ("broker-a", 0, 7006, 7007),
        ("broker-b", 0, 7008, 7009),
        ("broker-c", 0, 7010, 7011),
    ]
    assert [port for _, _, port in plan.ports()] == list(range(7000, 7012))
    assert plan.etcd.url == "etcd://127.0.0.1:7000"
    assert plan.nameserver_list == "127.0.0.1:7002;127.0.0.1:7004"
    assert plan.nameserver_url == "nameserver://127.0.0.1:7002;127.0.0.1:7004"


def test_rocketmq_ports_come_after_the_layout_and_change_none_of_it(tmp_path: Path) -> None:
    plan = plan_cluster(
        name="c", data_dir=tmp_path, host="127.0.0.1", brokers=3, nameservers=2, base_port=7000, rocketmq=True
    )
    assert [(b.port, b.admin_port, b.rocketmq_port) for b in plan.brokers] == [
        (7006, 7007, 7012),
        (7008, 7009, 7013),
        (7010, 7011, 7014),
    ]
    assert [port for _, _, port in plan.ports()] == list(range(7000, 7015))
    assert plan.brokers[0].rocketmq_address == "127.0.0.1:7012"
    replicated = plan_cluster(
        name="c", data_dir=tmp_path, host="127.0.0.1", brokers=2, nameservers=1, base_port=7000, slaves=1,
        rocketmq=True,
    )  # fmt: skip
    # 4 + 4 processes x 3 ports = 7000..7015, then one RocketMQ port per process in the same order
    assert [(b.name, b.rocketmq_port) for b in replicated.brokers] == [
        ("broker-a", 7016), ("broker-a-1", 7017), ("broker-b", 7018), ("broker-b-1", 7019)
    ]  # fmt: skip
    doc = {
        "etcd": {"endpoint": "http://127.0.0.1:7000", "peerUrl": "http://127.0.0.1:7001"},
        "nameservers": [{"address": "127.0.0.1:7002", "http": "http://127.0.0.1:7003"}],
        "brokers": [
            {"serviceUrl": "pulsar://h:7004", "webServiceUrl": "http://h:7005", "rocketmqAddress": "h:7006"}
        ],
    }
    assert previous_ports(doc) == [7000, 7001, 7002, 7003, 7004, 7005, 7006]


def test_layout_limits(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="passes 65535"):
        plan_cluster(name="c", data_dir=tmp_path, host="127.0.0.1", brokers=3, nameservers=2, base_port=65530)
    with pytest.raises(ValueError, match="--brokers"):
        plan_cluster(name="c", data_dir=tmp_path, host="127.0.0.1", brokers=27, nameservers=1)
    assert group_name(25) == "broker-z"
    with pytest.raises(ValueError):
        group_name(26)


def test_free_ports_are_distinct_and_a_previous_layout_is_reused_when_free(tmp_path: Path) -> None:
    plan = plan_cluster(name="c", data_dir=tmp_path, host="127.0.0.1", brokers=2, nameservers=2)
    ports = [port for _, _, port in plan.ports()]
    assert len(set(ports)) == len(ports) == 10
    run = _Run(plan, Supervisor(print))
    for ns in plan.nameservers:
        run.nameservers.append((ns, Child(ns.name, ["true"], tmp_path / "x.log", tier=1)))
    for broker in plan.brokers:
        run.brokers.append((broker, Child(broker.name, ["true"], tmp_path / "x.log", tier=2)))
    doc = run.document("running")
    assert previous_ports(doc) == ports
    again = plan_cluster(name="c", data_dir=tmp_path, host="127.0.0.1", brokers=2, nameservers=2, reuse=ports)
    assert again == plan
    # another count of members: the previous ports do not fit, fresh ones are picked
    other = plan_cluster(name="c", data_dir=tmp_path, host="127.0.0.1", brokers=3, nameservers=2, reuse=ports)
    assert len(other.brokers) == 3
    assert previous_ports({"etcd": {}}) is None


def test_taken_ports_sees_a_listener() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert taken_ports([("127.0.0.1", port)]) == [("127.0.0.1", port, "in use")]
    assert taken_ports([("127.0.0.1", port)]) == []


def test_cluster_json_round_trip_and_running_members(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    assert read_state(path) is None
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)  # quasar test sleeper"])
    try:
        doc = {"cluster": "c", "upPid": None, "etcd": {"pid": sleeper.pid}, "nameservers": [], "brokers": []}
        write_state(path, doc)
        loaded = read_state(path)
        assert loaded is not None and loaded["etcd"] == {"pid": sleeper.pid} and "updatedAt" in loaded
        assert running_members(loaded) == [("etcd", sleeper.pid)]
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert not pid_alive(sleeper.pid)
    assert running_members(loaded) == []
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_state(path)


def test_readiness_lines_parse() -> None:
    ns = NAMESERVER_READY.search("x\nquasar nameserver ready: 127.0.0.1:9876 http://127.0.0.1:9877\n")
    assert ns is not None and ns.groups() == ("127.0.0.1:9876", "http://127.0.0.1:9877")
    line = "quasar broker ready: pulsar://h:6650 http://h:8080 cluster=c group=broker-a id=0"
    broker = BROKER_READY.search(line)
    assert broker is not None and broker.groups() == (
        "pulsar://h:6650",
        "http://h:8080",
        "c",
        "broker-a",
        "0",
    )


def test_supervisor_reports_an_early_exit_with_the_log_tail(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor(lines.append, stop_timeout_s=5)
    code = "import sys; print('about to fail', file=sys.stderr); sys.exit(3)"
    child = supervisor.spawn(
        Child("bad", [sys.executable, "-c", code], tmp_path / "logs" / "bad.log", tier=0)
    )
    with pytest.raises(ChildStartError) as info:
        supervisor.wait_ready({child: line_probe(NAMESERVER_READY)}, timeout_s=20)
    assert info.value.summary == f"bad (pid {child.pid}) exited with status 3 before it was ready"
    assert "about to fail" in str(info.value)


def test_supervisor_stops_tiers_in_order_and_kills_after_the_bound(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor(lines.append, stop_timeout_s=0.5)
    polite = "import time; print('ready', flush=True); time.sleep(60)"
    stubborn = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + polite
    low = supervisor.spawn(Child("low", [sys.executable, "-c", polite], tmp_path / "low.log", tier=0))
    high = supervisor.spawn(Child("high", [sys.executable, "-c", stubborn], tmp_path / "high.log", tier=2))
    supervisor.wait_ready({c: line_probe(re.compile("ready")) for c in (low, high)}, timeout_s=20)
    statuses = supervisor.stop_all()
    assert statuses == {"high": -signal.SIGKILL, "low": -signal.SIGTERM}
    assert [line.split(" (")[0] for line in lines] == ["high", "stopped high", "stopped low"]
    assert describe_status(-9) == "ended by SIGKILL" and describe_status(0) == "exited with status 0"
