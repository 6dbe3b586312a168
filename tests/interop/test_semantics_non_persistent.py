"""Non-persistent topics (semantics.md B3, gotcha 3) through the official pulsar-client."""

from __future__ import annotations

import json
import urllib.request

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop


def drain(consumer, timeout_ms: int = 800) -> list:
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg)
        consumer.acknowledge(msg)


def stats(broker, topic: str) -> dict:
    local = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/non-persistent/{local}/stats", timeout=10) as r:
        return json.loads(r.read())


def test_receipts_and_deliveries_use_id_0_0_and_nothing_is_kept(broker):
    topic = topic_name("np", domain="non-persistent")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        before = producer.send(b"nobody-listens")  # no subscription: dropped
        assert (before.ledger_id(), before.entry_id()) == (0, 0)
        consumer = client.subscribe(topic, "np", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(5):
            producer.send(f"{i}".encode())
        received = drain(consumer)
        assert [m.data() for m in received] == [f"{i}".encode() for i in range(5)]
        assert all((m.message_id().ledger_id(), m.message_id().entry_id()) == (0, 0) for m in received)
        with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/non-persistent/public/default") as r:
            assert topic in json.loads(r.read())
        with pytest.raises(pulsar.PulsarException):
            consumer.seek(pulsar.MessageId.earliest)  # nothing to seek in
    finally:
        client.close()


def test_messages_beyond_permits_are_dropped(broker):
    topic = topic_name("np", domain="non-persistent")
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "slow", receiver_queue_size=5)
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"{i}".encode())
        received = drain(consumer)
        assert [m.data() for m in received] == [f"{i}".encode() for i in range(5)]
        assert stats(broker, topic)["subscriptions"]["slow"]["msgDropCount"] == 15
    finally:
        client.close()


def test_shared_subscription_spreads_and_each_subscription_gets_a_copy(broker):
    topic = topic_name("np", domain="non-persistent")
    client = new_client(broker)
    try:
        shared = [
            client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared) for _ in range(2)
        ]
        exclusive = client.subscribe(topic, "other")
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"{i}".encode())
        got = [drain(c) for c in shared]
        assert all(got) and sorted(int(m.data()) for g in got for m in g) == list(range(20))
        assert [int(m.data()) for m in drain(exclusive)] == list(range(20))
    finally:
        client.close()
