"""The admin REST paths Pulsar users' scripts call (``pulsar-admin topics create-subscription / skip /
clear-backlog / expire-messages / reset-cursor / peek-messages / partitioned-stats / unload``, ``tenants get /
update / delete``, ``namespaces policies / delete / topics``) against a real broker, checked through what the
official client's consumers receive next."""

from __future__ import annotations

import datetime
import time
import urllib.request
import uuid

import pulsar
import pytest

from tests.interop.helpers import admin, create_partitioned, new_client, topic_name

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def _send(producer, count: int, prefix: str = "m") -> list:
    return [producer.send(f"{prefix}{i}".encode()) for i in range(count)]


def _receive_all(consumer, count: int) -> list[bytes]:
    received = []
    for _ in range(count):
        message = consumer.receive(10_000)
        consumer.acknowledge(message)
        received.append(message.data())
    return received


def _backlog(broker, topic: str, sub: str) -> int:
    status, stats = admin(broker, "GET", _path(topic) + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


def _wait_backlog(broker, topic: str, sub: str, expected: int) -> None:
    for _ in range(100):  # bounded: 100 polls, 10 s at most
        if _backlog(broker, topic, sub) == expected:
            return
        time.sleep(0.1)
    assert _backlog(broker, topic, sub) == expected


def _peek(broker, topic: str, sub: str, n: int) -> tuple[int, dict[str, str], bytes]:
    url = f"{broker.admin_url}{_path(topic)}/subscription/{sub}/position/{n}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def test_create_subscription_at_a_message_id_skip_and_clear_backlog(broker):
    topic = topic_name("subs")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        receipts = _send(producer, 6)
        sub = _path(topic) + "/subscription"
        assert admin(broker, "PUT", f"{sub}/from-start", {"ledgerId": -1, "entryId": -1})[0] == 204
        status, body = admin(broker, "PUT", f"{sub}/from-start", {"ledgerId": -1, "entryId": -1})
        assert status == 409 and "already exists" in body["reason"]
        third = receipts[3]
        at = {"ledgerId": third.ledger_id(), "entryId": third.entry_id()}
        assert admin(broker, "PUT", f"{sub}/from-m3", at)[0] == 204
        assert admin(broker, "PUT", f"{sub}/latest")[0] == 204  # no body: at the end
        assert _backlog(broker, topic, "from-start") == 6
        assert _backlog(broker, topic, "from-m3") == 3
        assert _backlog(broker, topic, "latest") == 0

        assert admin(broker, "POST", f"{sub}/from-start/skip/2")[0] == 204
        consumer = client.subscribe(topic, "from-start")
        assert _receive_all(consumer, 1) == [b"m2"]
        consumer.close()
        assert admin(broker, "POST", f"{sub}/from-start/skip_all")[0] == 204
        assert _backlog(broker, topic, "from-start") == 0
        consumer = client.subscribe(topic, "from-m3")
        assert _receive_all(consumer, 3) == [b"m3", b"m4", b"m5"]
        consumer.close()
        producer.send(b"after")
        consumer = client.subscribe(topic, "from-start")
        assert _receive_all(consumer, 1) == [b"after"]
        consumer = client.subscribe(topic, "latest")
        assert _receive_all(consumer, 1) == [b"after"]
        assert admin(broker, "POST", f"{sub}/nope/skip_all")[0] == 404
        assert admin(broker, "POST", f"{sub}/latest/skip/x")[0] == 400
        fresh = topic_name("fresh")  # Pulsar auto-creates the topic of a new subscription
        assert admin(broker, "PUT", _path(fresh) + "/subscription/s")[0] == 204
        assert admin(broker, "GET", _path(fresh) + "/subscriptions") == (200, ["s"])
        status, body = admin(broker, "PUT", "/admin/v2/persistent/public/no-such-ns/t/subscription/s")
        assert status == 404, body
    finally:
        client.close()


def test_reset_cursor_by_message_id_and_by_time_moves_connected_consumers(broker):
    topic = topic_name("reset")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s")
        receipts = _send(producer, 3)
        time.sleep(0.05)
        cut_ms = int(time.time() * 1000)
        time.sleep(0.05)
        receipts += [producer.send(b"m3"), producer.send(b"m4")]
        assert _receive_all(consumer, 5) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        base = _path(topic) + "/subscription/s/resetcursor"
        first = receipts[1]
        assert (
            admin(broker, "POST", base, {"ledgerId": first.ledger_id(), "entryId": first.entry_id()})[0]
            == 204
        )
        assert _receive_all(consumer, 4) == [b"m1", b"m2", b"m3", b"m4"]  # the consumer resumed there
        assert admin(broker, "POST", f"{base}/{cut_ms}")[0] == 204
        assert _receive_all(consumer, 2) == [b"m3", b"m4"]
        excluded = {
            "ledgerId": receipts[3].ledger_id(),
            "entryId": receipts[3].entry_id(),
            "isExcluded": True,
        }
        assert admin(broker, "POST", base, excluded)[0] == 204
        assert _receive_all(consumer, 1) == [b"m4"]
        assert admin(broker, "POST", base, {"ledgerId": "x"})[0] == 400
    finally:
        client.close()


def test_expire_messages_of_one_and_of_all_subscriptions(broker):
    topic = topic_name("expire")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for name in ("a", "b", "c"):
            client.subscribe(topic, name).close()
        _send(producer, 3)
        base = _path(topic)
        assert admin(broker, "POST", f"{base}/subscription/a/expireMessages/3600")[0] == 204
        assert _backlog(broker, topic, "a") == 3  # nothing is an hour old
        assert admin(broker, "POST", f"{base}/subscription/a/expireMessages/0")[0] == 204
        assert [_backlog(broker, topic, s) for s in "abc"] == [0, 3, 3]
        assert admin(broker, "POST", f"{base}/all_subscription/expireMessages/0")[0] == 204
        assert [_backlog(broker, topic, s) for s in "abc"] == [0, 0, 0]
        producer.send(b"fresh")
        assert admin(broker, "POST", f"{base}/all_subscription/expireMessages/3600")[0] == 204
        consumer = client.subscribe(topic, "b")
        assert _receive_all(consumer, 1) == [b"fresh"]
        assert admin(broker, "POST", f"{base}/subscription/zz/expireMessages/0")[0] == 404
    finally:
        client.close()


def test_peek_gives_the_payload_with_pulsar_headers(broker):
    topic = topic_name("peek")
    client = new_client(broker)
    try:
        client.subscribe(topic, "s").close()
        producer = client.create_producer(
            topic, batching_enabled=False, compression_type=pulsar.CompressionType.LZ4, producer_name="pk"
        )
        first = producer.send(
            b"x" * 500, properties={"color": "red"}, partition_key="k1", event_timestamp=1234
        )
        producer.send(b"second")
        batcher = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
        for i in range(3):
            batcher.send_async(f"b{i}".encode(), None)
        batcher.flush()

        status, headers, body = _peek(broker, topic, "s", 1)
        assert status == 200
        assert body == b"x" * 500  # uncompressed
        assert headers["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
        assert headers["X-Pulsar-PROPERTY-color"] == "red"
        assert headers["X-Pulsar-partition-key"] == "k1"
        assert headers["X-Pulsar-producer-name"] == "pk"
        assert headers["X-Pulsar-sequence-id"] == "0"
        assert headers["X-Pulsar-event-time"] == "1970-01-01T00:00:01.234Z"
        published = datetime.datetime.fromisoformat(headers["X-Pulsar-publish-time"])
        assert abs(published.timestamp() - time.time()) < 600
        assert "X-Pulsar-num-batch-message" not in headers
        assert _peek(broker, topic, "s", 2)[2] == b"second"
        status, headers, body = _peek(broker, topic, "s", 3)
        assert headers["X-Pulsar-num-batch-message"] == "3"
        assert all(f"b{i}".encode() in body for i in range(3))
        assert _peek(broker, topic, "s", 4)[0] == 404
        consumer = client.subscribe(topic, "s")
        consumer.acknowledge(consumer.receive(10_000))
        _wait_backlog(broker, topic, "s", 2)  # entries; the client sends acks grouped
        assert _peek(broker, topic, "s", 1)[2] == b"second"  # from the first unacknowledged entry
        assert _peek(broker, topic, "s", 0)[0] == 400
        assert _peek(broker, topic, "nope", 1)[0] == 404
    finally:
        client.close()


def test_unload_closes_the_topic_and_clients_carry_on(broker):
    topic = topic_name("unload")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s")
        _send(producer, 2)
        assert _receive_all(consumer, 1) == [b"m0"]  # m1 stays unacknowledged
        _wait_backlog(broker, topic, "s", 1)  # the client sends acks grouped
        assert admin(broker, "PUT", _path(topic) + "/unload")[0] == 204
        producer.send(b"after")
        assert _receive_all(consumer, 2) == [b"m1", b"after"]
        status, stats = admin(broker, "GET", _path(topic) + "/stats")
        assert status == 200 and list(stats["subscriptions"]) == ["s"]
        assert admin(broker, "PUT", _path(topic_name("missing")) + "/unload")[0] == 404
    finally:
        client.close()


def test_partitioned_stats_sum_the_partitions(broker):
    topic = topic_name("pstats")
    create_partitioned(broker, topic, 3)
    assert admin(broker, "PUT", _path(topic) + "/unload")[0] == 204  # no partition used yet: nothing to do
    client = new_client(broker)
    try:
        client.subscribe(topic, "s").close()
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        _send(producer, 9)
        status, stats = admin(broker, "GET", _path(topic) + "/partitioned-stats")
        assert status == 200, stats
        assert stats["metadata"]["partitions"] == 3
        assert set(stats["partitions"]) == {f"{topic}-partition-{i}" for i in range(3)}
        parts = stats["partitions"].values()
        assert stats["msgInCounter"] == sum(p["msgInCounter"] for p in parts) == 9
        assert stats["subscriptions"]["s"]["msgBacklog"] == 9
        assert sum(p["subscriptions"]["s"]["msgBacklog"] for p in parts) == 9
        status, brief = admin(broker, "GET", _path(topic) + "/partitioned-stats?perPartition=false")
        assert status == 200 and brief["partitions"] == {} and brief["msgInCounter"] == 9
        # operations Pulsar applies to every partition
        assert (
            admin(broker, "PUT", _path(topic) + "/subscription/made", {"ledgerId": -1, "entryId": -1})[0]
            == 204
        )
        assert (
            admin(broker, "GET", _path(topic) + "/partitioned-stats")[1]["subscriptions"]["made"][
                "msgBacklog"
            ]
            == 9
        )
        assert admin(broker, "POST", _path(topic) + "/subscription/s/skip_all")[0] == 204
        assert (
            admin(broker, "GET", _path(topic) + "/partitioned-stats")[1]["subscriptions"]["s"]["msgBacklog"]
            == 0
        )
        assert admin(broker, "POST", _path(topic) + "/subscription/made/skip/1")[0] == 405
        assert admin(broker, "PUT", _path(topic) + "/unload")[0] == 204
        producer.send(b"after unload")
        consumer = client.subscribe(topic, "s")
        assert _receive_all(consumer, 1) == [b"after unload"]
        assert admin(broker, "GET", _path(topic_name("plain")) + "/partitioned-stats")[0] == 404
    finally:
        client.close()


def test_tenant_and_namespace_crud_with_409s(broker):
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert admin(broker, "GET", f"/admin/v2/tenants/{tenant}")[0] == 404
    assert admin(broker, "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["a"]})[0] == 204
    assert admin(broker, "GET", f"/admin/v2/tenants/{tenant}") == (
        200,
        {"adminRoles": ["a"], "allowedClusters": []},
    )
    update = {"adminRoles": ["b", "c"], "allowedClusters": ["standalone"]}
    assert admin(broker, "POST", f"/admin/v2/tenants/{tenant}", update)[0] == 204
    assert admin(broker, "GET", f"/admin/v2/tenants/{tenant}") == (200, update)
    assert admin(broker, "POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": 3})[0] == 400

    full, empty = f"{tenant}/full", f"{tenant}/empty"
    for ns in (full, empty):
        assert admin(broker, "PUT", f"/admin/v2/namespaces/{ns}", {"message_ttl_in_seconds": 60})[0] == 204
    status, policies = admin(broker, "GET", f"/admin/v2/namespaces/{full}")
    assert status == 200
    assert policies["message_ttl_in_seconds"] == 60
    assert policies["replication_clusters"] and "auth_policies" in policies
    status, body = admin(broker, "DELETE", f"/admin/v2/tenants/{tenant}")
    assert status == 409 and "namespaces" in body["reason"]

    topic = f"persistent://{full}/t1"
    assert admin(broker, "PUT", _path(topic))[0] == 204
    assert admin(broker, "GET", f"/admin/v2/namespaces/{full}/topics") == (200, [topic])
    assert admin(broker, "GET", f"/admin/v2/namespaces/{empty}/topics") == (200, [])
    status, body = admin(broker, "DELETE", f"/admin/v2/namespaces/{full}")
    assert status == 409 and "non empty" in body["reason"]
    assert admin(broker, "DELETE", f"/admin/v2/namespaces/{full}?force=true")[0] == 405
    assert admin(broker, "DELETE", _path(topic) + "/partitions")[0] == 404  # not a partitioned topic
    assert admin(broker, "DELETE", _path(topic))[0] == 204
    assert admin(broker, "GET", f"/admin/v2/namespaces/{full}/topics") == (200, [])
    assert admin(broker, "DELETE", _path(topic))[0] == 404

    assert admin(broker, "DELETE", f"/admin/v2/namespaces/{empty}")[0] == 204
    assert admin(broker, "GET", f"/admin/v2/namespaces/{empty}")[0] == 404
    assert admin(broker, "GET", f"/admin/v2/namespaces/{tenant}") == (200, [full])
    assert admin(broker, "DELETE", f"/admin/v2/namespaces/{empty}")[0] == 404
    # an empty tenant goes; its name can be used again
    other = f"{tenant}-x"
    assert admin(broker, "PUT", f"/admin/v2/tenants/{other}", {})[0] == 204
    assert admin(broker, "DELETE", f"/admin/v2/tenants/{other}?force=true")[0] == 405
    assert admin(broker, "DELETE", f"/admin/v2/tenants/{other}")[0] == 204
    assert admin(broker, "GET", f"/admin/v2/tenants/{other}")[0] == 404
    assert other not in admin(broker, "GET", "/admin/v2/tenants")[1]
    assert admin(broker, "PUT", f"/admin/v2/tenants/{other}", {})[0] == 204
    # the deletions survive a restart (they went through the metadata store)
    broker.restart()
    assert admin(broker, "GET", f"/admin/v2/namespaces/{empty}")[0] == 404
    assert admin(broker, "GET", f"/admin/v2/tenants/{tenant}") == (200, update)
