"""Non-persistent topic (semantics.md gotcha 3): receipts (0,0), drops without permits, in-flight limit."""

from __future__ import annotations

import asyncio
import struct

from quasar.broker.consumer import Consumer
from quasar.broker.non_persistent import NonPersistentTopic
from quasar.broker.producer import Producer
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import SubType
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata


def entry(sequence_id: int) -> memoryview:
    raw = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1).SerializeToString()
    return memoryview(struct.pack(">I", len(raw)) + raw + b"payload")


class FakeCnx:
    writable = True
    remote_address = "test"

    def __init__(self, max_pending: int) -> None:
        self.non_persistent_pending = 0
        self.max_non_persistent_pending = max_pending
        self.receipts: list[tuple[int, Position]] = []
        self.messages: list[Position] = []

    def send_receipt(self, producer_id, sequence_id, highest_sequence_id, position) -> None:
        self.receipts.append((sequence_id, position))

    def send_send_error(self, producer_id, sequence_id, error, message) -> None:
        raise AssertionError(message)

    def publish_completed(self) -> None:
        pass

    def send_message(self, consumer_id, position, partition, data, redelivery_count, ack_set=None) -> None:
        self.messages.append(position)

    def send_active_consumer_change(self, consumer_id, is_active) -> None:
        pass


async def test_receipts_drops_and_in_flight_limit():
    topic = NonPersistentTopic(TopicName.parse("non-persistent://public/default/np"))
    cnx = FakeCnx(max_pending=2)
    subscription = await topic.get_or_create_subscription("s", durable=True, initial_position=0)
    consumer = Consumer(1, "c", cnx, subscription)  # type: ignore[arg-type]
    subscription.add_consumer(consumer, SubType.Exclusive)
    consumer.flow(1)
    producer = Producer(1, "p", topic, cnx, True)  # type: ignore[arg-type]
    assert topic.add_producer(producer)
    for sequence_id in range(3):  # in one loop iteration: the third is past the in-flight limit
        producer.publish(sequence_id, 0, 1, entry(sequence_id))
    for _ in range(5):
        await asyncio.sleep(0)
    assert cnx.receipts == [(0, Position(0, 0)), (1, Position(0, 0)), (2, Position(-1, -1))]
    assert cnx.non_persistent_pending == 0
    assert cnx.messages == [Position(0, 0)]  # one permit: the second message is dropped
    assert subscription.msg_drop_counter == 1
    subscription.remove_consumer(consumer)
    topic.remove_non_durable_if_idle(subscription)
    assert topic.subscriptions == {}
