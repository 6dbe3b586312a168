"""Producer access modes and producer/consumer limits through the official pulsar-client."""

from __future__ import annotations

import contextlib
import threading
import time

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop

Mode = pulsar.ProducerAccessMode


def test_exclusive_and_shared_producers_exclude_each_other(broker):
    """Pulsar's table: Exclusive against shared producers or an exclusive holder is ProducerFenced (final),
    Shared against an exclusive holder is ProducerBusy."""
    topic = topic_name("access")
    client = new_client(broker)
    try:
        shared = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        shared.close()
        exclusive = client.create_producer(topic, access_mode=Mode.Exclusive)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        exclusive.send(b"x")
        exclusive.close()
        client.create_producer(topic).send(b"y")  # free again
    finally:
        client.close()


def test_exclusive_with_fencing_takes_over_and_the_fenced_producer_fails_at_once(broker):
    """The fenced producer is closed by the broker; its reconnect carries the older topic epoch and gets
    ProducerFenced, which the client does not retry: its pending send fails long before the send timeout."""
    topic = topic_name("access")
    client = new_client(broker)
    try:
        old = client.create_producer(
            topic, producer_name="old", access_mode=Mode.Exclusive, send_timeout_millis=30_000
        )
        old.send(b"from-old-before")
        new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        new.send(b"from-new")
        started = time.monotonic()
        with pytest.raises(pulsar.PulsarException) as failure:
            old.send(b"from-old")
        assert time.monotonic() - started < 15, "a fenced producer must not spin until its send timeout"
        assert not isinstance(failure.value, pulsar.Timeout)
        with pytest.raises(pulsar.ProducerFenced):  # a new Exclusive producer while the fencing one holds
            client.create_producer(topic, access_mode=Mode.Exclusive)
    finally:
        # The C++ client's close() reports AlreadyClosed for a producer the broker fenced, depending on
        # whether the fenced producer's own teardown finished first: a client-side race, not a broker error.
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()


def test_exclusive_with_fencing_fails_the_waiting_producers(broker):
    topic = topic_name("access")
    client = new_client(broker)
    try:
        client.create_producer(topic, access_mode=Mode.Exclusive)
        outcome: list[BaseException | object] = []

        def wait_for_topic() -> None:
            try:
                outcome.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
            except pulsar.PulsarException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait_for_topic)
        waiter.start()
        waiter.join(timeout=1.0)
        assert not outcome  # queued (PRODUCER_SUCCESS with producer_ready=false)
        fencer = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        waiter.join(timeout=15)
        assert outcome and isinstance(outcome[0], pulsar.ProducerFenced), outcome
        fencer.send(b"mine")
    finally:
        with contextlib.suppress(pulsar.AlreadyClosed):
            client.close()


def test_wait_for_exclusive_gets_the_topic_when_it_is_free(broker):
    topic = topic_name("access")
    client = new_client(broker)
    try:
        holder = client.create_producer(topic, access_mode=Mode.Exclusive)
        created: list = []
        waiter = threading.Thread(
            target=lambda: created.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
        )
        waiter.start()
        waiter.join(timeout=1.0)
        assert not created  # still waiting (PRODUCER_SUCCESS with producer_ready=false)
        holder.close()
        waiter.join(timeout=15)
        assert created, "the waiting producer got the topic"
        created[0].send(b"mine")
    finally:
        client.close()


def test_max_producers_and_consumers(broker_factory, tmp_path):
    config = tmp_path / "limits.toml"
    config.write_text("max_producers_per_topic = 1\nmax_consumers_per_subscription = 1\n")
    broker = broker_factory(extra_args=("--config", str(config)))
    topic = topic_name("access")
    client = new_client(broker)
    try:
        client.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        client.subscribe(topic, "other")  # another subscription is fine
    finally:
        client.close()
