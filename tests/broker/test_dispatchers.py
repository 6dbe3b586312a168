"""Dispatch policies of persistent subscriptions (Exclusive, Failover, Shared) and the timers a subscription
owns, on a managed ledger over the in-memory fake store."""

from __future__ import annotations

import asyncio
import struct

import pytest

from quasar.broker.consumer import Consumer
from quasar.broker.dispatchers import MultipleConsumersDispatcher, SingleActiveConsumerDispatcher
from quasar.broker.errors import ConsumerBusyError
from quasar.broker.key_shared_dispatcher import KeySharedDispatcher
from quasar.broker.topic import PersistentTopic
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import InitialPosition, SubType
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

CONFIG = ManagedLedgerConfig(max_entries_per_ledger=100, min_ledger_rollover_time_ms=0)


def entry(sequence_id: int) -> bytes:
    raw = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1).SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"payload"


class FakeCnx:
    writable = True
    remote_address = "test"

    def __init__(self) -> None:
        self.messages: list[tuple[int, Position, int]] = []  # consumer id, position, redelivery count
        self.active: list[tuple[int, bool]] = []
        self.closed: list[int] = []

    def send_message(self, consumer_id, position, partition, data, redelivery_count, ack_set=None) -> None:
        self.messages.append((consumer_id, position, redelivery_count))

    def send_close_consumer(self, consumer_id: int) -> None:
        self.closed.append(consumer_id)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.active.append((consumer_id, is_active))

    def received(self, consumer_id: int) -> list[Position]:
        return [p for c, p, _ in self.messages if c == consumer_id]


@pytest.fixture
async def topic():
    factory = ManagedLedgerFactory(FakeMessageStore(), FakeMetadataStore(), CONFIG)
    await factory.start()
    name = TopicName.parse("persistent://public/default/t-partition-0")
    ledger = await factory.open(name.full_name)
    loaded = PersistentTopic(name, ledger)
    yield loaded
    loaded.close()
    await factory.close()


async def publish(topic: PersistentTopic, count: int) -> list[Position]:
    return [await topic.ledger.add_entry(entry(i)) for i in range(count)]


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_exclusive_refuses_others_and_delivers_in_order(topic):
    positions = await publish(topic, 5)
    sub = await topic.get_or_create_subscription("s", durable=True, initial_position=InitialPosition.Earliest)
    cnx = FakeCnx()
    first = Consumer(1, "a", cnx, sub)
    sub.add_consumer(first, SubType.Exclusive)
    assert isinstance(sub.dispatcher, SingleActiveConsumerDispatcher)
    with pytest.raises(ConsumerBusyError):
        sub.add_consumer(Consumer(2, "b", cnx, sub), SubType.Exclusive)
    with pytest.raises(ConsumerBusyError):  # another sub type while a consumer is attached
        sub.add_consumer(Consumer(3, "c", cnx, sub), SubType.Shared)
    first.flow(3)
    await settle()
    assert cnx.received(1) == positions[:3]  # bounded by the permits
    sub.ack_cumulative(first, positions[2])
    first.flow(10)
    await settle()
    assert cnx.received(1) == positions
    sub.remove_consumer(first)
    assert sub.sub_type == SubType.Exclusive  # kept for stats while nobody is attached
    sub.add_consumer(Consumer(4, "d", cnx, sub), SubType.Key_Shared)  # nobody attached: a new policy
    assert isinstance(sub.dispatcher, KeySharedDispatcher)


async def test_shared_round_robin_ignores_cumulative_acks(topic):
    positions = await publish(topic, 4)
    sub = await topic.get_or_create_subscription("s", durable=True, initial_position=InitialPosition.Earliest)
    cnx = FakeCnx()
    a, b = Consumer(1, "a", cnx, sub), Consumer(2, "b", cnx, sub)
    sub.add_consumer(a, SubType.Shared)
    sub.add_consumer(b, SubType.Shared)
    assert isinstance(sub.dispatcher, MultipleConsumersDispatcher)
    a.flow(10)
    b.flow(10)
    await settle()
    assert sorted(cnx.received(1) + cnx.received(2)) == positions
    assert cnx.received(1) and cnx.received(2)  # both take turns
    sub.ack_cumulative(a, positions[-1])  # Pulsar ignores cumulative acks on Shared
    assert sub.cursor.mark_delete_position < positions[0]
    sub.remove_consumer(b)  # b's entries go to a, one redelivery later
    await settle()
    assert sorted(cnx.received(1)) == positions
    assert all(count == 0 for c, _, count in cnx.messages)  # a consumer leaving is not a redelivery


async def test_failover_moves_to_the_higher_priority_consumer_and_rewinds(topic):
    positions = await publish(topic, 3)
    sub = await topic.get_or_create_subscription("s", durable=True, initial_position=InitialPosition.Earliest)
    cnx = FakeCnx()
    low = Consumer(1, "a", cnx, sub, priority_level=1)
    sub.add_consumer(low, SubType.Failover)
    low.flow(10)
    await settle()
    assert cnx.received(1) == positions and cnx.active == [(1, True)]
    high = Consumer(2, "b", cnx, sub, priority_level=0)  # lower level = higher priority
    sub.add_consumer(high, SubType.Failover)
    high.flow(10)
    await settle()
    assert cnx.active[-2:] == [(1, False), (2, True)]
    assert cnx.received(2) == positions  # the unacknowledged entries again, to the new active consumer
    assert low.pending_acks == {}
    sub.remove_consumer(high)
    await settle()
    assert cnx.active[-1] == (1, True)
    assert cnx.received(1) == positions + positions


async def test_a_readers_idle_timer_is_owned_by_its_subscription(topic):
    await publish(topic, 1)
    sub = await topic.get_or_create_subscription(
        "r", durable=False, initial_position=InitialPosition.Earliest
    )
    sub.drop_if_idle_after(0.01)
    await asyncio.sleep(0.05)
    assert "r" not in topic.subscriptions  # idle when the timer fired: dropped
    kept = await topic.get_or_create_subscription(
        "r", durable=False, initial_position=InitialPosition.Earliest
    )
    kept.drop_if_idle_after(0.01)
    kept.close()  # what the topic does when it drops or unloads a subscription
    await asyncio.sleep(0.05)
    assert topic.subscriptions.get("r") is kept  # the cancelled timer never fired


async def test_delayed_delivery_timer_goes_with_the_last_consumer(topic):
    metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, deliver_at_time=2**62)
    raw = metadata.SerializeToString()
    await topic.ledger.add_entry(struct.pack(">I", len(raw)) + raw + b"later")
    sub = await topic.get_or_create_subscription("s", durable=True, initial_position=InitialPosition.Earliest)
    cnx = FakeCnx()
    consumer = Consumer(1, "a", cnx, sub)
    sub.add_consumer(consumer, SubType.Shared)
    consumer.flow(10)
    await settle()
    dispatcher = sub.dispatcher
    assert isinstance(dispatcher, MultipleConsumersDispatcher)
    assert len(dispatcher.delayed) == 1 and cnx.messages == []
    sub.remove_consumer(consumer)
    assert len(dispatcher.delayed) == 0  # forgotten (and its timer cancelled): read again after the rewind
