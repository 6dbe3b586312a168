"""Retry-letter topic (Java ``enableRetry`` + ``reconsumeLater``, ``RetryMessageUtil``; semantics.md B5):
``retry_enable`` subscribes to ``<topic>-<subscription>-RETRY`` too, ``reconsume_later`` sends a copy there with
``RECONSUMETIMES`` / ``DELAY_TIME`` / ``REAL_TOPIC`` / ``ORIGIN_MESSAGE_ID`` and delayed delivery, and past
``max_redeliver_count`` hops the copy goes to the dead-letter topic. Against a real broker whose delayed
delivery is strict (never early) with a 100 ms tick."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

import quasar.client as qc
from quasar.client.client import AsyncClient
from quasar.client.config import ConsumerConfig, ConsumerType, DeadLetterPolicy, InitialPosition
from quasar.client.errors import ClientError, ReceiveTimeoutError
from quasar.client.multi_consumer import MultiTopicsConsumer
from quasar.client.retry_letter import MAX_RECONSUMETIMES, retry_policy

TICK_MS = 100


@pytest.fixture
def retry_broker(broker_factory, tmp_path):
    config = tmp_path / "retry.toml"
    config.write_text(
        f"delayed_delivery_tick_time_ms = {TICK_MS}\nis_delayed_delivery_deliver_at_time_strict = true\n"
    )
    return broker_factory(extra_args=("--config", str(config)))


def _topic(name: str) -> str:
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:10]}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _deliver_at(message: qc.Message) -> int:
    return message.entry.metadata.deliver_at_time


def _id_text(message: qc.Message) -> str:
    mid = message.message_id()
    return f"{mid.ledger_id}:{mid.entry_id}:{mid.partition}"


# ------------------------------------------------------------------------------------ no broker --


def test_retry_policy_defaults_follow_java():
    policy = retry_policy(None, "persistent://public/default/t", "sub")
    assert policy.max_redeliver_count == MAX_RECONSUMETIMES == 16
    assert policy.retry_letter_topic == "persistent://public/default/t-sub-RETRY"
    assert policy.dead_letter_topic == "persistent://public/default/t-sub-DLQ"
    own = DeadLetterPolicy(max_redeliver_count=3, dead_letter_topic="dead", initial_subscription_name="i")
    filled = retry_policy(own, "persistent://public/default/t", "sub")
    assert (filled.max_redeliver_count, filled.dead_letter_topic, filled.initial_subscription_name) == (
        3,
        "dead",
        "i",
    )
    assert filled.retry_letter_topic == "persistent://public/default/t-sub-RETRY"
    named = DeadLetterPolicy(max_redeliver_count=3, retry_letter_topic="again")
    assert retry_policy(named, "persistent://public/default/t", "sub").retry_letter_topic == "again"


def test_retry_enable_is_validated():
    assert ConsumerConfig().retry_enable is False
    with pytest.raises(TypeError, match="retry_enable"):
        ConsumerConfig(retry_enable=1)


async def test_retry_enable_with_a_pattern_is_refused():
    async with AsyncClient("pulsar://127.0.0.1:1") as client:
        with pytest.raises(ValueError, match="regex"):
            await client.subscribe(re.compile("persistent://public/default/t-.*"), "sub", retry_enable=True)


# ---------------------------------------------------------------------------------- real broker --


@pytest.mark.interop
async def test_reconsume_later_hops_through_the_retry_topic_then_to_the_dead_letter_topic(retry_broker):
    topic = _topic("retry-hops")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, retry_enable=True,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
        )  # fmt: skip
        assert isinstance(consumer, MultiTopicsConsumer)
        assert consumer.topics == [topic, f"{topic}-sub-RETRY"]
        dead = await client.subscribe(f"{topic}-sub-DLQ", "dead")
        producer = await client.create_producer(topic)
        await producer.send(b"payload", properties={"p": "1"}, partition_key="k", event_timestamp=42)

        first = await consumer.receive(10_000)
        assert first.topic_name() == topic
        assert "RECONSUMETIMES" not in first.properties()
        origin = _id_text(first)
        await consumer.reconsume_later(first, 300, {"custom": "x"})
        message = first
        for hop in (1, 2):
            message = await consumer.receive(10_000)
            received_ms = _now_ms()
            properties = message.properties()
            assert message.topic_name() == f"{topic}-sub-RETRY"
            assert message.data() == b"payload"
            assert message.partition_key() == "k"
            assert message.event_timestamp() == 42
            assert properties == {
                "p": "1",
                "custom": "x",
                "REAL_TOPIC": topic,
                "ORIGIN_MESSAGE_ID": origin,
                "RECONSUMETIMES": str(hop),
                "DELAY_TIME": "300",
            }
            # delivered at its time, never before: deliver_at = send time + 300 ms, the broker is strict
            due = _deliver_at(message)
            assert 0 < due - message.publish_timestamp() <= 300
            assert received_ms >= due
            await consumer.reconsume_later(message, 300)

        # RECONSUMETIMES 3 > max_redeliver_count 2: to the dead-letter topic, without delay
        moved = await dead.receive(10_000)
        assert moved.data() == b"payload"
        assert moved.partition_key() == "k"
        assert moved.properties() == {
            "p": "1",
            "custom": "x",
            "REAL_TOPIC": topic,
            "ORIGIN_MESSAGE_ID": origin,
            "RECONSUMETIMES": "3",
            "DELAY_TIME": "300",
        }
        assert _deliver_at(moved) == 0
        with pytest.raises(ReceiveTimeoutError):
            await consumer.receive(500)
        await consumer.close()

        # every hop acknowledged its original: nothing comes back on either topic of the subscription
        again = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, retry_enable=True)
        with pytest.raises(ReceiveTimeoutError):
            await again.receive(1000)


@pytest.mark.interop
async def test_the_delay_orders_retried_messages_by_due_time(retry_broker):
    topic = _topic("retry-order")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, retry_enable=True,
            initial_position=InitialPosition.Earliest,
        )  # fmt: skip
        producer = await client.create_producer(topic)
        await producer.send(b"late")
        await producer.send(b"soon")
        late = await consumer.receive(10_000)
        soon = await consumer.receive(10_000)
        assert (late.data(), soon.data()) == (b"late", b"soon")
        await consumer.reconsume_later(late, 2000)
        await consumer.reconsume_later(soon, 0)
        first = await consumer.receive(10_000)
        second = await consumer.receive(10_000)
        second_ms = _now_ms()
        # "late" was published to the retry topic first but is due 2 s later: "soon" overtakes it
        assert (first.data(), second.data()) == (b"soon", b"late")
        assert _deliver_at(first) == 0
        assert first.properties()["DELAY_TIME"] == "0"
        assert second.properties()["DELAY_TIME"] == "2000"
        assert second_ms >= _deliver_at(second) > second.publish_timestamp()
        await consumer.acknowledge(first)
        await consumer.acknowledge(second)


@pytest.mark.interop
async def test_default_policy_and_lazy_retry_producers(retry_broker):
    topic = _topic("retry-default")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, retry_enable=True)
        assert isinstance(consumer, MultiTopicsConsumer)
        policies = {child._dead_letter.policy for child in consumer.consumers}
        assert policies == {
            DeadLetterPolicy(
                max_redeliver_count=16,
                dead_letter_topic=f"{topic}-sub-DLQ",
                retry_letter_topic=f"{topic}-sub-RETRY",
            )
        }
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        message = await consumer.receive(10_000)
        # concurrent first uses create the retry producer once
        await asyncio.gather(consumer.reconsume_later(message, 0), consumer.reconsume_later(message, 0))
        copies = [await consumer.receive(10_000), await consumer.receive(10_000)]
        assert [m.properties()["RECONSUMETIMES"] for m in copies] == ["1", "1"]
        main = next(c for c in consumer.consumers if c.topic == topic)
        assert main._retry_letter._producer._producer is not None
        retry_child = next(c for c in consumer.consumers if c.topic != topic)
        assert retry_child._retry_letter._producer._producer is None  # lazily: nothing retried from there yet
        for copy in copies:
            await consumer.acknowledge(copy)
        await consumer.close()
        assert main._retry_letter._producer._producer is None  # closed with the consumer


@pytest.mark.interop
async def test_exclusive_retry_consumer_gets_the_copy_without_the_delay(retry_broker):
    """Java accepts any subscription type; the broker only delays on Shared, so the copy is back at once."""
    topic = _topic("retry-exclusive")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub", retry_enable=True)
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        message = await consumer.receive(10_000)
        await consumer.reconsume_later(message, 600_000)
        copy = await consumer.receive(10_000)
        assert copy.properties()["RECONSUMETIMES"] == "1"
        assert _now_ms() < _deliver_at(copy)  # ten minutes early
        await consumer.acknowledge(copy)


@pytest.mark.interop
async def test_reconsume_later_without_retry_enable_raises(retry_broker):
    topic = _topic("retry-off")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
        retrying = await client.subscribe(
            topic, "other", consumer_type=ConsumerType.Shared, retry_enable=True
        )
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        message = await consumer.receive(10_000)
        with pytest.raises(ClientError, match="retry_enable"):
            await consumer.reconsume_later(message, 100)
        await consumer.acknowledge(message)  # untouched: still ours to ack
        mine = await retrying.receive(10_000)
        with pytest.raises(TypeError, match="Message"):
            await retrying.reconsume_later(mine.message_id(), 100)
        with pytest.raises(TypeError, match="delay_ms"):
            await retrying.reconsume_later(mine, "soon")
        with pytest.raises(TypeError, match="properties"):
            await retrying.reconsume_later(mine, 100, {"n": 1})
        with pytest.raises(ValueError, match="this consumer"):
            await retrying.consumers[0].reconsume_later(message, 100)
        await retrying.acknowledge(mine)


@pytest.mark.interop
def test_blocking_facade_reconsume_later(retry_broker):
    topic = _topic("retry-sync")
    client = qc.Client(retry_broker.service_url, operation_timeout_seconds=15)
    try:
        plain = client.subscribe(topic, "plain", consumer_type=qc.ConsumerType.Shared)
        consumer = client.subscribe(
            topic, "sub", consumer_type=qc.ConsumerType.Shared, retry_enable=True,
            dead_letter_policy=qc.DeadLetterPolicy(max_redeliver_count=1, initial_subscription_name="keep"),
        )  # fmt: skip
        producer = client.create_producer(topic)
        producer.send(b"sync", properties={"a": "b"})
        message = consumer.receive(10_000)
        consumer.reconsume_later(message, 200, {"why": "busy"})
        copy = consumer.receive(10_000)
        assert _now_ms() >= _deliver_at(copy)
        assert copy.properties() == {
            "a": "b",
            "why": "busy",
            "REAL_TOPIC": topic,
            "ORIGIN_MESSAGE_ID": _id_text(message),
            "RECONSUMETIMES": "1",
            "DELAY_TIME": "200",
        }
        consumer.reconsume_later(copy, 200)  # 2 > 1: dead-lettered
        keeper = client.subscribe(f"{topic}-sub-DLQ", "keep")  # created at Earliest by the DLQ producer
        moved = keeper.receive(10_000)
        assert moved.properties()["RECONSUMETIMES"] == "2"
        assert moved.properties()["ORIGIN_MESSAGE_ID"] == _id_text(message)

        other = plain.receive(10_000)
        with pytest.raises(qc.ClientError, match="retry_enable"):
            plain.reconsume_later(other, 100)
        plain.acknowledge(other)
    finally:
        client.close()


@pytest.mark.interop
async def test_a_failed_retry_publish_redelivers_the_message_and_raises(retry_broker, monkeypatch):
    import quasar.client.retry_letter as retry_letter

    async def refuse(*args, **kwargs):
        raise ClientError("retry topic unavailable")

    topic = _topic("retry-fail")
    async with AsyncClient(retry_broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, retry_enable=True)
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        message = await consumer.receive(10_000)
        monkeypatch.setattr(retry_letter, "send_copy", refuse)
        with pytest.raises(ClientError, match="unavailable"):
            await consumer.reconsume_later(message, 100)
        again = await consumer.receive(
            10_000
        )  # not acked: redelivered at once (Java redeliverUnacknowledged)
        assert again.message_id() == message.message_id()
        assert again.redelivery_count() == 1
        await consumer.acknowledge(again)
