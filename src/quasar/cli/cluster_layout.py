"""What ``quasar cluster up`` runs where: the port layout, the members' names, and ``cluster.json``.

Port layout with ``--base-port B`` (deterministic, so scripts and firewalls can rely on it), for ``N`` name
servers and ``M`` broker processes without replication (``--slaves 0``)::

    B                      etcd client port (etcd://127.0.0.1:B, on loopback)
    B + 1                  etcd peer port (loopback)
    B + 2 + 2i             name server i: its route port (nameserver://HOST:port)
    B + 3 + 2i             name server i: its HTTP port
    B + 2 + 2N + 2j        broker j: Pulsar binary protocol (pulsar://HOST:port)
    B + 3 + 2N + 2j        broker j: admin REST (http://HOST:port)

so ``--base-port 7000`` with 2 name servers and 3 brokers uses 7000..7011. With replication (``--slaves S``,
S >= 1) every broker process has a third port, its HA (replication) listener, and the broker processes are
numbered group by group, master first: ``j = g * (S + 1) + k`` for broker id ``k`` (0 = the master,
1..S the slaves) of group ``g`` (0 = broker-a)::

    B + 2 + 2N + 3j        broker j: Pulsar binary protocol
    B + 3 + 2N + 3j        broker j: admin REST
    B + 4 + 2N + 3j        broker j: HA listener (its slaves pull the commit log there while it is master)

so ``--base-port 7000 --nameservers 2 --brokers 3 --slaves 1`` uses 7000..7023 (broker-a 7006..7008,
broker-a-1 7009..7011, broker-b 7012..7014, ...). The brokers' RocketMQ gRPC endpoints (on unless
``--no-rocketmq``) come after all of these, one per broker process in the same order: ``B + L + j`` for a
layout of ``L`` ports above, so ``--base-port 7000 --nameservers 2 --brokers 3`` serves RocketMQ clients on
7012, 7013 and 7014 and the layout above is the same with or without them.

Without ``--base-port`` every port is a free one picked at start (a previous run's ports are reused when all
are still free, so URLs stay the same across restarts of the same data directory).

Names and data: group ``g``'s master is ``broker-a`` (``broker-b``, ...) with its data in
``<data-dir>/broker-a``; its slaves are ``broker-a-1`` .. ``broker-a-S`` in ``<data-dir>/broker-a-1`` ...

``cluster.json`` (in the data directory) is written while the cluster starts, runs and after it stopped::

    {"cluster": "quasar-cluster", "state": "starting" | "running" | "stopped" | "failed",
     "upPid": 1234, "host": "127.0.0.1", "dataDir": "/abs/path", "updatedAt": "2026-...Z",
     "etcd": {"url": "etcd://127.0.0.1:B", "endpoint": "http://127.0.0.1:B",
              "peerUrl": "http://127.0.0.1:B+1", "pid": 1235},
     "nameservers": [{"name": "nameserver-0", "address": "HOST:P", "http": "http://HOST:P2", "pid": ...}],
     "brokers": [{"name": "broker-a", "group": "broker-a", "id": 0, "role": "master",
                  "serviceUrl": "pulsar://HOST:P", "webServiceUrl": "http://HOST:A",
                  "rocketmqAddress": "HOST:R", "dataDir": "/abs/path/broker-a", "pid": ...}],
     "nameserverUrl": "nameserver://HOST:P;HOST:P"}

A member not started yet has ``"pid": null``. With replication each broker entry also has ``"brokerRole"``
(``SYNC_MASTER`` / ``ASYNC_MASTER`` / ``SLAVE``: what it was started as), ``"haAddress"`` (``HOST:H``) and
``"restarts"`` (how often ``cluster up`` restarted it; ``"gaveUp": true`` once it stopped doing so).
``"role"`` is the *configured* role (``"master"`` for id 0, ``"slave"`` otherwise); the live role changes
after a failover (an elected slave serves as master, a returning old master follows it): ``quasar cluster
status`` and ``GET /admin/v2/brokers`` show the live one.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import socket
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "MAX_BROKERS",
    "MAX_NAMESERVERS",
    "MAX_SLAVES",
    "REPLICATION_MODES",
    "STATE_FILE",
    "BrokerSpec",
    "ClusterPlan",
    "EtcdSpec",
    "NameServerSpec",
    "broker_name",
    "free_ports",
    "group_name",
    "members",
    "pid_alive",
    "plan_cluster",
    "previous_ports",
    "read_state",
    "running_members",
    "taken_ports",
    "write_state",
]

STATE_FILE = "cluster.json"
MAX_BROKERS = 26  # broker-a .. broker-z
MAX_NAMESERVERS = 16
MAX_SLAVES = 8
#: ``--replication`` -> the masters' ``--broker-role``.
REPLICATION_MODES = {"sync": "SYNC_MASTER", "async": "ASYNC_MASTER"}
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class EtcdSpec:
    """The single etcd member: client and peer ports on loopback."""

    client_port: int
    peer_port: int
    host: str = LOOPBACK

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: etcd's client URL (its ``/health`` answers when it is ready)."""
        return f"http://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def url(self) -> str:
        """``etcd://127.0.0.1:PORT``: what brokers take as ``--metadata-store``."""
        return f"etcd://{self.host}:{self.client_port}"


@dataclass(frozen=True)
class NameServerSpec:
    name: str
    host: str
    port: int
    http_port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerSpec:
    """One broker process. ``broker_role`` is its ``--broker-role`` (SYNC_MASTER, ASYNC_MASTER, SLAVE; "" =
    no replication), ``ha_port`` its ``--ha-port`` (None without replication) and ``rocketmq_port`` its
    ``--rocketmq-port`` (None: started with ``--no-rocketmq``)."""

    group: str
    broker_id: int
    host: str
    port: int
    admin_port: int
    ha_port: int | None = None
    broker_role: str = ""
    rocketmq_port: int | None = None

    @property
    def name(self) -> str:
        """Log, table and data directory name: the group, with the broker id when it is not the master's."""
        return self.group if self.broker_id == 0 else f"{self.group}-{self.broker_id}"

    @property
    def role(self) -> str:
        """The configured role, ``"master"`` (id 0) or ``"slave"``; after a failover the live one differs."""
        return "master" if self.broker_id == 0 else "slave"

    @property
    def replicated(self) -> bool:
        return bool(self.broker_role)

    @property
    def ha_address(self) -> str | None:
        return f"{self.host}:{self.ha_port}" if self.ha_port is not None else None

    @property
    def rocketmq_address(self) -> str | None:
        """``HOST:PORT`` of its RocketMQ gRPC endpoint (what ``ClientConfiguration`` takes), None when off."""
        return f"{self.host}:{self.rocketmq_port}" if self.rocketmq_port is not None else None


@dataclass(frozen=True)
class ClusterPlan:
    """Every member of a local cluster with its ports; nothing is started by building one."""

    name: str
    data_dir: Path
    host: str
    etcd: EtcdSpec
    nameservers: tuple[NameServerSpec, ...]
    brokers: tuple[BrokerSpec, ...]

    @property
    def nameserver_list(self) -> str:
        """``"h:p;h:p"``: the brokers' ``--nameservers`` value."""
        return ";".join(ns.address for ns in self.nameservers)

    @property
    def nameserver_url(self) -> str:
        return f"nameserver://{self.nameserver_list}"

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def ports(self) -> list[tuple[str, str, int]]:
        """``(what, bind address, port)`` for every port the plan uses, in layout order."""
        out = [("etcd client", self.etcd.host, self.etcd.client_port)]
        out.append(("etcd peer", self.etcd.host, self.etcd.peer_port))
        for ns in self.nameservers:
            out += [(ns.name, ns.host, ns.port), (f"{ns.name} http", ns.host, ns.http_port)]
        for b in self.brokers:
            out += [(f"{b.name} pulsar", b.host, b.port), (f"{b.name} admin", b.host, b.admin_port)]
            if b.ha_port is not None:
                out.append((f"{b.name} ha", b.host, b.ha_port))
        out += [
            (f"{b.name} rocketmq", b.host, b.rocketmq_port)
            for b in self.brokers
            if b.rocketmq_port is not None
        ]
        return out

    @property
    def slaves(self) -> int:
        """Slaves per broker group (0 = no replication)."""
        return max((b.broker_id for b in self.brokers), default=0)

    @property
    def masters(self) -> tuple[BrokerSpec, ...]:
        """Each group's configured master (broker id 0), in group order."""
        return tuple(b for b in self.brokers if b.broker_id == 0)

    @property
    def slave_brokers(self) -> tuple[BrokerSpec, ...]:
        return tuple(b for b in self.brokers if b.broker_id > 0)

    def data_dir_of(self, broker: BrokerSpec) -> Path:
        """``<data-dir>/broker-a`` for a master, ``<data-dir>/broker-a-1`` for its first slave."""
        return self.data_dir / broker.name


def group_name(index: int) -> str:
    """0 -> ``broker-a``, 25 -> ``broker-z``. Raises ValueError past 25."""
    if not 0 <= index < MAX_BROKERS:
        raise ValueError(f"at most {MAX_BROKERS} brokers, got index {index}")
    return f"broker-{string.ascii_lowercase[index]}"


def plan_cluster(
    *,
    name: str,
    data_dir: Path,
    host: str,
    brokers: int,
    nameservers: int,
    base_port: int | None = None,
    reuse: list[int] | None = None,
    slaves: int = 0,
    replication: str = "sync",
    rocketmq: bool = False,
) -> ClusterPlan:
    """Lay out a cluster of one etcd, ``nameservers`` name servers and ``brokers`` broker groups, each one
    master (broker id 0) and ``slaves`` slaves (ids 1..slaves).

    Args:
        base_port: first port of the deterministic layout (module docstring); None = free ports.
        slaves: slaves per group; 0 = no replication (brokers get no ``--broker-role`` and no HA port).
        replication: ``"sync"`` (masters are SYNC_MASTER) or ``"async"`` (ASYNC_MASTER); used when
            ``slaves`` >= 1.
        rocketmq: give every broker process a RocketMQ gRPC port, after the rest of the layout.
        reuse: with ``base_port`` None, the ports of a previous run in layout order (:func:`previous_ports`);
            used when there are as many as needed and none is taken, else fresh free ports are picked.

    Raises:
        ValueError: a count is out of range, or the layout would pass port 65535.
    """
    if not 1 <= brokers <= MAX_BROKERS:
        raise ValueError(f"--brokers must be in 1..{MAX_BROKERS}, got {brokers}")
    if not 1 <= nameservers <= MAX_NAMESERVERS:
        raise ValueError(f"--nameservers must be in 1..{MAX_NAMESERVERS}, got {nameservers}")
    if not 0 <= slaves <= MAX_SLAVES:
        raise ValueError(f"--slaves must be in 0..{MAX_SLAVES}, got {slaves}")
    if replication not in REPLICATION_MODES:
        raise ValueError(f"--replication must be one of {sorted(REPLICATION_MODES)}, got {replication!r}")
    per_broker = 3 if slaves else 2
    processes = brokers * (1 + slaves)
    count = 2 + 2 * nameservers + per_broker * processes + (processes if rocketmq else 0)
    hosts = [LOOPBACK, LOOPBACK] + [host] * (count - 2)
    if base_port is not None:
        if base_port < 1 or base_port + count - 1 > 65535:
            raise ValueError(f"--base-port {base_port} + {count} ports passes 65535 (or is below 1)")
        ports = list(range(base_port, base_port + count))
    elif reuse is not None and len(reuse) == count and not taken_ports(list(zip(hosts, reuse, strict=True))):
        ports = list(reuse)
    else:
        ports = free_ports(hosts)
    etcd = EtcdSpec(ports[0], ports[1])
    ns_specs = tuple(
        NameServerSpec(f"nameserver-{i}", host, ports[2 + 2 * i], ports[3 + 2 * i])
        for i in range(nameservers)
    )
    first = 2 + 2 * nameservers
    rocketmq_first = first + per_broker * processes
    broker_specs = []
    for g in range(brokers):
        for k in range(1 + slaves):
            at = first + per_broker * (g * (1 + slaves) + k)
            role = "" if not slaves else REPLICATION_MODES[replication] if k == 0 else "SLAVE"
            ha = ports[at + 2] if slaves else None
            rmq = ports[rocketmq_first + g * (1 + slaves) + k] if rocketmq else None
            broker_specs.append(BrokerSpec(group_name(g), k, host, ports[at], ports[at + 1], ha, role, rmq))
    return ClusterPlan(name, data_dir, host, etcd, ns_specs, tuple(broker_specs))


def free_ports(hosts: list[str]) -> list[int]:
    """One distinct free TCP port per entry of ``hosts`` (bound to that address); all sockets are held open
    until every port is picked so none repeats. A port may still be taken by someone else before use."""
    with contextlib.ExitStack() as stack:
        ports = []
        for host in hosts:
            sock = stack.enter_context(socket.socket(_family(host), socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def taken_ports(addresses: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """``(host, port, reason)`` for each address that cannot be bound now (someone listens there, or the
    address is not local). Uses SO_REUSEADDR, as the servers do, so a port in TIME_WAIT counts as free."""
    taken = []
    for host, port in addresses:
        with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
                taken.append((host, port, reason))
    return taken


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# -- cluster.json ---------------------------------------------------------------------------------------------


def read_state(path: Path) -> dict[str, Any] | None:
    """The parsed ``cluster.json``, or None when it is missing. Raises ValueError when it is not JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return doc


def write_state(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``cluster.json`` atomically (a reader never sees half a file); stamps ``updatedAt``."""
    doc = {**doc, "updatedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def members(doc: dict[str, Any]) -> list[tuple[str, int | None]]:
    """``(name, pid)`` of every member listed in a ``cluster.json`` document, etcd first."""
    out: list[tuple[str, int | None]] = []
    etcd = doc.get("etcd") or {}
    out.append(("etcd", etcd.get("pid")))
    out += [(ns.get("name", "nameserver"), ns.get("pid")) for ns in doc.get("nameservers") or []]
    out += [(broker_name(b), b.get("pid")) for b in doc.get("brokers") or []]
    return out


def broker_name(entry: dict[str, Any]) -> str:
    """A cluster.json broker entry's member name (``broker-a``, ``broker-a-1``); documents written before
    replication have no ``"name"``: their group is the name."""
    name = entry.get("name") or entry.get("group") or "broker"
    return str(name)


def running_members(doc: dict[str, Any]) -> list[tuple[str, int]]:
    """``(name, pid)`` of the listed processes (``cluster up`` itself as ``"cluster up"``) still alive."""
    listed = [("cluster up", doc.get("upPid")), *members(doc)]
    return [(name, pid) for name, pid in listed if isinstance(pid, int) and pid_alive(pid)]


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process that looks like ours (its command line names etcd or quasar; a
    recycled PID of some other program does not count). Zombies count as gone."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc") / str(pid)
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True  # no /proc (not Linux): os.kill's answer is all there is
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return any(word in cmdline for word in ("etcd", "quasar"))


def previous_ports(doc: dict[str, Any]) -> list[int] | None:
    """The ports a previous ``cluster.json`` used, in layout order (see :func:`plan_cluster`), or None when
    the document lacks one of them."""
    try:
        etcd = doc["etcd"]
        ports = [_port(etcd["endpoint"]), _port(etcd["peerUrl"])]
        for ns in doc["nameservers"]:
            ports += [_port("tcp://" + ns["address"]), _port(ns["http"])]
        for broker in doc["brokers"]:
            ports += [_port(broker["serviceUrl"]), _port(broker["webServiceUrl"])]
            if broker.get("haAddress"):
                ports.append(_port("tcp://" + broker["haAddress"]))
        ports += [_port("tcp://" + b["rocketmqAddress"]) for b in doc["brokers"] if b.get("rocketmqAddress")]
    except (KeyError, TypeError, ValueError):
        return None
    return ports


def _port(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"no port in {url!r}")
    return port
