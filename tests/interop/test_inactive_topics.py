"""Idle topics are unloaded from memory and load again on next use (quasar.broker.inactive_topics), through the
official pulsar-client against one real broker process with the inactivity settings shortened (checked every
0.3 s, idle after 1.5 s) and deduplication on.

"Loaded" is read from Pulsar's ``GET /admin/v2/broker-stats/topics`` (the stats of the loaded topics only);
the topic listing of the namespace names every topic, loaded or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.interop.helpers import admin, new_client, topic_name

pytestmark = pytest.mark.interop

IDLE_S = 1.5
WAIT_S = 30.0  # bound of every wait for the unloader (it needs about IDLE_S + 0.3 s)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("inactive")
    config = root / "broker.toml"
    config.write_text(
        "broker_deduplication_enabled = true\n"
        "broker_unload_inactive_topics_enabled = true\n"
        "broker_unload_inactive_topics_frequency_seconds = 0.3\n"
        f"broker_unload_inactive_topics_max_inactive_duration_seconds = {IDLE_S}\n"
    )
    process = BrokerProcess(root / "data", extra_args=("--config", str(config)))
    process.start()
    yield process
    process.stop()


def loaded_topics(broker: BrokerProcess) -> set[str]:
    status, tree = admin(broker, "GET", "/admin/v2/broker-stats/topics")
    assert status == 200
    assert isinstance(tree, dict)
    return {
        name
        for bundles in tree.values()
        for domains in bundles.values()
        for d in domains.values()
        for name in d
    }


def wait_unloaded(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while topic in loaded_topics(broker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in loaded_topics(broker), f"{topic} still loaded after {WAIT_S} s"


def receive_all(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[bytes]:
    received = []
    for _ in range(100):  # bounded; ends at the first receive timeout
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            break
        received.append(message.data())
        consumer.acknowledge(message)
    return received


def test_an_idle_topic_is_unloaded_and_comes_back_with_cursor_backlog_and_dedup_state(broker):
    topic = topic_name("idle")
    local = topic.split("://", 1)[1]
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, producer_name="idle-producer", batching_enabled=False)
        for i in range(10):
            producer.send(f"m{i}".encode(), sequence_id=i + 1)  # (the wrapper treats 0 as "not set")
        messages = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
        assert [m.data() for m in messages] == [f"m{i}".encode() for i in range(10)]
        for i in (0, 1, 4, 6):  # a mark-delete move (0, 1) and two individual acks
            consumer.acknowledge(messages[i])
        assert topic in loaded_topics(broker)
        consumer.close()  # flushes the grouped acks
        producer.close()
        unloaded_before = admin(broker, "GET", "/admin/v2/broker-stats/load-report")[1][
            "inactiveTopicsUnloaded"
        ]

        wait_unloaded(broker, topic)
        assert topic in admin(broker, "GET", "/admin/v2/persistent/public/default")[1]  # still exists
        report = admin(broker, "GET", "/admin/v2/broker-stats/load-report")[1]
        assert report["inactiveTopicsUnloaded"] > unloaded_before

        # the stats load it again, with the backlog it had
        stats = admin(broker, "GET", f"/admin/v2/persistent/{local}/stats")[1]
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 6
        wait_unloaded(broker, topic)

        # a producer resending an old sequence id after the reload is deduplicated
        producer = client.create_producer(topic, producer_name="idle-producer", batching_enabled=False)
        assert producer.last_sequence_id() == 10
        duplicate = producer.send(b"m4 again", sequence_id=5)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
        assert producer.send(b"m10", sequence_id=11).ledger_id() >= 0
        producer.close()

        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        assert sorted(receive_all(consumer)) == [b"m10", b"m2", b"m3", b"m5", b"m7", b"m8", b"m9"]
        consumer.close()
    finally:
        client.close()


def test_a_topic_with_a_connected_consumer_or_producer_is_never_unloaded(broker):
    """Also a non-persistent one; once its producer is gone, nothing holds it and it is dropped."""
    with_consumer, with_producer, idle = topic_name("busy-c"), topic_name("busy-p"), topic_name("idle-ref")
    non_persistent = topic_name("busy-np", domain="non-persistent")
    client = new_client(broker)
    try:
        consumer = client.subscribe(with_consumer, "sub")
        producer = client.create_producer(with_producer)
        np_producer = client.create_producer(non_persistent)
        local = idle.split("://", 1)[1]
        assert admin(broker, "PUT", f"/admin/v2/persistent/{local}")[0] == 204  # loaded after the busy ones
        wait_unloaded(broker, idle)  # so the busy ones were idle-aged at least as long, and are kept
        loaded = loaded_topics(broker)
        assert with_consumer in loaded and with_producer in loaded and non_persistent in loaded
        producer.send(b"still served")
        consumer.close()
        producer.close()
        np_producer.close()
        wait_unloaded(broker, with_consumer)
        wait_unloaded(broker, with_producer)
        wait_unloaded(broker, non_persistent)  # nothing held it: dropped, as Pulsar's GC deletes it
    finally:
        client.close()


def test_a_restart_loads_no_topic_until_it_is_used(broker):
    topic = topic_name("restart")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        producer.send(b"kept")
        producer.close()
    finally:
        client.close()
    broker.restart()
    assert loaded_topics(broker) == set()
    assert topic in admin(broker, "GET", "/admin/v2/persistent/public/default")[1]
    client = new_client(broker)
    try:
        reader = client.subscribe(topic, "after", initial_position=pulsar.InitialPosition.Earliest)
        assert receive_all(reader) == [b"kept"]
        assert topic in loaded_topics(broker)
    finally:
        client.close()
