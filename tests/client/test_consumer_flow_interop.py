"""Consume path against a real broker: flow permits refilled through small receiver queues (asyncio API and the
blocking facade, whose receive/ack hand-offs to the loop are batched), per-partition order, acks that reach
the broker, and batch-index acks (only the unacked items of a batch come back)."""

from __future__ import annotations

import asyncio

import pulsar
import pytest

import quasar.client as qc
from tests.interop.helpers import create_partitioned, topic_name

pytestmark = pytest.mark.interop


def _topic(broker, partitions: int = 0) -> str:
    topic = topic_name("flow")
    if partitions:
        create_partitioned(broker, topic, partitions)
    return topic


def _publish_batched(broker, topic: str, payloads: list[bytes], **producer_options) -> None:
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=50, **producer_options
        )
        for payload in payloads:
            producer.send_async(payload, None, partition_key=payload.decode().split("-")[0])
        producer.flush()
        producer.close()
    finally:
        client.close()


@pytest.mark.parametrize("partitions", [0, 3])
def test_facade_consumes_everything_through_a_small_receiver_queue(broker, partitions):
    topic = _topic(broker, partitions)
    client = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(
            topic, "s", receiver_queue_size=7, initial_position=qc.InitialPosition.Earliest
        )
        payloads = [f"k{i % 5}-{i:04d}".encode() for i in range(600)]
        _publish_batched(broker, topic, payloads)
        got = []
        for _ in payloads:
            message = consumer.receive(10_000)
            got.append(message.data())
            consumer.acknowledge(message)
        assert sorted(got) == sorted(payloads)
        for key in {p.split(b"-")[0] for p in payloads}:  # one key = one partition: its order is kept
            assert [p for p in got if p.startswith(key + b"-")] == [
                p for p in payloads if p.startswith(key + b"-")
            ]
        consumer.close()
        again = client.subscribe(topic, "s")
        with pytest.raises(qc.ReceiveTimeoutError):
            again.receive(1000)  # every ack reached the broker before the close
        again.close()
    finally:
        client.close()


def test_async_consumer_refills_permits_and_acks_reach_the_broker(broker):
    topic = _topic(broker)
    payloads = [f"k-{i:04d}".encode() for i in range(500)]

    async def main() -> None:
        async with qc.AsyncClient(broker.service_url) as client:
            consumer = await client.subscribe(
                topic, "s", receiver_queue_size=10, initial_position=qc.InitialPosition.Earliest
            )
            await asyncio.to_thread(_publish_batched, broker, topic, payloads)
            got = []
            for _ in payloads:
                message = await consumer.receive(10_000)
                got.append(message.data())
                assert message.message_id().batch_index >= 0
                await consumer.acknowledge(message)
            assert got == payloads
            await consumer.close()
            again = await client.subscribe(topic, "s")
            with pytest.raises(qc.ReceiveTimeoutError):
                await again.receive(1000)
            await again.close()

    asyncio.run(main())


@pytest.mark.parametrize("batch_index_ack", [True, False])
def test_partially_acked_batch_comes_back_whole_or_only_its_unacked_items(broker, batch_index_ack):
    topic = _topic(broker)
    payloads = [f"k-{i}".encode() for i in range(10)]
    client = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        options = {"consumer_type": qc.ConsumerType.Shared, "batch_index_ack_enabled": batch_index_ack}
        consumer = client.subscribe(topic, "s", initial_position=qc.InitialPosition.Earliest, **options)
        _publish_batched(broker, topic, payloads, batching_max_messages=10)
        messages = [consumer.receive(10_000) for _ in payloads]
        assert {m.message_id().batch_size for m in messages} == {10}  # one batch
        for message in messages[::2]:
            consumer.acknowledge(message)
        consumer.close()
        consumer = client.subscribe(topic, "s", **options)
        back = []
        while True:
            try:
                back.append(consumer.receive(1000))
            except qc.ReceiveTimeoutError:
                break
        expected = payloads[1::2] if batch_index_ack else payloads
        assert [m.data() for m in back] == expected
        assert all(m.redelivery_count() == 0 for m in back)  # a new consumer: not a redelivery
        for message in back:
            consumer.acknowledge(message)
        consumer.close()
    finally:
        client.close()
