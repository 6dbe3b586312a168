"""A real cluster on loopback: etcd, two name servers and three ``quasar broker`` processes (one broker group
each), driven with the official ``pulsar-client`` and the admin REST API (issue 14's integration tests).

``cluster`` (module scope) is shared by the tests that do not break anything; the fault tests (a killed
broker, a killed name server, etcd unreachable) each build their own. Every process is stopped by PID at
teardown; every wait is bounded in time.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import quasar.client as qc
from quasar.testing.broker_process import BrokerProcess
from quasar.testing.etcd import EtcdProcess, etcd_available
from quasar.testing.nameserver_process import NameServerProcess

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not etcd_available(), reason="etcd is not installed (apt-get install etcd-server)"),
]

GROUPS = ("broker-a", "broker-b", "broker-c")


class LocalCluster:
    """etcd + name servers + one broker per group, started in that order, stopped in the reverse one."""

    def __init__(self, root: Path, *, groups: tuple[str, ...] = GROUPS, nameservers: int = 2) -> None:
        self.root = root
        self.etcd = EtcdProcess(root / "etcd")
        self.nameservers = [NameServerProcess(root / f"ns{i}.logs") for i in range(nameservers)]
        self.groups = groups
        self.brokers: dict[str, BrokerProcess] = {}

    def start(self) -> LocalCluster:
        self.etcd.start()
        for ns in self.nameservers:
            ns.start()
        addresses = ";".join(str(ns.address) for ns in self.nameservers)
        settings = self.root / "broker.toml"  # RocketMQ's shortest registration period, for the refill test
        settings.write_text("register_name_server_period_s = 10\n")
        for group in self.groups:
            broker = BrokerProcess(
                self.root / group,
                subcommand="broker",
                extra_args=(
                    "--broker-name", group,
                    "--cluster", "it",
                    "--nameservers", addresses,
                    # a dead broker's registration goes within 2 s of its last keep-alive
                    "--metadata-store", f"{self.etcd.url}?session_ttl_s=2&operation_timeout_s=3",
                    "--config", str(settings),
                ),
            )  # fmt: skip
            self.brokers[group] = broker.start()
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        for ns in self.nameservers:
            ns.stop()
        self.etcd.resume() if self.etcd.running else None
        self.etcd.stop()

    def admin(self, group: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(method, str(self.brokers[group].admin_url) + path, body)

    def client(self, group: str = "broker-a") -> pulsar.Client:
        return pulsar.Client(
            str(self.brokers[group].service_url), operation_timeout_seconds=15, logger=_QUIET
        )


_QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def http(method: str, url: str, body: Any = None, *, follow: bool = True) -> tuple[int, Any]:
    """(status, JSON body or text); a 3xx is returned as is when ``follow`` is False (body: Location)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=15) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            return exc.code, exc.headers.get("Location")
        text = exc.read().decode()
        return exc.code, json.loads(text) if text.startswith("{") else text


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    """Poll ``check`` every 0.2 s until it returns a truthy value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path / "cluster")
    try:
        yield made.start()
    finally:
        made.stop()


def owner_groups(cluster: LocalCluster, topic: str, partitions: int, ask: str = "broker-b") -> dict[int, str]:
    """Partition index -> group of the broker an HTTP lookup at ``ask`` names."""
    by_url = {str(b.service_url): g for g, b in cluster.brokers.items()}
    owners = {}
    for i in range(partitions):
        status, body = cluster.admin(
            ask, "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}-partition-{i}"
        )
        assert status == 200, body
        owners[i] = by_url[body["brokerUrl"]]
    return owners


def create_partitioned(cluster: LocalCluster, partitions: int, group: str = "broker-a") -> str:
    topic = f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"
    status, body = cluster.admin(
        group, "PUT", f"/admin/v2/{topic.replace('://', '/')}/partitions", partitions
    )
    assert status == 204, body
    return topic


def test_official_client_uses_a_12_partition_topic_spread_over_three_groups(cluster: LocalCluster):
    topic = create_partitioned(cluster, 12)
    owners = owner_groups(cluster, topic, 12)
    assert Counter(owners.values()) == {"broker-a": 4, "broker-b": 4, "broker-c": 4}
    client = cluster.client("broker-a")  # one service URL: the client follows lookups to the owners
    try:
        consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = {f"m-{i}".encode() for i in range(1200)}
        for i, payload in enumerate(sorted(sent)):
            producer.send_async(payload, None, partition_key=f"k{i}")
        producer.flush()
        received: Counter[bytes] = Counter()
        deadline = time.monotonic() + 60
        while sum(received.values()) < len(sent) and time.monotonic() < deadline:
            message = consumer.receive(10_000)
            received[message.data()] += 1
            consumer.acknowledge(message)
        with pytest.raises(pulsar.Timeout):  # nothing more: every message exactly once
            consumer.receive(1000)
    finally:
        client.close()
    assert set(received) == sent and set(received.values()) == {1}
    # the data really is in each group's own commit log: each broker's internal stats count its partitions
    entries = {}
    for index, group in owners.items():
        status, stats = cluster.admin(
            group, "GET", f"/admin/v2/{topic.replace('://', '/')}-partition-{index}/internalStats"
        )
        assert status == 200, stats
        entries[index] = stats["numberOfEntries"]
    assert sum(entries.values()) == 1200 and all(n > 0 for n in entries.values())


def test_any_broker_answers_for_the_cluster(cluster: LocalCluster):
    topic = create_partitioned(cluster, 3, group="broker-c")
    path = topic.replace("://", "/")
    # cluster-wide metadata, from every broker
    for group in GROUPS:
        assert wait_for(lambda g=group: cluster.admin(g, "GET", f"/admin/v2/{path}/partitions")[1] == {"partitions": 3},
                        f"partitioned metadata at {group}")  # fmt: skip
        status, brokers = cluster.admin(group, "GET", "/admin/v2/brokers/it")
        assert status == 200 and len(brokers) == 3
    status, listed = cluster.admin("broker-a", "GET", "/admin/v2/persistent/public/default")
    assert {f"{topic}-partition-{i}" for i in range(3)} <= set(listed)
    # a namespace created at one broker is usable at another at once (notifications)
    status, _ = cluster.admin("broker-b", "PUT", "/admin/v2/namespaces/public/ns-from-b", {})
    assert status == 204
    wait_for(lambda: "public/ns-from-b" in cluster.admin("broker-a", "GET", "/admin/v2/namespaces/public")[1],
             "the namespace at broker-a")  # fmt: skip
    # topic stats are the owner's: other brokers answer 307 to it
    owners = owner_groups(cluster, topic, 3)
    owner = owners[0]
    other = next(g for g in GROUPS if g != owner)
    stats_path = f"/admin/v2/{path}-partition-0/stats"
    client = cluster.client(other)
    try:
        client.create_producer(f"{topic}-partition-0").close()
    finally:
        client.close()
    status, location = http("GET", str(cluster.brokers[other].admin_url) + stats_path, follow=False)
    assert status == 307 and location == str(cluster.brokers[owner].admin_url) + stats_path
    status, stats = http("GET", str(cluster.brokers[other].admin_url) + stats_path)
    assert status == 200 and "publishers" in stats


def test_our_client_follows_redirects_to_the_groups_new_topics_are_placed_on(cluster: LocalCluster):
    """New topics looked up at one broker are placed by load; a topic picked for another group is answered
    with a Redirect (authoritative), which quasar.client follows like the official client."""
    client = qc.Client(str(cluster.brokers["broker-a"].service_url), operation_timeout_seconds=15)
    topics = [f"persistent://public/default/redirected-{uuid.uuid4().hex[:6]}-{i}" for i in range(6)]
    try:
        for topic in topics:
            producer = client.create_producer(topic)
            producer.send(topic.encode())
            producer.close()
        by_url = {str(b.service_url): g for g, b in cluster.brokers.items()}
        owners = {by_url[cluster.admin("broker-a", "GET", f"/lookup/v2/topic/{t.replace('://', '/')}")[1]["brokerUrl"]]
                  for t in topics}  # fmt: skip
        assert len(owners) >= 2  # spread by load, not all on the broker the client asked
        for topic in topics:
            reader = client.create_reader(topic, qc.EARLIEST)
            assert reader.read_next(10_000).data() == topic.encode()
            reader.close()
    finally:
        client.close()


def test_name_servers_know_every_group_and_its_partitions(cluster: LocalCluster):
    topic = create_partitioned(cluster, 6)
    owners = owner_groups(cluster, topic, 6)
    path = topic.replace("://", "/")

    def route_of(ns: NameServerProcess) -> dict[str, list[int]] | None:
        status, route = http("GET", f"{ns.http_url}/routes/{path}")
        if status != 200:
            return None
        held = {q["brokerName"]: sorted(q["partitions"]) for q in route["queueDatas"]}
        return held if sum(map(len, held.values())) == 6 else None

    expected: dict[str, list[int]] = {}
    for index, group in owners.items():
        expected.setdefault(group, []).append(index)
    for ns in cluster.nameservers:
        assert wait_for(lambda ns=ns: route_of(ns), f"the route at {ns.address}") == expected


def test_our_client_produces_and_consumes_through_the_name_servers(cluster: LocalCluster):
    topic = create_partitioned(cluster, 6, group="broker-b")
    path = topic.replace("://", "/")
    for ns in cluster.nameservers:  # registered with both (topic changes are registered within moments)
        wait_for(
            lambda ns=ns: http("GET", f"{ns.http_url}/routes/{path}")[0] == 200, f"the route at {ns.address}"
        )
    url = "nameserver://" + ";".join(str(ns.address) for ns in cluster.nameservers)
    client = qc.Client(url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, "via-name-servers", consumer_type=qc.ConsumerType.Shared)
        producer = client.create_producer(topic)
        sent = {f"n-{i}".encode() for i in range(120)}
        for payload in sorted(sent):
            producer.send(payload)
        received = []
        for _ in range(len(sent)):
            message = consumer.receive(10_000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert sorted(received) == sorted(sent)
        # a topic no group serves yet is created through a broker, as through pulsar://
        fresh = f"persistent://public/default/fresh-{uuid.uuid4().hex[:8]}"
        producer = client.create_producer(fresh)
        producer.send(b"new topic")
        reader = client.create_reader(fresh, qc.EARLIEST)
        assert reader.read_next(10_000).data() == b"new topic"
    finally:
        client.close()


def test_a_killed_broker_takes_only_its_own_partitions_away(own_cluster: LocalCluster):
    cluster = own_cluster
    topic = create_partitioned(cluster, 6)
    owners = owner_groups(cluster, topic, 6)
    cluster.brokers["broker-b"].kill()
    lost = [i for i, g in owners.items() if g == "broker-b"]
    kept = [i for i, g in owners.items() if g != "broker-b"]
    path = topic.replace("://", "/")
    wait_for(lambda: cluster.admin("broker-a", "GET", f"/lookup/v2/topic/{path}-partition-{lost[0]}")[0] == 503,
             "lookups of the dead group's partitions to answer 503 (ServiceNotReady)")  # fmt: skip
    status, body = cluster.admin("broker-c", "GET", f"/lookup/v2/topic/{path}-partition-{lost[0]}")
    assert status == 503 and "no live master" in body["reason"]
    # the name servers drop it at once: its connection closed
    for ns in cluster.nameservers:
        wait_for(lambda ns=ns: all(v["brokerName"] != "broker-b"
                                   for v in http("GET", f"{ns.http_url}/brokers")[1]["brokerLiveTable"].values()),
                 f"{ns.address} to drop broker-b")  # fmt: skip
    client = cluster.client("broker-a")
    try:
        for index in kept:
            producer = client.create_producer(f"{topic}-partition-{index}")
            producer.send(b"still served")
            producer.close()
    finally:
        client.close()
    impatient = pulsar.Client(str(cluster.brokers["broker-a"].service_url), operation_timeout_seconds=3,
                              logger=_QUIET)  # fmt: skip
    try:  # ServiceNotReady is retried by the client until its operation timeout, then fails
        with pytest.raises(pulsar.PulsarException):
            impatient.create_producer(f"{topic}-partition-{lost[0]}")
    finally:
        impatient.close()


@pytest.mark.slow
def test_a_killed_name_server_is_refilled_after_its_restart(own_cluster: LocalCluster):
    cluster = own_cluster
    topic = create_partitioned(cluster, 3)
    first, second = cluster.nameservers
    path = topic.replace("://", "/")

    def partitions_at(ns: NameServerProcess) -> int:
        status, route = http("GET", f"{ns.http_url}/routes/{path}")
        return sum(len(q["partitions"]) for q in route["queueDatas"]) if status == 200 else 0

    wait_for(lambda: partitions_at(first) == 3 and partitions_at(second) == 3, "both name servers' routes")
    first.kill()
    producer_client = cluster.client("broker-b")
    try:  # brokers go on without it: a topic placed now reaches the other name server
        more = create_partitioned(cluster, 2, group="broker-b")
        producer_client.create_producer(more).close()
    finally:
        producer_client.close()
    more_path = more.replace("://", "/")
    wait_for(lambda: http("GET", f"{second.http_url}/routes/{more_path}")[0] == 200, "the new topic's route")
    first.restart()

    # every broker registers again within one period (10 s here)
    def groups_at(ns: NameServerProcess) -> set[str]:
        _, view = http("GET", f"{ns.http_url}/brokers")
        return {v["brokerName"] for v in view["brokerLiveTable"].values()}

    wait_for(lambda: groups_at(first) == set(GROUPS), "every broker to register again", 25)
    assert partitions_at(first) == 3


def test_with_etcd_unreachable_brokers_serve_and_refuse_metadata_changes(own_cluster: LocalCluster):
    cluster = own_cluster
    topic = f"persistent://public/default/{uuid.uuid4().hex[:8]}"
    client = cluster.client("broker-a")
    try:
        producer = client.create_producer(topic)
        producer.send(b"before")
        cluster.etcd.pause()
        try:
            producer.send(b"while etcd is away")  # an owned topic keeps working
            started = time.monotonic()
            status, body = cluster.admin("broker-a", "PUT", "/admin/v2/namespaces/public/while-away", {})
            assert status == 503 and "etcd" in body["reason"], body
            assert time.monotonic() - started < 15
        finally:
            cluster.etcd.resume()
        wait_for(lambda: cluster.admin("broker-a", "PUT", "/admin/v2/namespaces/public/after", {})[0] == 204,
                 "metadata changes once etcd is back", 30)  # fmt: skip
        producer.send(b"after")
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(3)] == [
            b"before",
            b"while etcd is away",
            b"after",
        ]
    finally:
        client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_lookups_answer_the_advertised_listener_the_client_names(tmp_path: Path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    port = _free_port()
    broker = BrokerProcess(
        tmp_path / "broker-a",
        port=port,
        subcommand="broker",
        extra_args=(
            "--broker-name", "broker-a",
            "--metadata-store", etcd.url,
            "--advertised-listeners", f"internal:pulsar://127.0.0.1:{port},external:pulsar://localhost:{port}",
            "--internal-listener-name", "internal",
        ),
    )  # fmt: skip
    try:
        broker.start()
        lookup = f"{broker.admin_url}/lookup/v2/topic/persistent/public/default/l"
        assert http("GET", lookup)[1]["brokerUrl"] == f"pulsar://127.0.0.1:{port}"
        assert http("GET", lookup + "?listenerName=external")[1]["brokerUrl"] == f"pulsar://localhost:{port}"
        external = pulsar.Client(f"pulsar://127.0.0.1:{port}", listener_name="external", logger=_QUIET,
                                 operation_timeout_seconds=5)  # fmt: skip
        try:
            producer = external.create_producer("persistent://public/default/l")
            producer.send(b"through the external listener")
        finally:
            external.close()
        unknown = pulsar.Client(f"pulsar://127.0.0.1:{port}", listener_name="nope", logger=_QUIET,
                                operation_timeout_seconds=3)  # fmt: skip
        try:
            with pytest.raises(pulsar.PulsarException):
                unknown.create_producer("persistent://public/default/l")
        finally:
            unknown.close()
    finally:
        broker.stop()
        etcd.stop()
