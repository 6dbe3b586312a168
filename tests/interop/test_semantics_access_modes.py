"""Producer access modes and producer/consumer limits through the official pulsar-client."""

from __future__ import annotations

import contextlib
import threading

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop

Mode = pulsar.ProducerAccessMode


def test_exclusive_and_shared_producers_exclude_each_other(broker):
    topic = topic_name("access")
    client = new_client(broker)
    try:
        shared = client.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        shared.close()
        exclusive = client.create_producer(topic, access_mode=Mode.Exclusive)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        exclusive.send(b"x")
        exclusive.close()
        client.create_producer(topic).send(b"y")  # free again
    finally:
        client.close()


def test_exclusive_with_fencing_takes_over(broker):
    topic = topic_name("access")
    client = new_client(broker)
    try:
        old = client.create_producer(topic, producer_name="old")
        new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        new.send(b"from-new")
        with pytest.raises(pulsar.PulsarException):
            old.send(
                b"from-old",
            )  # fenced: its reconnection is refused while the new one holds the topic
    finally:
        # The C++ client's close() reports AlreadyClosed for a producer the broker fenced, depending on
        # whether the fenced producer's own teardown finished first: a client-side race, not a broker error.
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
