"""The official ``rocketmq-python-client`` PushConsumer on a 4-partition topic and FIFO consumer groups
against a real broker (one per module): every queue is consumed, a failed message comes back with the next
delivery attempt, a FIFO group gets a message group's next message only after the previous one is acked, and
push consumers learn the group's FIFO policy from the settings exchange."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin, metadata

pytestmark = pytest.mark.interop

PARTITIONS = 4


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _topic_with_group(broker: BrokerProcess, group: str, *, fifo: bool = False) -> str:
    topic = _name("t")
    base = f"/admin/v2/persistent/public/default/{topic}"
    assert admin(broker, "PUT", base + "/partitions", PARTITIONS)[0] == 204
    assert admin(broker, "PUT", f"{base}/subscription/{group}", {"ledgerId": -1, "entryId": -1})[0] == 204
    if fifo:
        path = f"/admin/v2/namespaces/public/default/subscriptionGroups/{group}"
        assert admin(broker, "POST", path, {"consumeMessageOrderly": True})[0] == 204
    return topic


def _backlog(broker: BrokerProcess, topic: str, group: str) -> int:
    status, stats = admin(broker, "GET", f"/admin/v2/persistent/public/default/{topic}/partitioned-stats")
    assert status == 200
    return int(stats["subscriptions"][group]["msgBacklog"])


@pytest.fixture
def clients(rmq_config: Callable[..., Any]) -> Iterator[Any]:
    from rocketmq import FilterExpression, Producer, PushConsumer, SimpleConsumer

    made: list[Any] = []

    class Clients:
        def producer(self, topic: str) -> Any:
            producer = Producer(rmq_config(), (topic,))
            producer.startup()
            made.append(producer)
            return producer

        def push(self, topic: str, group: str, listener: Any) -> Any:
            consumer = PushConsumer(rmq_config(), group, listener, {topic: FilterExpression("*")})
            consumer.startup()
            made.append(consumer)
            return consumer

        def simple(self, topic: str, group: str) -> Any:
            consumer = SimpleConsumer(rmq_config(), group, {topic: FilterExpression("*")}, 5)
            consumer.startup()
            made.append(consumer)
            return consumer

    yield Clients()
    for client in reversed(made):
        client.shutdown()


def _send(producer: Any, topic: str, body: bytes, group: str | None = None) -> str:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    if group is not None:
        message.message_group = group
    return producer.send(message).message_id


class Recorder:
    """A MessageListener that records (body, delivery attempt) and fails chosen bodies the first time."""

    def __init__(self, fail_once: set[bytes] = frozenset()) -> None:  # type: ignore[assignment]
        from rocketmq import ConsumeResult

        self.results = ConsumeResult
        self.fail_once = set(fail_once)
        self.seen: list[tuple[bytes, int]] = []  # body, delivery attempt
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.seen.append((message.body, message.delivery_attempt))
            if message.body in self.fail_once:
                self.fail_once.discard(message.body)
                return self.results.FAILURE
        return self.results.SUCCESS

    def wait_for(self, count: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.seen) >= count:
                    return
            time.sleep(0.1)
        raise AssertionError(f"{len(self.seen)} of {count} deliveries after {timeout_s} s: {self.seen}")


def test_push_consumer_on_four_partitions(rmq_broker: BrokerProcess, clients: Any) -> None:
    from rocketmq import MessageListener

    group = _name("g")
    topic = _topic_with_group(rmq_broker, group)
    producer = clients.producer(topic)
    bodies = [f"m{i}".encode() for i in range(12)]
    for body in bodies:
        _send(producer, topic, body)
    recorder = Recorder(fail_once={b"m5"})
    MessageListener.register(Recorder)
    clients.push(topic, group, recorder)
    recorder.wait_for(len(bodies) + 1)
    seen = recorder.seen
    assert sorted(b for b, attempt in seen if attempt == 1) == sorted(bodies)
    assert [(b, attempt) for b, attempt in seen if attempt > 1] == [(b"m5", 2)]
    deadline = time.monotonic() + 10
    while _backlog(rmq_broker, topic, group) and time.monotonic() < deadline:
        time.sleep(0.1)  # the client acks asynchronously
    status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/partitioned-stats")
    assert status == 200 and len(stats["partitions"]) == PARTITIONS
    for partition in stats["partitions"].values():  # every queue had messages, all consumed and acked
        assert partition["msgInCounter"] > 0
        assert partition["subscriptions"][group]["msgBacklog"] == 0


def test_fifo_group_gets_a_message_groups_next_message_after_the_ack(
    rmq_broker: BrokerProcess, clients: Any, stub: Any
) -> None:
    from rocketmq.grpc_protocol import QueryAssignmentRequest

    group = _name("g")
    topic = _topic_with_group(rmq_broker, group, fifo=True)
    request = QueryAssignmentRequest()
    request.topic.name = topic
    request.group.name = group
    request.endpoints.scheme = 1
    request.endpoints.addresses.add(host="127.0.0.1", port=int(rmq_broker.rocketmq_address.rsplit(":", 1)[1]))
    answer = stub.QueryAssignment(request, metadata=metadata(), timeout=10)
    assert sorted(a.message_queue.id for a in answer.assignments) == list(
        range(PARTITIONS)
    )  # FIFO: per queue

    producer = clients.producer(topic)
    for body, message_group in ((b"a1", "A"), (b"a2", "A"), (b"b1", "B"), (b"a3", "A"), (b"b2", "B")):
        _send(producer, topic, body, message_group)
    consumer = clients.simple(topic, group)
    order: list[bytes] = []
    for _ in range(10):
        got = consumer.receive(16, 20)
        bodies = [m.body for m in got]
        # never two messages of one group at once, and in send order
        assert len({b[:1] for b in bodies}) == len(bodies), bodies
        order += bodies
        for message in got:
            consumer.ack(message)
        if len(order) == 5:
            break
    assert [b for b in order if b.startswith(b"a")] == [b"a1", b"a2", b"a3"]
    assert [b for b in order if b.startswith(b"b")] == [b"b1", b"b2"]


def test_fifo_push_consumer_keeps_the_order_through_a_failure(
    rmq_broker: BrokerProcess, clients: Any
) -> None:
    from rocketmq import MessageListener

    group = _name("g")
    topic = _topic_with_group(rmq_broker, group, fifo=True)
    producer = clients.producer(topic)
    bodies = [f"x{i}".encode() for i in range(5)]
    for body in bodies:
        _send(producer, topic, body, "X")
    recorder = Recorder(fail_once={b"x2"})
    MessageListener.register(Recorder)
    clients.push(topic, group, recorder)
    recorder.wait_for(len(bodies) + 1)
    # the FIFO client retries x2 in place (a local retry) before x3: the group's order holds end to end
    assert [body for body, _ in recorder.seen] == [b"x0", b"x1", b"x2", b"x2", b"x3", b"x4"]
