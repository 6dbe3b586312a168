"""Key_Shared subscriptions through the official pulsar-client against a real broker process."""

from __future__ import annotations

from collections import defaultdict

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop

KEY_SHARED = pulsar.ConsumerType.KeyShared


def drain(consumer, timeout_ms: int = 1000, ack: bool = True) -> list:
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)


def publish(client, topic: str, keys: int, per_key: int, start: int = 0) -> None:
    producer = client.create_producer(topic)
    for i in range(start, start + per_key):
        for k in range(keys):
            producer.send_async(f"{i}".encode(), None, partition_key=f"key-{k}")
    producer.flush()
    producer.close()


def by_key(messages) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for msg in messages:
        out[msg.partition_key()].append(int(msg.data()))
    return out


def test_auto_split_keeps_each_key_on_one_consumer_in_order(broker):
    topic = topic_name("ks")
    client = new_client(broker)
    try:
        consumers = [
            client.subscribe(topic, "ks", consumer_type=KEY_SHARED, consumer_name=f"c{i}") for i in range(3)
        ]
        publish(client, topic, keys=30, per_key=10)
        received = [drain(c) for c in consumers]
        assert sum(map(len, received)) == 300
        assert all(received), "every consumer gets some keys"
        seen_keys = [set(by_key(r)) for r in received]
        assert not (seen_keys[0] & seen_keys[1]) and not (seen_keys[1] & seen_keys[2])
        for messages in received:
            for values in by_key(messages).values():
                assert values == list(range(10))  # order per key
    finally:
        client.close()


def test_sticky_ranges_and_overlap_is_refused(broker):
    topic = topic_name("ks")
    client = new_client(broker)
    try:

        def sticky(ranges):
            policy = pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=ranges)
            return client.subscribe(topic, "sticky", consumer_type=KEY_SHARED, key_shared_policy=policy)

        low = sticky([(0, 32767)])
        high = sticky([(32768, 65535)])
        with pytest.raises(pulsar.PulsarException):
            sticky([(100, 200)])
        publish(client, topic, keys=20, per_key=3)
        got_low, got_high = drain(low), drain(high)
        assert len(got_low) + len(got_high) == 60
        assert got_low and got_high and not (set(by_key(got_low)) & set(by_key(got_high)))
    finally:
        client.close()


def test_new_consumer_gets_keys_only_after_earlier_deliveries_are_acked(broker):
    topic = topic_name("ks")
    client = new_client(broker)
    try:
        first = client.subscribe(topic, "guard", consumer_type=KEY_SHARED, consumer_name="first")
        publish(client, topic, keys=20, per_key=2)
        held = drain(first, ack=False)
        assert len(held) == 40
        second = client.subscribe(topic, "guard", consumer_type=KEY_SHARED, consumer_name="second")
        publish(client, topic, keys=20, per_key=2, start=2)
        early_second = drain(second, 700)
        assert early_second == []  # recently joined: nothing past its join position yet
        more_first = drain(first, 700, ack=False)
        for msg in held + more_first:
            first.acknowledge(msg)
        late_second = drain(second, 1500)
        assert late_second, "the new consumer receives its keys once earlier deliveries are acked"
        for values in by_key(late_second).values():
            assert values == [2, 3]  # every message of its keys from the join position on, in order
        assert len(more_first) + len(late_second) == 40
    finally:
        client.close()


def test_allow_out_of_order_delivery_skips_the_guard(broker):
    topic = topic_name("ks")
    client = new_client(broker)
    try:
        policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
        first = client.subscribe(
            topic, "ooo", consumer_type=KEY_SHARED, consumer_name="first", key_shared_policy=policy
        )
        publish(client, topic, keys=20, per_key=2)
        assert len(drain(first, ack=False)) == 40
        second = client.subscribe(
            topic, "ooo", consumer_type=KEY_SHARED, consumer_name="second", key_shared_policy=policy
        )
        publish(client, topic, keys=20, per_key=2, start=2)
        assert drain(second, 1000), "without the ordering guard the new consumer is served at once"
    finally:
        client.close()
