"""Admin REST (Pulsar admin v2 paths and JSON shapes) against a live broker."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

pytestmark = pytest.mark.interop


def call(broker, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    req = urllib.request.Request(
        broker.admin_url + path, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else None


def test_partitioned_topic_lifecycle(broker):
    name = f"p-{uuid.uuid4().hex[:8]}"
    path = f"/admin/v2/persistent/public/default/{name}/partitions"
    assert call(broker, "GET", path) == (200, {"partitions": 0})
    assert call(broker, "PUT", path, b"4")[0] == 204
    assert call(broker, "GET", path) == (200, {"partitions": 4})
    status, body = call(broker, "PUT", path, b"4")
    assert status == 409 and "already exists" in body["reason"]
    status, topics = call(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200
    assert {f"persistent://public/default/{name}-partition-{i}" for i in range(4)} <= set(topics)
    status, partitioned = call(broker, "GET", "/admin/v2/persistent/public/default/partitioned")
    assert f"persistent://public/default/{name}" in partitioned


def test_bad_requests_get_400_with_reason(broker):
    path = f"/admin/v2/persistent/public/default/b-{uuid.uuid4().hex[:8]}/partitions"
    status, body = call(broker, "PUT", path, b"{not json")
    assert status == 400 and "JSON" in body["reason"]
    status, body = call(broker, "PUT", path, b'"four"')
    assert status == 400 and body["reason"]
    status, body = call(broker, "PUT", path, b"0")
    assert status == 400
    status, body = call(broker, "PUT", "/admin/v2/persistent/public/default/t-partition-x/partitions", b"2")
    assert status == 412 and body["reason"]  # an invalid topic name: Pulsar's 412
    status, body = call(broker, "PUT", "/admin/v2/persistent/public/nope/t/partitions", b"2")
    assert status == 404


def test_topics_created_by_clients_are_listed_with_stats(broker):
    topic = f"persistent://public/default/l-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic)
        client.subscribe(topic, "s1")
        producer.send(b"x")
        status, topics = call(broker, "GET", "/admin/v2/persistent/public/default")
        assert topic in topics
        local = topic.removeprefix("persistent://")
        status, stats = call(broker, "GET", f"/admin/v2/persistent/{local}/stats")
        assert status == 200
        assert stats["msgInCounter"] == 1
        assert "s1" in stats["subscriptions"]
        assert call(broker, "GET", f"/admin/v2/persistent/{local}/subscriptions") == (200, ["s1"])
    finally:
        client.close()


def test_tenants_and_namespaces(broker):
    assert "public" in call(broker, "GET", "/admin/v2/tenants")[1]
    assert "public/default" in call(broker, "GET", "/admin/v2/namespaces/public")[1]
    tenant = f"t{uuid.uuid4().hex[:6]}"
    assert (
        call(broker, "PUT", f"/admin/v2/tenants/{tenant}", b'{"allowedClusters": ["standalone"]}')[0] == 204
    )
    assert call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns1")[0] == 204
    assert call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns1")[0] == 409
    assert call(broker, "GET", f"/admin/v2/namespaces/{tenant}") == (200, [f"{tenant}/ns1"])
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        topic = f"persistent://{tenant}/ns1/x"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"in-new-namespace")
        assert consumer.receive(timeout_millis=10_000).data() == b"in-new-namespace"
    finally:
        client.close()
