"""Limits checked before allocation, against a real broker process (issue 16, hardening): each hostile input
gets Pulsar's error (or the connection is refused) and the broker keeps serving."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest

from quasar.metadata import encode_json
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.protocol import CommandType, commands
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.proto import PulsarApi_pb2 as pb
from tests.interop.helpers import admin, new_client, new_namespace, topic_name
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop


def _start(broker_factory, tmp_path: Path, settings: str, **kwargs):
    config = tmp_path / f"limits-{uuid.uuid4().hex[:6]}.toml"
    config.write_text(settings)
    return broker_factory(extra_args=("--config", str(config)), **kwargs)


def _still_serves(broker) -> None:
    client = new_client(broker)
    try:
        topic = topic_name("alive")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"alive")
        assert consumer.receive(timeout_millis=10_000).data() == b"alive"
    finally:
        client.close()


def _raw_admin(broker, method: str, path: str, data: bytes) -> tuple[int, object]:
    request = urllib.request.Request(
        f"{broker.admin_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, None
    except urllib.error.HTTPError as exc:
        with exc:
            text = exc.read().decode()
        return exc.code, json.loads(text) if text.startswith("{") else text


# ---------------------------------------------------------------------- connections
def test_connections_past_the_per_ip_limit_are_refused_at_accept(broker_factory, tmp_path):
    broker = _start(broker_factory, tmp_path, "broker_max_connections_per_ip = 3\n")
    held = [RawConnection(broker.service_url) for _ in range(3)]  # CONNECT answered on each
    try:
        extra = socket.create_connection(("127.0.0.1", broker.bound_port), timeout=10)
        extra.sendall(commands.new_connect("flood", protocol_version=20))
        extra.settimeout(10)
        try:
            assert extra.recv(4096) == b""  # closed without a CONNECTED
        except ConnectionResetError:
            pass
        finally:
            extra.close()
        held.pop().close()  # one slot frees up
        for _ in range(50):  # bounded: the broker sees the close asynchronously
            try:
                held.append(RawConnection(broker.service_url))
                break
            except (AssertionError, OSError):
                time.sleep(0.1)
        assert len(held) == 3
        held[-1].send(commands.new_ping())
        held[-1].expect(CommandType.PONG)
    finally:
        for conn in held:
            conn.close()
    assert "broker_max_connections_per_ip" in broker.stderr_text()
    time.sleep(0.5)  # the held connections' slots are released before the health check connects
    _still_serves(broker)


def test_connection_flood_logs_refusals_at_a_bounded_rate(broker_factory, tmp_path):
    broker = _start(broker_factory, tmp_path, "broker_max_connections = 2\n")
    held = [RawConnection(broker.service_url) for _ in range(2)]
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", broker.bound_port), timeout=10)
            sock.close()
        time.sleep(1)
        refusals = broker.stderr_text().count("refusing connection")
        assert 1 <= refusals <= 3  # one line per 10 s, the rest counted in it
    finally:
        for conn in held:
            conn.close()


def test_silent_connections_are_closed_by_the_keep_alive(broker_factory, tmp_path):
    broker = _start(broker_factory, tmp_path, "keep_alive_interval_s = 1.0\n")
    never_connects = socket.create_connection(("127.0.0.1", broker.bound_port), timeout=15)
    try:
        never_connects.settimeout(15)
        try:
            assert never_connects.recv(4096) == b""  # closed: no CONNECT within one interval
        except ConnectionResetError:
            pass
    finally:
        never_connects.close()
    assert "handshake not completed" in broker.stderr_text()
    silent = RawConnection(broker.service_url)  # connected, then never answers the broker's PING
    try:
        assert silent.is_closed_by_broker(timeout=15)
    finally:
        silent.close()
    _still_serves(broker)


def test_pending_publishes_past_the_limit_are_throttled_not_lost(broker_factory, tmp_path):
    broker = _start(broker_factory, tmp_path, "max_pending_publish_requests_per_connection = 4\n")
    conn = RawConnection(broker.service_url)
    try:
        topic = topic_name("pending")
        name = conn.create_producer(topic)
        burst = []
        for sequence_id in range(300):
            metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
            burst.append(commands.new_send(1, sequence_id, encode_headers_and_payload(metadata, b"m")))
        conn.send(b"".join(burst))  # far more than 4 in flight: the broker pauses reading, then resumes
        receipts = [
            conn.expect(CommandType.SEND_RECEIPT).command.send_receipt.sequence_id for _ in range(300)
        ]
        assert receipts == list(range(300))
    finally:
        conn.close()
    _still_serves(broker)


# ---------------------------------------------------------------------- topics, subscriptions, partitions
SMALL = """
max_subscriptions_per_topic = 2
max_topics_per_namespace = 20
max_num_partitions_per_partitioned_topic = 16
http_max_request_size = 262144
"""


@pytest.fixture
def small(broker_factory, tmp_path):
    return _start(broker_factory, tmp_path, SMALL)


def test_subscriptions_per_topic(small):
    client = new_client(small)
    try:
        topic = topic_name("subs")
        client.subscribe(topic, "one").close()
        client.subscribe(topic, "two")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "three")
        client.subscribe(topic, "one")  # an existing subscription is not one more
    finally:
        client.close()
    status, subscriptions = admin(
        small, "GET", f"/admin/v2/persistent/{topic[len('persistent://') :]}/subscriptions"
    )
    assert status == 200 and sorted(subscriptions) == ["one", "two"]
    _still_serves(small)


def test_topics_per_namespace(small):
    namespace = new_namespace(small, "quota")
    client = new_client(small)
    try:
        for i in range(20):
            client.create_producer(f"persistent://{namespace}/t{i}")
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer(f"persistent://{namespace}/t20")
        with pytest.raises(pulsar.NotAllowedError):  # a partition name without its partitioned topic counts
            client.create_producer(f"persistent://{namespace}/fake-partition-0")
        client.create_producer(f"persistent://{namespace}/t0")  # existing topics still serve
    finally:
        client.close()
    status, body = admin(small, "PUT", f"/admin/v2/persistent/{namespace}/p/partitions", 2)
    assert status == 412 and "Exceed maximum number of topics in namespace" in body["reason"]
    status, body = admin(small, "PUT", f"/admin/v2/persistent/{namespace}/t99")
    assert status == 412 and "Exceed maximum number of topics in namespace" in body["reason"]
    status, topics = admin(small, "GET", f"/admin/v2/persistent/{namespace}")
    assert len(topics) == 20


@pytest.mark.parametrize("count", [17, 2**31 - 1, 10**10, 10**30])
def test_partition_counts_past_the_bound_are_refused(small, count):
    topic = f"public/default/wide-{uuid.uuid4().hex[:6]}"
    status, body = admin(small, "PUT", f"/admin/v2/persistent/{topic}/partitions", count)
    assert status == 412 and "less than or equal to 16" in body["reason"]
    assert admin(small, "GET", f"/admin/v2/persistent/{topic}/partitions")[1] == {"partitions": 0}
    status, _ = admin(small, "PUT", f"/admin/v2/persistent/{topic}/partitions", 16)
    assert status == 204
    status, topics = admin(small, "GET", "/admin/v2/persistent/public/default")
    assert len([t for t in topics if "wide-" in t]) == 16
    _still_serves(small)


def test_admin_bodies_too_large_or_too_deep(small):
    namespace = f"public/big-{uuid.uuid4().hex[:6]}"
    status, body = _raw_admin(
        small, "PUT", f"/admin/v2/namespaces/{namespace}", b'{"x": "' + b"a" * 300_000 + b'"}'
    )
    assert status == 413
    deep = b"[" * 100_000 + b"]" * 100_000  # 200 kB: under the size bound, 100k deep
    status, body = _raw_admin(small, "PUT", f"/admin/v2/namespaces/{namespace}", deep)
    assert status == 400 and "nested deeper" in body["reason"]
    status, body = _raw_admin(small, "PUT", "/admin/v2/persistent/public/default/d/partitions", deep)
    assert status == 400
    assert namespace not in admin(small, "GET", "/admin/v2/namespaces/public")[1]
    _still_serves(small)


@pytest.mark.parametrize(
    "policies",
    [
        {"retention_policies": "forever"},
        {"message_ttl_in_seconds": "60"},
        {"backlog_quota": [1, 2]},
        {"deduplicationEnabled": {"on": 1}},
    ],
)
def test_ill_typed_namespace_policies_are_refused_and_not_stored(small, policies):
    namespace = f"public/typed-{uuid.uuid4().hex[:6]}"
    status, body = admin(small, "PUT", f"/admin/v2/namespaces/{namespace}", policies)
    assert status == 400 and body["reason"]
    assert namespace not in admin(small, "GET", "/admin/v2/namespaces/public")[1]
    status, body = admin(small, "PUT", "/admin/v2/tenants/typed-tenant", {"adminRoles": "everyone"})
    assert status == 400


def test_ill_typed_policies_stored_before_do_not_break_topic_loading(broker_factory, tmp_path):
    data_dir = tmp_path / "old"
    broker = broker_factory(data_dir=data_dir)
    assert admin(broker, "PUT", "/admin/v2/namespaces/public/legacy", {})[0] == 204
    broker.stop()

    async def corrupt() -> None:  # as an older broker stored it: unchecked
        store = await SqliteMetadataStore.open(data_dir / "metadata.db")
        try:
            bad = {"retention_policies": "forever", "message_ttl_in_seconds": "x", "backlog_quota": 7}
            await store.put("/admin/policies/public/legacy", encode_json(bad))
            # a partition count stored before it was bounded (the probe's 2^31-1): listing it would build
            # two billion names on the event loop
            await store.put(
                "/admin/partitioned-topics/persistent/public/legacy/huge",
                encode_json({"partitions": 2**31 - 1}),
            )
        finally:
            await store.close()

    asyncio.run(corrupt())
    broker = broker_factory(data_dir=data_dir)
    client = new_client(broker)
    try:
        topic = "persistent://public/legacy/t"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"loads")
        assert consumer.receive(timeout_millis=10_000).data() == b"loads"
        with pytest.raises(pulsar.NotAllowedError):  # refused at once, not retried
            client.create_producer("persistent://public/legacy/huge")
    finally:
        client.close()
    assert "stored policy retention_policies is invalid" in broker.stderr_text()
    status, topics = admin(broker, "GET", "/admin/v2/persistent/public/legacy")  # answered, not frozen
    assert status == 200 and topics == [topic]
    status, body = admin(broker, "GET", "/admin/v2/persistent/public/legacy/huge/partitions")
    assert status == 412 and "max_num_partitions_per_partitioned_topic" in body["reason"]


def test_unparsable_http_requests_log_one_line_without_a_traceback(broker):
    """aiohttp refuses a request line over 8,190 bytes with 400 before any handler runs and logged each one at
    ERROR with a traceback: 30 of them now leave one WARNING line (admin.bad_request_log)."""
    for _ in range(30):
        try:
            urllib.request.urlopen(f"{broker.admin_url}/admin/v2/{'x' * 10_000}", timeout=5).close()
        except urllib.error.HTTPError as exc:
            exc.close()
            assert exc.code == 400
    status, _ = admin(broker, "GET", "/admin/v2/clusters")
    assert status == 200
    log = broker.stderr_text()
    assert log.count("malformed request refused with 400") == 1
    assert "Traceback" not in log and "LineTooLong" not in log
