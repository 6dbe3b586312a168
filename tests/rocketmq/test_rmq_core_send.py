"""The official ``rocketmq-python-client`` Producer against a real broker (one per module): normal, keyed,
tagged, delayed and FIFO sends, read back by the official Pulsar client (cross-protocol), the admin query by
key, namespaces, and the broker-side producer's life with the client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin

pulsar = pytest.importorskip("pulsar")
pytestmark = pytest.mark.interop


def _topic() -> str:
    return f"rmq-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def producer_factory(rmq_config: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    from rocketmq import Producer

    made: list[Any] = []

    def make(*topics: str, namespace: str = "") -> Any:
        producer = Producer(rmq_config(namespace), topics)
        producer.startup()
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.shutdown()


def _message(
    topic: str, body: bytes, *, tag: str | None = None, keys: tuple[str, ...] = (), **props: str
) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    if tag is not None:
        message.tag = tag
    if keys:
        type(message).keys.fset(message, *keys)  # the setter takes several keys
    for key, value in props.items():
        message.add_property(key, value)
    return message


def test_keyed_tagged_send_is_read_by_a_pulsar_consumer(
    rmq_broker: BrokerProcess, producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    topic = _topic()
    consumer = pulsar_client.subscribe(
        f"persistent://public/default/{topic}", "s", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = producer_factory(topic)
    first = producer.send(_message(topic, b"hello", tag="TagA", keys=("k1", "k2"), color="red"))
    second = producer.send(_message(topic, b"plain"))
    assert (first.offset, second.offset) == (0, 1)  # consume-queue offsets of one queue
    assert len(first.message_id) == 34
    got = consumer.receive(timeout_millis=10_000)
    assert got.data() == b"hello"
    properties = got.properties()
    assert properties["TAGS"] == "TagA" and properties["color"] == "red"
    assert set(properties["KEYS"].split()) == {"k1", "k2"} and got.partition_key() in ("k1", "k2")
    assert properties["UNIQ_KEY"] == first.message_id
    plain = consumer.receive(timeout_millis=10_000)
    assert plain.data() == b"plain" and "TAGS" not in plain.properties() and plain.partition_key() == ""
    assert plain.properties()["UNIQ_KEY"] == second.message_id

    # keys and the message id are indexed: the admin query by key finds the message by any of them
    path = f"/admin/v2/persistent/public/default/{topic}/messages"
    for key in ("k1", "k2", first.message_id):
        found: list[Any] = []
        for _ in range(100):  # the index is fed by the store's reput thread
            status, found = admin(rmq_broker, "GET", f"{path}?key={key}")
            if status == 200 and found:
                break
            time.sleep(0.05)
        assert [m["properties"]["UNIQ_KEY"] for m in found] == [first.message_id], key


def test_broker_side_producer_lives_with_the_client(
    rmq_broker: BrokerProcess, rmq_config: Callable[..., Any]
) -> None:
    from rocketmq import Producer

    topic = _topic()
    producer = Producer(rmq_config(), (topic,))
    producer.startup()
    try:
        producer.send(_message(topic, b"x"))
        status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
        assert status == 200
        [publisher] = stats["publishers"]
        assert publisher["producerName"].startswith("rocketmq-") and publisher["msgInCounter"] == 1
    finally:
        producer.shutdown()  # NotifyClientTermination: the broker drops the client and its producer
    for _ in range(100):
        status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
        if not stats["publishers"]:
            break
        time.sleep(0.05)
    assert stats["publishers"] == []


def test_delayed_message_is_not_delivered_before_its_time(
    producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    topic = _topic()
    consumer = pulsar_client.subscribe(
        f"persistent://public/default/{topic}",
        "s",
        consumer_type=pulsar.ConsumerType.Shared,  # Pulsar delays delivery on shared subscriptions
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = producer_factory(topic)
    deliver_at_s = int(time.time()) + 2  # the py client takes epoch seconds
    delayed = _message(topic, b"later")
    delayed.delivery_timestamp = deliver_at_s
    producer.send(delayed)
    producer.send(_message(topic, b"now"))
    first = consumer.receive(timeout_millis=10_000)
    assert first.data() == b"now"  # the delayed one was sent first but waits
    consumer.acknowledge(first)
    second = consumer.receive(timeout_millis=10_000)
    assert second.data() == b"later"
    assert time.time() >= deliver_at_s
    assert second.properties()["UNIQ_KEY"]


def test_fifo_messages_of_a_group_share_a_queue_in_order(
    rmq_broker: BrokerProcess, producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    topic = _topic()
    status, _ = admin(rmq_broker, "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 4)
    assert status in (200, 204)
    producer = producer_factory(topic)
    sent: dict[str, list[bytes]] = {"g-a": [], "g-b": [], "g-c": []}
    for i in range(8):
        for group in sent:
            message = _message(topic, f"{group}-{i}".encode())
            message.message_group = group
            producer.send(message)
            sent[group].append(f"{group}-{i}".encode())
    for i in range(8):  # normal messages are spread over the queues
        producer.send(_message(topic, f"n-{i}".encode()))
    seen: dict[str, list[tuple[int, bytes]]] = {group: [] for group in sent}
    normal_partitions = set()
    for partition in range(4):
        reader = pulsar_client.create_reader(
            f"persistent://public/default/{topic}-partition-{partition}", pulsar.MessageId.earliest
        )
        while reader.has_message_available():
            message = reader.read_next(timeout_millis=10_000)
            if message.ordering_key():
                seen[message.ordering_key()].append((partition, message.data()))
            else:
                normal_partitions.add(partition)
        reader.close()
    for group, items in seen.items():
        assert len({p for p, _ in items}) == 1, group  # one queue per message group
        assert [body for _, body in items] == sent[group]  # in send order
    assert len(normal_partitions) > 1  # round robin


def test_namespace_maps_to_a_pulsar_namespace(
    rmq_broker: BrokerProcess, producer_factory: Callable[..., Any], pulsar_client: Any
) -> None:
    status, _ = admin(rmq_broker, "PUT", "/admin/v2/namespaces/public/rmq-ns", {})
    assert status in (200, 204)
    topic = _topic()
    consumer = pulsar_client.subscribe(
        f"persistent://public/rmq-ns/{topic}", "s", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = producer_factory(topic, namespace="rmq-ns")
    producer.send(_message(topic, b"in-ns"))
    assert consumer.receive(timeout_millis=10_000).data() == b"in-ns"
