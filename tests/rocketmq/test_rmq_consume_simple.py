"""The official ``rocketmq-python-client`` SimpleConsumer against a real broker (one per module): receive and
ack, change invisible duration, redelivery with attempt counts, dead letters after the group's attempts, tag
filters, receipt handles through raw stubs, a Pulsar producer's messages read by a RocketMQ consumer, and
unacknowledged messages found again after a broker restart."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin, metadata

pytestmark = pytest.mark.interop

AWAIT_S = 5  # the shortest long poll the broker allows


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _create_group(broker: BrokerProcess, topic: str, group: str, partitions: int = 0) -> None:
    """The group's subscription at the start of the (possibly new) topic: a new group starts at the end."""
    if partitions:
        status, _ = admin(
            broker, "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", partitions
        )
        assert status == 204
    status, _ = admin(
        broker,
        "PUT",
        f"/admin/v2/persistent/public/default/{topic}/subscription/{group}",
        {"ledgerId": -1, "entryId": -1},
    )
    assert status == 204


def _backlog(broker: BrokerProcess, topic: str, group: str) -> int:
    status, stats = admin(broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
    assert status == 200
    return int(stats["subscriptions"][group]["msgBacklog"])


@pytest.fixture
def clients(rmq_config: Callable[..., Any]) -> Iterator[Any]:
    from rocketmq import FilterExpression, Producer, SimpleConsumer

    made: list[Any] = []

    class Clients:
        def producer(self, topic: str) -> Any:
            producer = Producer(rmq_config(), (topic,))
            producer.startup()
            made.append(producer)
            return producer

        def consumer(self, topic: str, group: str, expression: str = "*") -> Any:
            consumer = SimpleConsumer(rmq_config(), group, {topic: FilterExpression(expression)}, AWAIT_S)
            consumer.startup()
            made.append(consumer)
            return consumer

    yield Clients()
    for client in made:
        client.shutdown()


def _send(producer: Any, topic: str, body: bytes, tag: str | None = None, **props: str) -> str:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    if tag is not None:
        message.tag = tag
    for key, value in props.items():
        message.add_property(key, value)
    return producer.send(message).message_id


def _receive(consumer: Any, want: int, invisible_s: int = 15, rounds: int = 4) -> list[Any]:
    """Receive until ``want`` messages came (bounded rounds)."""
    got: list[Any] = []
    for _ in range(rounds):
        got += consumer.receive(16, invisible_s)
        if len(got) >= want:
            break
    return got


def test_receive_ack_and_invisibility(rmq_broker: BrokerProcess, clients: Any) -> None:
    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    producer = clients.producer(topic)
    ids = [_send(producer, topic, f"m{i}".encode(), tag="A", color="red") for i in range(3)]
    consumer = clients.consumer(topic, group)
    got = _receive(consumer, 3)
    assert sorted(m.message_id for m in got) == sorted(ids)
    first = got[0]
    assert first.body.startswith(b"m") and first.tag == "A" and first.properties.get("color") == "red"
    assert all(m.delivery_attempt == 1 for m in got) and not any(m.corrupted for m in got)
    assert _backlog(rmq_broker, topic, group) == 3  # in flight: invisible, not acked
    for message in got:
        consumer.ack(message)
    assert _backlog(rmq_broker, topic, group) == 0


def test_a_new_group_starts_at_the_end_of_the_queue(rmq_broker: BrokerProcess, clients: Any) -> None:
    topic, group = _name("t"), _name("g")
    producer = clients.producer(topic)
    _send(producer, topic, b"before the group")
    consumer = clients.consumer(topic, group)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(consumer.receive, 16, 15)  # creates the group's subscription, then long-polls
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
            if status == 200 and group in stats["subscriptions"]:
                break
            time.sleep(0.05)
        sent = _send(producer, topic, b"after the group")
        got = waiting.result(timeout=15)
    assert [(m.message_id, m.body) for m in got] == [(sent, b"after the group")]
    consumer.ack(got[0])


def test_change_invisible_duration_redelivers_with_the_next_attempt(
    rmq_broker: BrokerProcess, clients: Any
) -> None:
    from rocketmq.v5.exception import BadRequestException

    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    producer = clients.producer(topic)
    sent = _send(producer, topic, b"again")
    consumer = clients.consumer(topic, group)
    (message,) = _receive(consumer, 1)
    old_handle = message.receipt_handle
    consumer.change_invisible_duration(message, 1)  # visible again in 1 s
    assert message.receipt_handle != old_handle
    (again,) = _receive(consumer, 1)
    assert again.message_id == sent and again.delivery_attempt == 2
    with pytest.raises(BadRequestException):  # the previous delivery's handle is stale: 40013
        consumer.ack(message)
    consumer.ack(again)


def test_dead_letter_after_the_groups_max_attempts(rmq_broker: BrokerProcess, clients: Any) -> None:
    topic, group = _name("t"), _name("g")
    status, _ = admin(
        rmq_broker,
        "POST",
        f"/admin/v2/namespaces/public/default/subscriptionGroups/{group}",
        {"retryMaxTimes": 1},
    )
    assert status == 204
    assert admin(rmq_broker, "GET", f"/admin/v2/namespaces/public/default/subscriptionGroups/{group}") == (
        200,
        {"consumeMessageOrderly": False, "retryMaxTimes": 1},
    )
    _create_group(rmq_broker, topic, group)
    dlq = f"%DLQ%{group}"
    _create_group(rmq_broker, dlq, "dlq-reader")
    producer = clients.producer(topic)
    sent = _send(producer, topic, b"poison", tag="P")
    consumer = clients.consumer(topic, group)
    for attempt in (1, 2):  # retryMaxTimes 1: two deliveries
        (message,) = _receive(consumer, 1)
        assert (message.message_id, message.delivery_attempt) == (sent, attempt)
        consumer.change_invisible_duration(message, 0)
    assert consumer.receive(16, 15) == []  # the third delivery went to the dead-letter topic instead
    reader = clients.consumer(dlq, "dlq-reader")
    (dead,) = _receive(reader, 1)
    assert (dead.message_id, dead.body, dead.tag) == (sent, b"poison", "P")
    assert dead.properties.get("REAL_TOPIC") == f"persistent://public/default/{topic}"
    reader.ack(dead)


def test_forward_message_to_dead_letter_queue(rmq_broker: BrokerProcess, clients: Any, stub: Any) -> None:
    from rocketmq.grpc_protocol import ForwardMessageToDeadLetterQueueRequest

    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    _create_group(rmq_broker, f"%DLQ%{group}", "dlq-reader")
    producer = clients.producer(topic)
    sent = _send(producer, topic, b"forward me")
    consumer = clients.consumer(topic, group)
    (message,) = _receive(consumer, 1)
    request = ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=message.receipt_handle, message_id=sent, delivery_attempt=1, max_delivery_attempts=17
    )
    request.group.name = group
    request.topic.name = topic
    assert stub.ForwardMessageToDeadLetterQueue(request, metadata=metadata(), timeout=10).status.code == 20000
    again = stub.ForwardMessageToDeadLetterQueue(request, metadata=metadata(), timeout=10)
    assert again.status.code == 40013  # the handle is gone with the message
    (dead,) = _receive(clients.consumer(f"%DLQ%{group}", "dlq-reader"), 1)
    assert (dead.message_id, dead.body) == (sent, b"forward me")
    assert _backlog(rmq_broker, topic, group) == 0


def test_tag_filter_and_sql_refused(rmq_broker: BrokerProcess, clients: Any, stub: Any) -> None:
    from rocketmq.grpc_protocol import ReceiveMessageRequest

    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    producer = clients.producer(topic)
    for tag in ("A", "B", "C", None):
        _send(producer, topic, f"tag-{tag}".encode(), tag=tag)
    consumer = clients.consumer(topic, group, "A || C")
    got = _receive(consumer, 2)
    assert sorted(m.body for m in got) == [b"tag-A", b"tag-C"]
    for message in got:
        consumer.ack(message)
    assert _backlog(rmq_broker, topic, group) == 0  # B and the untagged one were acked for the group

    request = ReceiveMessageRequest(batch_size=1, auto_renew=True)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.id = -1
    request.filter_expression.type = 2  # SQL
    request.filter_expression.expression = "a > 1"
    (answer,) = list(stub.ReceiveMessage(request, metadata=metadata(), timeout=10))
    assert answer.status.code == 40010 and "SQL92" in answer.status.message


def test_bad_receipt_handles_and_invisible_times(rmq_broker: BrokerProcess, clients: Any, stub: Any) -> None:
    from rocketmq.grpc_protocol import (
        AckMessageRequest,
        ChangeInvisibleDurationRequest,
        ReceiveMessageRequest,
    )

    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    request = AckMessageRequest()
    request.group.name = group
    request.topic.name = topic
    for handle in ("garbage", "5 1 99999999 0 0 standalone 0 5", "5 1 99999999 0 0 otherbroker 0 5"):
        request.entries.add(message_id="01AB", receipt_handle=handle)
    answer = stub.AckMessage(request, metadata=metadata(), timeout=10)
    assert [e.status.code for e in answer.entries] == [40013, 40013, 40013]
    assert answer.status.code == 40013

    change = ChangeInvisibleDurationRequest(
        receipt_handle="5 1 99999999 0 0 standalone 0 5", message_id="01AB"
    )
    change.group.name = group
    change.topic.name = topic
    change.invisible_duration.seconds = 5
    reply = stub.ChangeInvisibleDuration(change, metadata=metadata(), timeout=10)
    assert reply.status.code == 40013 and reply.receipt_handle == change.receipt_handle

    receive = ReceiveMessageRequest(batch_size=1)
    receive.group.name = group
    receive.message_queue.topic.name = topic
    receive.invisible_duration.seconds = 5  # under RocketMQ's 10 s minimum
    (answer,) = list(stub.ReceiveMessage(receive, metadata=metadata(), timeout=10))
    assert answer.status.code == 40011
    receive.invisible_duration.seconds = 30
    (answer,) = list(stub.ReceiveMessage(receive, metadata=metadata(), timeout=3))  # < 5 s left
    assert answer.status.code == 40018


def test_pulsar_producer_to_rocketmq_consumer(rmq_broker: BrokerProcess, clients: Any) -> None:
    pulsar = pytest.importorskip("pulsar")
    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    client = pulsar.Client(rmq_broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=True)
        for i in range(3):
            properties = {"TAGS": "T", "KEYS": f"key{i} other", "k": str(i)}
            producer.send_async(f"p{i}".encode(), None, properties=properties, partition_key=f"key{i}")
        producer.flush()
        producer.send(b"single", properties={"k": "s"}, event_timestamp=1_700_000_000_000)
    finally:
        client.close()
    consumer = clients.consumer(topic, group)
    got = _receive(consumer, 4)
    by_body = {m.body: m for m in got}
    assert set(by_body) == {b"p0", b"p1", b"p2", b"single"}
    assert by_body[b"p1"].tag == "T" and by_body[b"p1"].properties.get("k") == "1"
    assert set(by_body[b"p1"].keys) == {"key1", "other"}
    assert by_body[b"single"].born_timestamp == 1_700_000_000_000
    assert len({m.message_id for m in got}) == 4 and not any(m.corrupted for m in got)
    consumer.ack(by_body[b"p0"])  # one message of the batch: the others stay unacked
    consumer.ack(by_body[b"single"])
    for message in (by_body[b"p1"], by_body[b"p2"]):
        consumer.change_invisible_duration(message, 0)
    again = _receive(consumer, 2)
    assert sorted(m.body for m in again) == [b"p1", b"p2"]
    assert all(m.delivery_attempt == 2 for m in again)
    for message in again:
        consumer.ack(message)


def test_unacked_messages_survive_a_broker_restart(
    rmq_broker: BrokerProcess, rmq_config: Callable[..., Any]
) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

    topic, group = _name("t"), _name("g")
    _create_group(rmq_broker, topic, group)
    producer = Producer(rmq_config(), (topic,))
    producer.startup()
    consumer = SimpleConsumer(rmq_config(), group, {topic: FilterExpression("*")}, AWAIT_S)
    consumer.startup()
    try:
        ids = [_send(producer, topic, f"r{i}".encode()) for i in range(4)]
        got = _receive(consumer, 4)
        assert sorted(m.message_id for m in got) == sorted(ids)
        acked = {m.message_id for m in got[:2]}
        for message in got[:2]:
            consumer.ack(message)
    finally:
        producer.shutdown()
        consumer.shutdown()
    rmq_broker.restart()
    assert rmq_broker.rocketmq_address is not None
    config = ClientConfiguration(rmq_broker.rocketmq_address, Credentials())
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, AWAIT_S)
    consumer.startup()
    try:
        again = _receive(consumer, 2)
        assert sorted(m.message_id for m in again) == sorted(set(ids) - acked)
        for message in again:
            consumer.ack(message)
    finally:
        consumer.shutdown()
