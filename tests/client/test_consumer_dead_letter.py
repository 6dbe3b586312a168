"""Dead-letter policy ``initial_subscription_name`` (Java ``DeadLetterPolicy.initialSubscriptionName``): the
dead-letter producer's PRODUCER carries it, the broker creates that subscription on the dead-letter topic, so
messages moved there before anyone subscribed are kept for it."""

from __future__ import annotations

import time
import uuid

import pytest

import quasar.client as qc

pytestmark = pytest.mark.interop


def _dead_letter(client: qc.Client, topic: str, policy: qc.DeadLetterPolicy) -> list[int]:
    """Publish ``poison`` to ``topic`` and negatively ack it until the policy moves it; returns the
    redelivery counts seen."""
    consumer = client.subscribe(
        topic, "sub", consumer_type=qc.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100,
        initial_position=qc.InitialPosition.Earliest, dead_letter_policy=policy,
    )  # fmt: skip
    producer = client.create_producer(topic)
    producer.send(b"poison", properties={"p": "1"})
    counts = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            message = consumer.receive(1000)
        except qc.ReceiveTimeoutError:
            if counts:
                break
            continue
        counts.append(message.redelivery_count())
        consumer.negative_acknowledge(message)
    producer.close()
    consumer.close()
    return counts


def test_messages_dead_lettered_before_anyone_subscribed_reach_the_initial_subscription(broker):
    topic = f"persistent://public/default/dlq-init-{uuid.uuid4().hex[:10]}"
    client = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        policy = qc.DeadLetterPolicy(max_redeliver_count=1, initial_subscription_name="dlq-init")
        assert _dead_letter(client, topic, policy) == [0, 1]
        dlq = f"{topic}-sub-DLQ"
        # Latest (the default): a new subscription would start after the moved message ...
        late = client.subscribe(dlq, "late")
        with pytest.raises(qc.ReceiveTimeoutError):
            late.receive(500)
        # ... the initial subscription was created (at Earliest) with the dead-letter producer.
        keeper = client.subscribe(dlq, "dlq-init")
        dead = keeper.receive(10_000)
        assert dead.data() == b"poison"
        assert dead.properties()["p"] == "1"
        assert dead.properties()["REAL_TOPIC"] == topic
        keeper.acknowledge(dead)
        keeper.close()
        late.close()
    finally:
        client.close()


def test_without_initial_subscription_a_late_subscriber_misses_the_moved_message(broker):
    topic = f"persistent://public/default/dlq-none-{uuid.uuid4().hex[:10]}"
    client = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        assert _dead_letter(client, topic, qc.DeadLetterPolicy(max_redeliver_count=1)) == [0, 1]
        late = client.subscribe(f"{topic}-sub-DLQ", "dlq-init")
        with pytest.raises(qc.ReceiveTimeoutError):
            late.receive(1000)
        late.close()
    finally:
        client.close()
