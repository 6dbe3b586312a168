"""``quasar cluster up --slaves S``'s plan without a cluster: ports, names, roles, data dirs, argv, cluster.json,
readiness lines, the restart policy (fake clock, fake children) and ``cluster status``'s live roles."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from quasar.cli.cluster import (
    BROKER_READY,
    BROKER_READY_HA,
    MASTER_RESTART_DELAY_S,
    RESTART_DELAY_S,
    _broker_child,
    _Run,
)
from quasar.cli.cluster_layout import members, plan_cluster, previous_ports
from quasar.cli.cluster_status import NO_ANSWER, NOT_REGISTERED, live_roles, member_status, urls_table
from quasar.cli.cluster_supervisor import Child, RestartPolicy, Supervisor, line_probe


def _plan(tmp_path: Path, **kwargs: Any) -> Any:
    args: dict[str, Any] = {"name": "c", "data_dir": tmp_path, "host": "127.0.0.1", "nameservers": 2}
    return plan_cluster(**{**args, **kwargs})


def test_slaves_layout_has_a_third_port_per_broker_group_by_group(tmp_path: Path) -> None:
    plan = _plan(tmp_path, brokers=3, slaves=1, base_port=7000)
    assert [(ns.port, ns.http_port) for ns in plan.nameservers] == [(7002, 7003), (7004, 7005)]
    assert [(b.name, b.group, b.broker_id, b.port, b.admin_port, b.ha_port, b.broker_role) for b in plan.brokers] == [
        ("broker-a", "broker-a", 0, 7006, 7007, 7008, "SYNC_MASTER"),
        ("broker-a-1", "broker-a", 1, 7009, 7010, 7011, "SLAVE"),
        ("broker-b", "broker-b", 0, 7012, 7013, 7014, "SYNC_MASTER"),
        ("broker-b-1", "broker-b", 1, 7015, 7016, 7017, "SLAVE"),
        ("broker-c", "broker-c", 0, 7018, 7019, 7020, "SYNC_MASTER"),
        ("broker-c-1", "broker-c", 1, 7021, 7022, 7023, "SLAVE"),
    ]  # fmt: skip
    assert [port for _, _, port in plan.ports()] == list(range(7000, 7024))
    assert ("broker-a-1 ha", "127.0.0.1", 7011) in plan.ports()
    assert plan.slaves == 1
    assert [b.name for b in plan.masters] == ["broker-a", "broker-b", "broker-c"]
    assert [b.role for b in plan.slave_brokers] == ["slave"] * 3
    assert plan.data_dir_of(plan.brokers[1]) == tmp_path / "broker-a-1"
    assert plan.brokers[1].ha_address == "127.0.0.1:7011"


def test_two_slaves_async_and_no_slaves_unchanged(tmp_path: Path) -> None:
    plan = _plan(tmp_path, brokers=2, slaves=2, replication="async", base_port=7000)
    assert [(b.name, b.broker_role) for b in plan.brokers] == [
        ("broker-a", "ASYNC_MASTER"),
        ("broker-a-1", "SLAVE"),
        ("broker-a-2", "SLAVE"),
        ("broker-b", "ASYNC_MASTER"),
        ("broker-b-1", "SLAVE"),
        ("broker-b-2", "SLAVE"),
    ]
    assert len(plan.ports()) == 6 + 3 * 6
    plain = _plan(tmp_path, brokers=2, base_port=7000)  # --slaves 0: today's layout, no HA port, no role
    assert [(b.port, b.admin_port, b.ha_port, b.broker_role) for b in plain.brokers] == [
        (7006, 7007, None, ""),
        (7008, 7009, None, ""),
    ]
    assert plain.slaves == 0 and plain.slave_brokers == ()
    with pytest.raises(ValueError, match="--slaves"):
        _plan(tmp_path, brokers=1, slaves=9)
    with pytest.raises(ValueError, match="--replication"):
        _plan(tmp_path, brokers=1, slaves=1, replication="semi")


def test_broker_argv_passes_role_ha_port_and_own_data_dir(tmp_path: Path) -> None:
    plan = _plan(tmp_path, brokers=1, slaves=1, base_port=7000)
    master, slave = (
        _broker_child(b, plan, "127.0.0.1:7002", tmp_path / "logs", "INFO") for b in plan.brokers
    )
    assert "--broker-role=SYNC_MASTER" in master.argv and "--broker-id=0" in master.argv
    assert "--ha-port=7008" in master.argv and f"--data-dir={tmp_path / 'broker-a'}" in master.argv
    assert "--broker-role=SLAVE" in slave.argv and "--broker-id=1" in slave.argv
    assert "--broker-name=broker-a" in slave.argv and "--ha-port=7011" in slave.argv
    assert f"--data-dir={tmp_path / 'broker-a-1'}" in slave.argv
    assert slave.log_path == tmp_path / "logs" / "broker-a-1.log"
    assert master.restartable and slave.restartable
    assert slave.tier > master.tier  # slaves stop first: stopping elects nobody
    plain = _plan(tmp_path, brokers=1, base_port=7000)
    child = _broker_child(plain.brokers[0], plain, "127.0.0.1:7002", tmp_path / "logs", "INFO")
    assert not any(arg.startswith(("--broker-role", "--ha-port")) for arg in child.argv)
    assert not child.restartable


def test_readiness_line_with_ha_suffix() -> None:
    line = "quasar broker ready: pulsar://h:6650 http://h:8080 cluster=c group=broker-a id=1 ha=h:10912\n"
    match = BROKER_READY_HA.search(line)
    assert match is not None and match.group(6) == "h:10912" and match.group(5) == "1"
    assert BROKER_READY.search(line) is not None  # the plain pattern accepts the suffix too
    assert BROKER_READY_HA.search(line.replace(" ha=h:10912", "")) is None


def _run_with_fake_children(plan: Any, tmp_path: Path) -> _Run:
    run = _Run(plan, Supervisor(print))
    for ns in plan.nameservers:
        run.nameservers.append((ns, Child(ns.name, ["true"], tmp_path / "x.log", tier=1)))
    for broker in plan.brokers:
        run.brokers.append((broker, Child(broker.name, ["true"], tmp_path / "x.log", tier=2)))
    return run


def test_cluster_json_of_a_replicated_cluster(tmp_path: Path) -> None:
    plan = _plan(tmp_path, brokers=1, slaves=1)
    run = _run_with_fake_children(plan, tmp_path)
    ready = (
        "quasar broker ready: pulsar://127.0.0.1:1 http://127.0.0.1:2 cluster=c group=broker-a id=0 ha=h:9"
    )
    run.brokers[0][1].ready_result = BROKER_READY_HA.search(ready)
    run.brokers[1][1].restarts = 2
    run.brokers[1][1].gave_up = True
    doc = run.document("running")
    master, slave = doc["brokers"]
    assert (
        master["name"] == "broker-a" and master["role"] == "master" and master["brokerRole"] == "SYNC_MASTER"
    )
    assert master["haAddress"] == "h:9" and master["serviceUrl"] == "pulsar://127.0.0.1:1"
    assert master["dataDir"] == str(tmp_path / "broker-a") and master["restarts"] == 0
    assert slave["name"] == "broker-a-1" and slave["group"] == "broker-a" and slave["id"] == 1
    assert (
        slave["role"] == "slave"
        and slave["brokerRole"] == "SLAVE"
        and slave["dataDir"].endswith("broker-a-1")
    )
    assert slave["haAddress"] == f"127.0.0.1:{plan.brokers[1].ha_port}"
    assert slave["restarts"] == 2 and slave["gaveUp"] is True
    assert [name for name, _ in members(doc)][-2:] == ["broker-a", "broker-a-1"]
    plain = _run_with_fake_children(_plan(tmp_path, brokers=1), tmp_path).document("running")
    assert "haAddress" not in plain["brokers"][0] and "brokerRole" not in plain["brokers"][0]


def test_previous_ports_are_reused_with_ha_ports(tmp_path: Path) -> None:
    plan = _plan(tmp_path, brokers=2, slaves=1)
    doc = _run_with_fake_children(plan, tmp_path).document("running")
    ports = previous_ports(doc)
    assert ports == [port for _, _, port in plan.ports()] and len(ports) == 6 + 3 * 4
    assert _plan(tmp_path, brokers=2, slaves=1, reuse=ports) == plan
    assert _plan(tmp_path, brokers=2, reuse=ports).brokers[0].ha_port is None  # another shape: fresh ports


# -- the restart policy ----------------------------------------------------------------------------------------


def test_restart_policy_allows_five_within_the_window_then_refuses() -> None:
    now = [1000.0]
    policy = RestartPolicy(max_restarts=5, window_s=600, delay_s=3, clock=lambda: now[0])
    grants = []
    for _ in range(6):
        grants.append(policy.grant("broker-a"))
        now[0] += 10
    assert grants == [True] * 5 + [False]
    assert policy.grant("broker-b")  # per broker
    assert policy.recent("broker-a") == 5
    now[0] += 600  # the first five fall out of the window
    assert policy.recent("broker-a") == 0 and policy.grant("broker-a")
    assert policy.describe() == "at most 5 restarts within 10 min"
    with pytest.raises(ValueError):
        RestartPolicy(window_s=0)


class FakeChild(Child):
    """A child without a process: each start gets a new pid; a script of lifetimes (in watch polls) says how
    long each start lives (None = until the test ends), the log says ``ready`` at once."""

    _pids = itertools.count(50_000)

    def __init__(self, name: str, tmp_path: Path, lifetimes: list[int | None], **kwargs: Any) -> None:
        super().__init__(name, ["fake"], tmp_path / f"{name}.log", tier=2, **kwargs)
        self.lifetimes = list(lifetimes)
        self.starts = 0
        self._pid: int | None = None
        self._left: int | None = None
        self._code: int | None = None

    def start(self) -> None:
        self.starts += 1
        self._pid = next(self._pids)
        self._left = self.lifetimes.pop(0) if self.lifetimes else None
        self._code = None

    def tick(self) -> None:
        if self._left is not None and self._code is None:
            self._left -= 1
            if self._left <= 0:
                self._code = -9

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code if self._pid is not None else None

    @property
    def alive(self) -> bool:
        return self._pid is not None and self._code is None

    def output(self) -> str:
        return "ready\n"


def _supervisor(lines: list[str], policy: RestartPolicy, children: list[FakeChild], polls: int) -> Supervisor:
    """A supervisor whose every pause ticks the fake children; a stop signal arrives after ``polls`` pauses."""
    count = [0]

    def sleep(_s: float) -> None:
        count[0] += 1
        for child in children:
            child.tick()
        if count[0] >= polls:
            supervisor.signals += 1  # a stop signal ends watch()

    supervisor = Supervisor(lines.append, restart_policy=policy, sleep=sleep)
    for child in children:
        supervisor.spawn(child)
    return supervisor


def test_a_dead_restartable_broker_is_restarted_until_the_policy_gives_up(tmp_path: Path) -> None:
    lines: list[str] = []
    policy = RestartPolicy(max_restarts=2, window_s=600, delay_s=0)
    probe = line_probe(re.compile("ready"))
    flaky = FakeChild("broker-a", tmp_path, [2, 2, 2, 2], restartable=True, ready_probe=probe)
    steady = FakeChild("broker-a-1", tmp_path, [None], restartable=True)
    plain = FakeChild("nameserver-0", tmp_path, [3])  # not restartable: reported only
    supervisor = _supervisor(lines, policy, [flaky, steady, plain], polls=40)
    changes: list[str] = []
    assert supervisor.watch(lambda child: changes.append(f"{child.name}:{child.pid}"), poll_s=0) is True
    assert flaky.starts == 3 and flaky.restarts == 2 and flaky.gave_up and not flaky.alive
    assert steady.starts == 1 and steady.alive
    assert plain.starts == 1 and not plain.alive and not plain.gave_up
    text = "\n".join(lines)
    assert text.count("restarted broker-a (pid") == 2
    assert "Restarting it in 0 s (restart 1, at most 2 restarts within 10 min)" in text
    assert "broker-a (pid" in text and "Giving up on it: it exited 3 times" in text
    assert "ready again" in text
    reported = next(line for line in lines if line.startswith("nameserver-0"))
    assert "exited unexpectedly" in reported and "Restarting" not in reported
    # on_change saw every exit and every restart (cluster.json keeps the current pid)
    assert sum(1 for c in changes if c.startswith("broker-a:")) == 3 + 2


def test_watch_returns_false_only_when_nothing_runs_and_no_restart_is_due(tmp_path: Path) -> None:
    only = FakeChild("broker-a", tmp_path, [1, 1], restartable=True)
    supervisor = _supervisor([], RestartPolicy(max_restarts=1, delay_s=0), [only], polls=100)
    assert supervisor.watch(lambda child: None, poll_s=0) is False
    assert supervisor.signals == 0  # it ended by itself, not by the stop the hook sends after 100 pauses
    assert only.starts == 2 and only.gave_up


# -- status: live roles -----------------------------------------------------------------------------------------


def _doc() -> dict[str, Any]:
    return {
        "etcd": {"pid": None},
        "nameservers": [],
        "brokers": [
            {"name": "broker-a", "group": "broker-a", "id": 0, "role": "master", "brokerRole": "SYNC_MASTER",
             "serviceUrl": "pulsar://h:1", "webServiceUrl": "http://h:2", "haAddress": "h:3", "pid": None},
            {"name": "broker-a-1", "group": "broker-a", "id": 1, "role": "slave", "brokerRole": "SLAVE",
             "serviceUrl": "pulsar://h:4", "webServiceUrl": "http://h:5", "haAddress": "h:6", "pid": None,
             "restarts": 1},
        ],
    }  # fmt: skip


def test_live_roles_after_a_failover_and_when_nobody_answers() -> None:
    doc = _doc()
    live = [
        {"brokerName": "broker-a", "brokerId": 0, "serviceUrl": "pulsar://h:1", "role": "slave", "epoch": 2},
        {"brokerName": "broker-a", "brokerId": 1, "serviceUrl": "pulsar://elsewhere:4", "role": "master", "epoch": 2},
    ]  # fmt: skip
    assert live_roles(doc, live) == {"broker-a": "slave epoch=2", "broker-a-1": "master epoch=2"}
    assert live_roles(doc, live[:1]) == {"broker-a": "slave epoch=2", "broker-a-1": NOT_REGISTERED}
    assert live_roles(doc, None) == {"broker-a": NO_ANSWER, "broker-a-1": NO_ANSWER}
    states = member_status(doc)
    assert states == {
        "etcd": "not started",
        "broker-a": "not started",
        "broker-a-1": "not started (restarted 1x)",
    }
    table = urls_table(doc, title="t", status=states, live=live_roles(doc, live))
    assert [c.header for c in table.columns] == ["member", "pid", "role", "urls", "live role", "status"]
    cells = [list(c.cells) for c in table.columns]
    assert cells[2][1:] == ["master id=0 SYNC_MASTER", "slave id=1 SLAVE"]
    assert cells[3][2] == "pulsar://h:4  http://h:5  ha=h:6"
    assert cells[4][1:] == ["slave epoch=2", "master epoch=2"]
    assert re.fullmatch(r"unknown \(.*\)", NO_ANSWER)


def test_restart_delay_is_asked_per_death_and_an_unknown_role_waits_for_the_election(tmp_path: Path) -> None:
    lines: list[str] = []
    child = FakeChild("broker-a", tmp_path, [1, None], restartable=True)
    supervisor = _supervisor(lines, RestartPolicy(delay_s=99), [child], polls=20)
    asked: list[str] = []
    supervisor.restart_delay = lambda dead: asked.append(dead.name) or 0.0
    supervisor.watch(lambda _child: None, poll_s=0)
    assert asked == ["broker-a"] and child.starts == 2
    assert "Restarting it in 0 s" in "\n".join(lines)
    # cluster up's delay: nobody answers about live roles -> the master's (longer) delay, to let a slave win
    run = _run_with_fake_children(_plan(tmp_path, brokers=1, slaves=1), tmp_path)
    assert run.restart_delay(run.brokers[1][1]) == MASTER_RESTART_DELAY_S > RESTART_DELAY_S
