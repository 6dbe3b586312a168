"""Batch-index acks, unacked-message limits and redelivery through the official pulsar-client."""

from __future__ import annotations

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop


def receive_until_timeout(consumer, timeout_ms: int = 1000) -> list:
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_millis=timeout_ms))
        except pulsar.Timeout:
            return out


def send_batch(client, topic: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=len(payloads), batching_max_publish_delay_ms=100
    )
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    producer.close()


def test_batch_index_acks_persist_and_partial_batches_skip_acked_indexes(broker):
    topic = topic_name("acks")
    client = new_client(broker)
    consumer = client.subscribe(
        topic,
        "bia",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )
    send_batch(client, topic, [f"m{i}".encode() for i in range(10)])
    messages = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in messages}) == 1
    for message in messages[::2]:  # ack indexes 0, 2, 4, 6, 8
        consumer.acknowledge(message)
    consumer.close()  # flushes the grouped acks
    client.close()

    broker.restart()

    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic, "bia", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        rest = receive_until_timeout(consumer)
        assert sorted(m.data() for m in rest) == [f"m{i}".encode() for i in range(1, 10, 2)]
        for message in rest:
            consumer.acknowledge(message)
        consumer.close()
        consumer = client.subscribe(
            topic, "bia", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        assert receive_until_timeout(consumer, 500) == []  # the emptied set deleted the whole entry
    finally:
        client.close()


def test_max_unacked_messages_per_consumer_blocks_until_half_acked(broker_factory, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("max_unacked_messages_per_consumer = 10\n")
    broker = broker_factory(extra_args=("--config", str(config)))
    topic = topic_name("acks")
    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic,
            "limited",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic)
        for i in range(30):
            producer.send_async(f"{i}".encode(), None)
        producer.flush()
        first = receive_until_timeout(consumer, 700)
        assert len(first) == 10  # blocked at the limit
        for message in first[:4]:
            consumer.acknowledge(message)
        assert receive_until_timeout(consumer, 700) == []  # 6 unacked > limit/2: still blocked
        consumer.acknowledge(first[4])  # 5 unacked = limit/2: unblocked
        more = receive_until_timeout(consumer, 700)
        assert len(more) == 5  # up to the limit again
        assert {int(m.data()) for m in first + more} == set(range(15))
    finally:
        client.close()


def test_closed_consumer_unacked_go_to_the_other_with_redelivery_count(broker):
    topic = topic_name("acks")
    client = new_client(broker)
    try:
        kwargs = dict(
            consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
        )
        first = client.subscribe(topic, "s", receiver_queue_size=5, **kwargs)
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"{i}".encode())
        got = receive_until_timeout(first, 700)
        assert len(got) == 5
        second = client.subscribe(topic, "s", **kwargs)
        first.close()  # unacked messages go back to the remaining consumer
        redelivered = receive_until_timeout(second, 1500)
        assert sorted(int(m.data()) for m in redelivered) == list(range(5))
        # negative acks by message id redeliver with a growing redelivery_count
        other = topic_name("acks")
        nack = client.subscribe(other, "n", negative_ack_redelivery_delay_ms=100, **kwargs)
        client.create_producer(other).send(b"nacked")
        message = nack.receive(timeout_millis=10_000)
        assert message.redelivery_count() == 0
        nack.negative_acknowledge(message)
        again = nack.receive(timeout_millis=10_000)
        assert again.data() == message.data() and again.redelivery_count() == 1
    finally:
        client.close()


def test_dead_letter_producer_creates_its_initial_subscription(broker):
    """CommandProducer.initial_subscription_name (the official client's DeadLetterPolicy) makes the broker
    create that subscription on the DLQ topic at Earliest, so messages dead-lettered before anybody subscribed
    to the DLQ are kept for it (Pulsar ServerCnx.handleProducer)."""
    topic = topic_name("acks")
    dlq = f"{topic}-dlq"
    client = new_client(broker)
    consumer = client.subscribe(
        topic,
        "work",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=1, dead_letter_topic=dlq, initial_subscription_name="dlq-init"
        ),
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"d{i}".encode())
    received = []
    for _ in range(6):  # first delivery + one redelivery of each; the next redelivery goes to the DLQ
        message = consumer.receive(timeout_millis=10_000)
        received.append(message.data())
        consumer.negative_acknowledge(message)
    assert sorted(received) == sorted([b"d0", b"d1", b"d2"] * 2)
    assert receive_until_timeout(consumer, 2000) == []
    # Latest would see nothing: the messages are there only because the broker made the subscription earlier.
    dlq_consumer = client.subscribe(dlq, "dlq-init", initial_position=pulsar.InitialPosition.Latest)
    got = sorted(dlq_consumer.receive(timeout_millis=10_000).data() for _ in range(3))
    assert got == [b"d0", b"d1", b"d2"]
    client.close()
