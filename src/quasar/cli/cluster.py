"""``quasar cluster up`` / ``quasar cluster status``: a local cluster in one command.

``up`` starts, in this order and each waited for (bounded by ``--startup-timeout``):

1. etcd (the system's ``etcd`` binary, Debian's etcd-server) with its data in ``<data-dir>/etcd``, client and
   peer ports on 127.0.0.1; ready when ``GET /health`` says so;
2. ``--nameservers`` name servers (``quasar nameserver``), ready at their line
   ``quasar nameserver ready: HOST:PORT http://HOST:HTTP_PORT``;
3. ``--brokers`` brokers (``quasar broker``), each the master (id 0) of its own broker group ``broker-a``,
   ``broker-b``, ..., with its data in ``<data-dir>/<group>``, every name server in ``--nameservers`` and
   etcd as ``--metadata-store``; ready at ``quasar broker ready: pulsar://.. http://.. cluster=.. group=.. id=..``;
4. with ``--slaves S`` (S >= 1, replication; docs/replication.md) the masters get ``--broker-role
   SYNC_MASTER`` (``--replication async``: ``ASYNC_MASTER``) and an ``--ha-port``, and once they are ready
   each group's S slaves start (``--broker-role SLAVE --broker-id 1..S``, data in ``<data-dir>/<group>-<id>``);
   a replicated broker's readiness line ends with `` ha=HOST:PORT``.

Every child's stdout and stderr go to ``<data-dir>/logs/<name>.log``. Then ``up`` writes
``<data-dir>/cluster.json`` (shape in :mod:`quasar.cli.cluster_layout`), prints a table of URLs and the line
``quasar cluster ready: <data-dir>/cluster.json`` on stdout, and runs until Ctrl-C / SIGTERM / SIGHUP, when it
stops the brokers, then the name servers, then etcd (SIGTERM, ``--stop-timeout`` seconds, SIGKILL) and marks
``cluster.json`` ``"stopped"`` (slaves stop before the masters, so stopping causes no failover). A child that
dies meanwhile is reported; the others keep running. With ``--slaves`` >= 1 a broker that dies is started
again (:class:`~quasar.cli.cluster_supervisor.RestartPolicy`: at most 5 restarts per broker within 10
minutes, then ``up`` gives up on that one and keeps the others): a slave after 3 s, the group's live master
after 15 s, once a slave was elected in its place; ``cluster.json`` then names its new pid and counts its
restarts.

If a child exits early or is not ready in time, ``up`` prints the end of its log, stops what it started and
exits 1 (``cluster.json`` then says ``"failed"``). Running ``up`` again on the same data directory reuses the
data (and the previous ports when they are free); it refuses while ``cluster.json`` names live processes.

Exit status of ``up``: 0 after a stop signal, 1 when the cluster could not start or every child died, 2 bad
usage. ``status``: 0 when every member runs and answers, 1 otherwise (or no ``cluster.json``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from quasar.cli.cluster_layout import (
    MAX_BROKERS,
    MAX_NAMESERVERS,
    MAX_SLAVES,
    REPLICATION_MODES,
    STATE_FILE,
    BrokerSpec,
    ClusterPlan,
    NameServerSpec,
    pid_alive,
    plan_cluster,
    previous_ports,
    read_state,
    running_members,
    taken_ports,
    write_state,
)
from quasar.cli.cluster_status import fetch_live_brokers, live_roles, member_status, urls_table
from quasar.cli.cluster_supervisor import (
    Child,
    ChildStartError,
    RestartPolicy,
    StopRequested,
    Supervisor,
    child_environment,
    http_health_probe,
    line_probe,
)

__all__ = ["BROKER_READY", "BROKER_READY_HA", "CLUSTER_READY", "NAMESERVER_READY", "cluster", "member_status"]

NAMESERVER_READY = re.compile(r"quasar nameserver ready: (\S+) (https?://\S+)")
BROKER_READY = re.compile(
    r"quasar broker ready: (pulsar(?:\+ssl)?://\S+) (https?://\S+) cluster=(\S+) group=(\S+) id=(\d+)"
)
#: A replicated broker's readiness line: :data:`BROKER_READY` followed by `` ha=HOST:PORT`` (group 6).
BROKER_READY_HA = re.compile(BROKER_READY.pattern + r" ha=(\S+)")
#: What ``up`` prints on stdout once every member is ready (tools wait for it); group 1 is cluster.json's path.
CLUSTER_READY = re.compile(r"quasar cluster ready: (.+)")

_ETCD_TIER, _NAMESERVER_TIER, _BROKER_TIER, _SLAVE_TIER = 0, 1, 2, 3
#: Seconds before a dead slave is restarted.
RESTART_DELAY_S = 3.0
#: Seconds before a dead live master is restarted: past its etcd session lease (10 s by default) and the
#: election of an in-sync slave.
MASTER_RESTART_DELAY_S = 15.0
_ETCD_LOG_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warn", "ERROR": "error"}
_LOG_LEVEL = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


@click.group()
def cluster() -> None:
    """A local Quasar cluster: etcd, name servers and broker groups on this machine."""


def _quasar_argv(*args: str) -> list[str]:
    """``quasar ARGS`` run by this very interpreter, so the children use the same environment."""
    return [sys.executable, "-m", "quasar", *args]


def _etcd_child(etcd_bin: str, plan: ClusterPlan, log_dir: Path, log_level: str) -> Child:
    etcd = plan.etcd
    argv = [
        etcd_bin,
        "--name=quasar-etcd",
        f"--data-dir={plan.data_dir / 'etcd'}",
        f"--listen-client-urls={etcd.endpoint}",
        f"--advertise-client-urls={etcd.endpoint}",
        f"--listen-peer-urls={etcd.peer_url}",
        f"--initial-advertise-peer-urls={etcd.peer_url}",
        f"--initial-cluster=quasar-etcd={etcd.peer_url}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={plan.name}",
        "--logger=zap",
        "--log-outputs=stderr",
        f"--log-level={_ETCD_LOG_LEVELS[log_level.upper()]}",
    ]
    env = child_environment(strip_prefix="ETCD_")
    return Child("etcd", argv, log_dir / "etcd.log", tier=_ETCD_TIER, env=env)


def _nameserver_child(ns: NameServerSpec, log_dir: Path, log_level: str) -> Child:
    argv = _quasar_argv(
        "nameserver",
        f"--host={ns.host}",
        f"--port={ns.port}",
        f"--http-port={ns.http_port}",
        f"--log-level={log_level}",
    )
    env = child_environment(PYTHONUNBUFFERED="1")
    return Child(ns.name, argv, log_dir / f"{ns.name}.log", tier=_NAMESERVER_TIER, env=env)


def _dialable(address: str) -> str:
    """``0.0.0.0:9876`` -> ``127.0.0.1:9876`` (a wildcard bind address is not one to connect to)."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "::", "") else address


def _broker_probe(broker: BrokerSpec) -> re.Pattern[str]:
    return BROKER_READY_HA if broker.replicated else BROKER_READY


def _broker_child(
    broker: BrokerSpec, plan: ClusterPlan, nameservers: str, log_dir: Path, log_level: str
) -> Child:
    replication = []
    if broker.replicated:
        replication = [f"--broker-role={broker.broker_role}", f"--ha-port={broker.ha_port}"]
    argv = _quasar_argv(
        "broker",
        f"--data-dir={plan.data_dir_of(broker)}",
        f"--host={broker.host}",
        f"--port={broker.port}",
        f"--admin-port={broker.admin_port}",
        f"--cluster={plan.name}",
        f"--broker-name={broker.group}",
        f"--broker-id={broker.broker_id}",
        f"--nameservers={nameservers}",
        f"--metadata-store={plan.etcd.url}",
        *replication,
        "--no-rocketmq",  # the port layout has no RocketMQ port yet: brokers on one host would collide on 8081
        f"--log-level={log_level}",
    )
    env = child_environment(PYTHONUNBUFFERED="1")
    return Child(
        broker.name,
        argv,
        log_dir / f"{broker.name}.log",
        tier=_SLAVE_TIER if broker.broker_id > 0 else _BROKER_TIER,
        env=env,
        restartable=broker.replicated,  # a replicated group survives one broker; restart the dead one
        ready_probe=line_probe(_broker_probe(broker)),
    )


class _Run:
    """One ``cluster up``: the plan, the supervisor and the children by role, and what cluster.json says."""

    def __init__(self, plan: ClusterPlan, supervisor: Supervisor) -> None:
        self.plan = plan
        self.supervisor = supervisor
        self.etcd: Child | None = None
        self.nameservers: list[tuple[NameServerSpec, Child]] = []
        self.brokers: list[tuple[BrokerSpec, Child]] = []

    def document(self, state: str) -> dict[str, Any]:
        """The ``cluster.json`` document for ``state`` (addresses from readiness lines once ready)."""
        plan = self.plan
        nameservers = []
        for ns, child in self.nameservers:
            match = child.ready_result
            address, http = (
                (match.group(1), match.group(2))
                if match
                else (ns.address, f"http://{ns.host}:{ns.http_port}")
            )
            nameservers.append({"name": ns.name, "address": address, "http": http, **_pid_fields(child)})
        brokers = []
        for broker, child in self.brokers:
            match = child.ready_result
            service, web = (
                (match.group(1), match.group(2))
                if match
                else (f"pulsar://{broker.host}:{broker.port}", f"http://{broker.host}:{broker.admin_port}")
            )
            entry: dict[str, Any] = {
                "name": broker.name,
                "group": broker.group,
                "id": broker.broker_id,
                "role": broker.role,  # configured; the live one follows the group's elections
                "serviceUrl": service,
                "webServiceUrl": web,
                "dataDir": str(plan.data_dir_of(broker)),
                **_pid_fields(child),
            }
            if broker.replicated:
                ha = match.group(6) if match and match.re is BROKER_READY_HA else broker.ha_address
                entry.update(brokerRole=broker.broker_role, haAddress=ha, restarts=child.restarts)
                if child.gave_up:
                    entry["gaveUp"] = True
            brokers.append(entry)
        etcd = {"url": plan.etcd.url, "endpoint": plan.etcd.endpoint, "peerUrl": plan.etcd.peer_url}
        return {
            "cluster": plan.name,
            "state": state,
            "upPid": os.getpid(),
            "host": plan.host,
            "dataDir": str(plan.data_dir),
            "etcd": {**etcd, **_pid_fields(self.etcd)},
            "nameservers": nameservers,
            "brokers": brokers,
            "nameserverUrl": "nameserver://" + ";".join(ns["address"] for ns in nameservers)
            if nameservers
            else plan.nameserver_url,
        }

    def save(self, state: str) -> None:
        write_state(self.plan.state_path, self.document(state))

    def start(self, etcd_bin: str, log_level: str, timeout_s: float) -> None:
        """Start etcd, the name servers, the brokers, each tier waited for. Raises ChildStartError or
        StopRequested (children already started are left to the caller to stop)."""
        plan, sup, log_dir = self.plan, self.supervisor, self.plan.data_dir / "logs"
        report = sup.report
        self.etcd = sup.spawn(_etcd_child(etcd_bin, plan, log_dir, log_level))
        self.save("starting")
        sup.wait_ready({self.etcd: http_health_probe(plan.etcd.endpoint + "/health")}, timeout_s)
        report(f"etcd ready (pid {self.etcd.pid}): {plan.etcd.url}")
        for ns in plan.nameservers:
            self.nameservers.append((ns, sup.spawn(_nameserver_child(ns, log_dir, log_level))))
        self.save("starting")
        sup.wait_ready({child: line_probe(NAMESERVER_READY) for _, child in self.nameservers}, timeout_s)
        for _, child in self.nameservers:
            report(f"{child.name} ready (pid {child.pid}): {child.ready_result.group(1)}")
        # the addresses the name servers reported, as the brokers can dial them
        nameservers = ";".join(_dialable(child.ready_result.group(1)) for _, child in self.nameservers)
        # the masters first (each bootstraps its group in etcd), then the slaves, which follow them
        for wave in (plan.masters, plan.slave_brokers):
            started = []
            for broker in wave:
                child = sup.spawn(_broker_child(broker, plan, nameservers, log_dir, log_level))
                self.brokers.append((broker, child))
                started.append((broker, child))
            if not started:
                continue
            self.save("starting")
            sup.wait_ready({child: line_probe(_broker_probe(b)) for b, child in started}, timeout_s)
            for broker, child in started:
                ha = f" ha={child.ready_result.group(6)}" if broker.replicated else ""
                report(f"{child.name} ready (pid {child.pid}): {child.ready_result.group(1)}{ha}")

    def restart_delay(self, child: Child) -> float:
        """How long to wait before restarting ``child``, a replicated broker that died: a slave after
        :data:`RESTART_DELAY_S`; the group's live master (its registration outlives it until its etcd lease
        expires) only after :data:`MASTER_RESTART_DELAY_S`, so an in-sync slave is elected first and the old
        master returns as its slave rather than racing the election. Unknown role: the longer delay."""
        live = fetch_live_brokers(self.document("running"), timeout_s=1.0)
        role = live_roles(self.document("running"), live).get(child.name, "")
        return RESTART_DELAY_S if role.startswith("slave") else MASTER_RESTART_DELAY_S

    def order_stop_by_live_role(self) -> None:
        """With replication, stop the brokers that are slaves *now* before the live masters (after a failover
        the configured order is wrong), so stopping elects nobody. Best effort: unchanged when no broker
        answers."""
        if self.supervisor.signals > 1 or not any(broker.replicated for broker, _ in self.brokers):
            return  # a second stop signal: no time for questions
        live = fetch_live_brokers(self.document("running"), timeout_s=1.0)
        if live is None:
            return
        roles = live_roles(self.document("running"), live)
        for broker, child in self.brokers:
            role = roles.get(broker.name, "")
            if role.startswith("master"):
                child.tier = _BROKER_TIER
            elif role.startswith("slave"):
                child.tier = _SLAVE_TIER


def _pid_fields(child: Child | None) -> dict[str, Any]:
    if child is None:
        return {"pid": None}
    code = child.returncode
    return {"pid": child.pid} if code is None else {"pid": child.pid, "exitCode": code}


def _check_previous(state_path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(previous cluster.json, refusal)``: the refusal names live processes a previous run left."""
    try:
        doc = read_state(state_path)
    except (ValueError, OSError) as exc:
        return None, f"cannot read {state_path}: {exc}; remove it if no cluster runs from this directory"
    if doc is None:
        return None, None
    alive = running_members(doc)
    if not alive:
        return doc, None
    listed = ", ".join(f"{name} (pid {pid})" for name, pid in alive)
    up = [pid for name, pid in alive if name == "cluster up"]
    how = (
        f"stop it first (Ctrl-C in its terminal, or `kill {up[0]}`)"
        if up
        else f"its `cluster up` is gone; stop them with `kill {' '.join(str(pid) for _, pid in alive)}`"
    )
    return doc, (
        f"a previous `quasar cluster up` on {state_path.parent} is still running: {listed}; "
        f"{how}, or use another --data-dir"
    )


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160, highlight=False)


@cluster.command()
@click.option(
    "--brokers",
    default=3,
    show_default=True,
    type=click.IntRange(1, MAX_BROKERS),
    help="Broker groups, one master each (broker-a, broker-b, ...).",
)
@click.option(
    "--slaves",
    default=0,
    show_default=True,
    type=click.IntRange(0, MAX_SLAVES),
    help="Slaves per broker group (replication with automatic failover; 0 = none). Each group then runs "
    "broker-a (master, id 0) and broker-a-1 .. broker-a-S (slaves).",
)
@click.option(
    "--replication",
    default="sync",
    show_default=True,
    type=click.Choice(sorted(REPLICATION_MODES)),
    help="With --slaves: masters are SYNC_MASTER (a receipt waits for the in-sync slaves) or ASYNC_MASTER.",
)
@click.option(
    "--nameservers",
    default=2,
    show_default=True,
    type=click.IntRange(1, MAX_NAMESERVERS),
    help="Name servers; every broker registers with all of them.",
)
@click.option(
    "--data-dir",
    default=Path("./cluster"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="etcd's and each broker group's data, logs/ and cluster.json.",
)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="First port of the fixed layout: etcd client, etcd peer, then per name server its port and "
    "HTTP port, then per broker process its Pulsar and admin ports (and HA port with --slaves). "
    "Default: free ports.",
)
@click.option("--cluster-name", default="quasar-cluster", show_default=True, help="The brokers' --cluster.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address the name servers and brokers bind and advertise (etcd stays on 127.0.0.1).",
)
@click.option(
    "--log-level", default="INFO", show_default=True, type=_LOG_LEVEL, help="Every child's log level."
)
@click.option(
    "--etcd-bin", default="etcd", show_default=True, help="The etcd executable (name on PATH or path)."
)
@click.option(
    "--startup-timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds each tier (etcd, name servers, brokers) gets to become ready.",
)
@click.option(
    "--stop-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds each tier gets to exit after SIGTERM before SIGKILL.",
)
def up(
    brokers: int,
    slaves: int,
    replication: str,
    nameservers: int,
    data_dir: Path,
    base_port: int | None,
    cluster_name: str,
    host: str,
    log_level: str,
    etcd_bin: str,
    startup_timeout: float,
    stop_timeout: float,
) -> None:
    """Start etcd, NAMESERVERS name servers and BROKERS broker groups (with SLAVES slaves each) here; Ctrl-C
    stops them all."""
    err = _console(stderr=True)
    etcd_path = shutil.which(etcd_bin)
    if etcd_path is None:
        raise click.ClickException(
            f"etcd not found ({etcd_bin!r} is not an executable on PATH): install it with "
            "`apt-get install etcd-server` (Debian/Ubuntu, etcd 3.4+) or pass --etcd-bin /path/to/etcd"
        )
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    previous, refusal = _check_previous(data_dir / STATE_FILE)
    if refusal is not None:
        raise click.ClickException(refusal)
    try:
        plan = plan_cluster(
            name=cluster_name,
            data_dir=data_dir,
            host=host,
            brokers=brokers,
            nameservers=nameservers,
            base_port=base_port,
            reuse=previous_ports(previous) if previous else None,
            slaves=slaves,
            replication=replication,
        )
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"cannot lay out the ports: {exc}") from None
    if base_port is not None:
        taken = taken_ports([(h, p) for _, h, p in plan.ports()])
        if taken:
            names = {(h, p): what for what, h, p in plan.ports()}
            listed = "; ".join(f"{h}:{p} ({names[(h, p)]}) {reason}" for h, p, reason in taken)
            raise click.ClickException(
                f"--base-port {base_port} needs ports {base_port}..{base_port + len(plan.ports()) - 1}, "
                f"but {listed}: pick another --base-port or leave it out for free ports"
            )
    supervisor = Supervisor(
        lambda line: err.print(line, markup=False, soft_wrap=True),
        stop_timeout_s=stop_timeout,
        restart_policy=RestartPolicy(delay_s=RESTART_DELAY_S),
    )
    supervisor.install_signal_handlers()
    run = _Run(plan, supervisor)
    supervisor.restart_delay = run.restart_delay
    try:
        run.start(etcd_path, log_level, startup_timeout)
    except (ChildStartError, StopRequested) as exc:
        started = [c.name for c in supervisor.children if c.alive]
        err.print(f"{exc}", markup=False)
        if started:
            err.print(f"stopping what was started: {', '.join(started)}", markup=False)
        supervisor.stop_all()
        run.save("failed")
        raise click.ClickException(
            "the cluster was stopped while starting"
            if isinstance(exc, StopRequested)
            else f"the cluster did not start: {exc.summary} (log: {exc.child.log_path})"
        ) from None
    except BaseException:
        supervisor.stop_all()
        run.save("failed")
        raise
    _serve(run, err, brokers, nameservers)


def _serve(run: _Run, err: Console, brokers: int, nameservers: int) -> None:
    plan, supervisor = run.plan, run.supervisor
    run.save("running")
    out = _console()
    slaves = f" with {plan.slaves} slave(s) each" if plan.slaves else ""
    title = f"{plan.name}: etcd, {nameservers} name server(s), {brokers} broker group(s){slaves}"
    out.print(urls_table(run.document("running"), title=title))
    out.print(f"nameserver URL: {plan.nameserver_url}", markup=False, highlight=False)
    out.print(f"logs: {plan.data_dir / 'logs'}   Ctrl-C stops the cluster", markup=False, highlight=False)
    print(f"quasar cluster ready: {plan.state_path}", flush=True)
    try:
        by_signal = supervisor.watch(lambda child: run.save("running"))
    finally:
        if supervisor.stop_requested:
            err.print("stopping: brokers, then name servers, then etcd (again to kill at once)", markup=False)
        run.order_stop_by_live_role()
        supervisor.stop_all()
        run.save("stopped")
    if not by_signal:
        raise click.ClickException("every member of the cluster exited")
    err.print("cluster stopped", markup=False)


# -- status ---------------------------------------------------------------------------------------------------


@cluster.command()
@click.option(
    "--data-dir",
    default=Path("./cluster"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The data directory `cluster up` used.",
)
def status(data_dir: Path) -> None:
    """Show the members of the cluster ``cluster up`` runs from DATA_DIR, whether each one answers, and each
    broker's live role and epoch (which change after a failover)."""
    path = data_dir.resolve() / STATE_FILE
    try:
        doc = read_state(path)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if doc is None:
        raise click.ClickException(f"no {path}: no `quasar cluster up` ran with --data-dir {data_dir}")
    states = member_status(doc)
    up_pid = doc.get("upPid")
    up_alive = isinstance(up_pid, int) and pid_alive(up_pid)
    title = f"{doc.get('cluster')}: {doc.get('state')} (cluster up pid {up_pid}, {'alive' if up_alive else 'gone'})"
    live = live_roles(doc, fetch_live_brokers(doc)) if doc.get("state") == "running" and up_alive else None
    _console().print(urls_table(doc, title=title, status=states, live=live))
    if not all(state == "up" or state.startswith("up (") for state in states.values()):
        sys.exit(1)
