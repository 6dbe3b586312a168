"""Deduplication (semantics.md B4) through the official pulsar-client against a real broker process."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.interop.helpers import admin, new_client, new_namespace

pytestmark = pytest.mark.interop


def drain(client, topic: str) -> list[bytes]:
    consumer = client.subscribe(
        topic, f"check-{uuid.uuid4().hex[:6]}", initial_position=pulsar.InitialPosition.Earliest
    )
    seen = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=1500)
        except pulsar.Timeout:
            break
        seen.append(msg.data())
        consumer.acknowledge(msg)
    consumer.close()
    return seen


def test_namespace_policy_admin_round_trip(broker):
    namespace = new_namespace(broker, "dedup")
    assert admin(broker, "GET", f"/admin/v2/namespaces/{namespace}/deduplication") == (200, None)
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/deduplication", True)[0] == 204
    assert admin(broker, "GET", f"/admin/v2/namespaces/{namespace}/deduplication") == (200, True)
    status, body = admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/deduplication", "yes")
    assert status == 400 and "true or false" in body["reason"]
    assert admin(broker, "POST", "/admin/v2/namespaces/public/nope/deduplication", True)[0] == 404


@pytest.mark.parametrize("kill", [False, True], ids=["restart", "sigkill"])
def test_fixed_name_producer_resending_after_restart_doubles_nothing(broker, kill):
    namespace = new_namespace(broker, "dedup")
    assert admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/deduplication", True)[0] == 204
    topic = f"persistent://{namespace}/t"
    client = new_client(broker)
    producer = client.create_producer(topic, producer_name="fixed", send_timeout_millis=10_000)
    first_ids = [producer.send(f"m{i}".encode(), sequence_id=i) for i in range(30)]
    assert all(m.ledger_id() >= 0 for m in first_ids)
    # a resend of an acknowledged sequence id is a definite duplicate: receipt -1:-1, nothing stored
    dup = producer.send(b"m5", sequence_id=5)
    assert (dup.ledger_id(), dup.entry_id()) == (-1, -1)
    client.close()

    broker.restart(kill=kill)

    client = new_client(broker)
    try:
        producer = client.create_producer(topic, producer_name="fixed", send_timeout_millis=10_000)
        # PRODUCER_SUCCESS carried last_sequence_id = 29, rebuilt from the snapshot + replay
        assert producer.last_sequence_id() == 29
        resent = [producer.send(f"m{i}".encode(), sequence_id=i) for i in range(20, 40)]
        assert all((m.ledger_id(), m.entry_id()) == (-1, -1) for m in resent[:10])
        assert all(m.ledger_id() >= 0 for m in resent[10:])
        seen = drain(client, topic)
        assert seen == [f"m{i}".encode() for i in range(40)]
    finally:
        client.close()


def test_batches_use_highest_sequence_id_and_topic_policy_overrides(broker):
    namespace = new_namespace(broker, "dedup")
    topic = f"persistent://{namespace}/batched"
    local = topic.split("://", 1)[1]
    assert admin(broker, "POST", f"/admin/v2/persistent/{local}/deduplicationEnabled", True)[0] == 204
    assert admin(broker, "GET", f"/admin/v2/persistent/{local}/deduplicationEnabled") == (200, True)
    client = new_client(broker)
    try:
        producer = client.create_producer(
            topic,
            producer_name="batcher",
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=50,
        )
        for i in range(10):
            producer.send_async(f"b{i}".encode(), None, sequence_id=100 + i)
        producer.flush()
        stats = admin(broker, "GET", f"/admin/v2/persistent/{local}/stats")[1]
        assert stats["deduplicationStatus"] == "Enabled"
        producer.close()
        # The C++ client sends no highest_sequence_id for a batch, so (as in Pulsar) the entry is recorded
        # under its first sequence id; a resend of that batch start is a duplicate, later ids are new.
        producer = client.create_producer(topic, producer_name="batcher")
        # (The Python wrapper treats sequence_id=0 as "not set", hence ids from 100.)
        assert producer.last_sequence_id() == 100
        assert producer.send(b"b0", sequence_id=100).ledger_id() == -1
        producer.close()
        # turning the topic policy off stores resends again
        assert admin(broker, "POST", f"/admin/v2/persistent/{local}/deduplicationEnabled", False)[0] == 204
        producer = client.create_producer(topic, producer_name="batcher")
        assert producer.last_sequence_id() == -1
        assert producer.send(b"b3", sequence_id=103).ledger_id() >= 0
        assert drain(client, topic) == [f"b{i}".encode() for i in range(10)] + [b"b3"]
    finally:
        client.close()
