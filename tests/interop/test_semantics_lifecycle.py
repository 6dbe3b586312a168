"""Managed-ledger lifecycle through a real broker: rollover, trimming under retention, message TTL, backlog
quotas (semantics.md B1, B6)."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.interop.helpers import admin, new_client, new_namespace

pytestmark = pytest.mark.interop

FAST = """
managed_ledger_max_entries_per_ledger = 5
managed_ledger_min_ledger_rollover_time_ms = 0
managed_ledger_cursor_persist_interval_ms = 100
message_expiry_check_interval_s = 0.2
backlog_quota_check_interval_s = 0.2
"""


@pytest.fixture
def fast_broker(broker_factory, tmp_path):
    config = tmp_path / "fast.toml"
    config.write_text(FAST)
    return broker_factory(extra_args=("--config", str(config)))


def wait_for(condition, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def internal(broker, topic: str) -> dict:
    return admin(broker, "GET", f"/admin/v2/persistent/{topic.split('://', 1)[1]}/internalStats")[1]


def consume_all(client, topic: str, count: int) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(count):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()


@pytest.mark.parametrize("retain", [False, True], ids=["trimmed", "retained"])
def test_consumed_ledgers_are_trimmed_unless_retention_keeps_them(fast_broker, retain):
    broker = fast_broker
    namespace = new_namespace(broker, "life")
    if retain:
        body = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/retention", body)[0] == 204
        assert admin(broker, "GET", f"/admin/v2/namespaces/{namespace}/retention")[1] == body
    topic = f"persistent://{namespace}/t"
    client = new_client(broker)
    try:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic)
        for i in range(23):
            producer.send(f"{i}".encode())
        assert len(internal(broker, topic)["ledgers"]) == 5  # rollover every 5 entries
        consume_all(client, topic, 23)
        if retain:
            time.sleep(1.0)
            assert len(internal(broker, topic)["ledgers"]) == 5
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == b"0"  # still readable
        else:
            assert wait_for(lambda: len(internal(broker, topic)["ledgers"]) == 1)
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == b"20"  # the current ledger only
    finally:
        client.close()


def test_message_ttl_expires_the_backlog(fast_broker):
    broker = fast_broker
    namespace = new_namespace(broker, "life")
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/messageTTL", 1)[0] == 204
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/messageTTL", -5)[0] == 400
    topic = f"persistent://{namespace}/ttl"
    local = topic.split("://", 1)[1]
    client = new_client(broker)
    try:
        client.subscribe(topic, "idle").close()
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"{i}".encode())

        def backlog():
            return admin(broker, "GET", f"/admin/v2/persistent/{local}/stats")[1]["subscriptions"]["idle"][
                "msgBacklog"
            ]

        assert backlog() == 5
        assert wait_for(lambda: backlog() == 0)
    finally:
        client.close()


def test_backlog_quota_exception_blocks_producers_and_eviction_trims_the_backlog(fast_broker):
    broker = fast_broker
    namespace = new_namespace(broker, "life")
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"}
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/backlogQuota", quota)[0] == 204
    assert admin(broker, "GET", f"/admin/v2/namespaces/{namespace}/backlogQuotaMap")[1] == quota
    bad = {"limitSize": 1, "policy": "nope"}
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/backlogQuota", bad)[0] == 400
    topic = f"persistent://{namespace}/quota"
    local = topic.split("://", 1)[1]
    client = new_client(broker)
    try:
        client.subscribe(topic, "slow").close()
        producer = client.create_producer(topic)
        for _ in range(40):
            producer.send(b"x" * 100)

        def refused() -> bool:
            try:
                client.create_producer(topic).close()
            except pulsar.PulsarException:
                return True
            return False

        assert wait_for(refused)
        # switch the topic to eviction: the slowest cursor is moved forward to 90 % of the limit
        evict = {"limitSize": 1000, "limitTime": -1, "policy": "consumer_backlog_eviction"}
        assert admin(broker, "POST", f"/admin/v2/persistent/{local}/backlogQuota", evict)[0] == 204

        def backlog():
            return admin(broker, "GET", f"/admin/v2/persistent/{local}/stats")[1]["subscriptions"]["slow"][
                "msgBacklog"
            ]

        assert wait_for(lambda: 0 < backlog() < 10)
        client.create_producer(topic).close()  # no longer refused
    finally:
        client.close()
