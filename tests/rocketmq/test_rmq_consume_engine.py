"""The pop engine (``broker.pop_consumer``) on a managed ledger over the in-memory fake store: invisibility,
acks, redelivery counts, dead letters, FIFO message groups, sharing with Pulsar consumers."""

from __future__ import annotations

import asyncio
import struct

import pytest

from quasar.broker.consumer import Consumer
from quasar.broker.pop_consumer import PopItem, PopQueue, PopWaiter
from quasar.broker.topic import PersistentTopic
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.protocol import TopicName
from quasar.protocol.enums import InitialPosition, SubType
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

CONFIG = ManagedLedgerConfig(max_entries_per_ledger=100, min_ledger_rollover_time_ms=0)


def entry(sequence_id: int, key: str | None = None, batch: int | None = None) -> bytes:
    meta = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    if batch is not None:
        meta.num_messages_in_batch = batch
    if key is not None:
        meta.ordering_key = key.encode()
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + f"m{sequence_id}".encode()


def key_of(data: memoryview) -> str | None:
    size = struct.unpack(">I", data[:4])[0]
    meta = MessageMetadata()
    meta.ParseFromString(bytes(data[4 : 4 + size]))
    return meta.ordering_key.decode() if meta.HasField("ordering_key") else None


def body(item: PopItem) -> bytes:
    size = struct.unpack(">I", item.data[:4])[0]
    return bytes(item.data[4 + size :])


@pytest.fixture
async def topic():
    factory = ManagedLedgerFactory(FakeMessageStore(), FakeMetadataStore(), CONFIG)
    await factory.start()
    name = TopicName.parse("persistent://public/default/t-partition-0")
    loaded = PersistentTopic(name, await factory.open(name.full_name))
    yield loaded
    loaded.close()
    await factory.close()


class Letters:
    def __init__(self) -> None:
        self.items: list[PopItem] = []
        self.fail = 0

    async def __call__(self, item: PopItem) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("dead-letter topic unavailable")
        self.items.append(item)


async def queue_on(topic: PersistentTopic, **kwargs) -> tuple[PopQueue, Letters]:
    sub = await topic.get_or_create_subscription("g", durable=True, initial_position=InitialPosition.Earliest)
    letters = Letters()
    return PopQueue(sub, group="g", dead_letter=letters, key_of=key_of, **kwargs), letters


async def pop(queue: PopQueue, room: int, invisible_ms: int = 60_000, wait_s: float = 0.05) -> list[PopItem]:
    return await PopWaiter(room, invisible_ms).wait([queue], wait_s)


async def publish(topic: PersistentTopic, *entries: bytes) -> None:
    for data in entries:
        await topic.ledger.add_entry(data)


async def test_pop_hides_acks_and_redelivers_with_the_next_attempt(topic):
    await publish(topic, *(entry(i) for i in range(5)))
    queue, _ = await queue_on(topic)
    first = await pop(queue, 3, invisible_ms=1000)
    assert [body(i) for i in first] == [b"m0", b"m1", b"m2"] and all(i.attempt == 1 for i in first)
    second = await pop(queue, 10)
    assert [body(i) for i in second] == [b"m3", b"m4"]  # the first three stay invisible
    assert await pop(queue, 10) == []
    queue.ack(first[0])
    assert queue.lookup(first[1].queue_offset, first[1].retrieve_ms) is first[1]
    assert queue.lookup(first[1].queue_offset, first[1].retrieve_ms + 1) is None  # forged receipt
    again = await pop(queue, 10, wait_s=5)  # long poll until the invisible time lapses
    assert sorted(body(i) for i in again) == [b"m1", b"m2"] and all(i.attempt == 2 for i in again)
    assert queue.lookup(first[1].queue_offset, first[1].retrieve_ms) is None  # the old receipt is stale
    for item in [*again, *second]:
        queue.ack(item)
    assert queue.subscription.cursor.number_of_entries_in_backlog == 0
    assert queue.subscription.consumers == []  # idle: the virtual consumer left


async def test_long_poll_is_woken_by_a_publish(topic):
    queue, _ = await queue_on(topic)
    waiting = asyncio.create_task(pop(queue, 4, wait_s=5))
    await asyncio.sleep(0.05)
    await publish(topic, entry(7))
    items = await asyncio.wait_for(waiting, 2)
    assert [body(i) for i in items] == [b"m7"]


async def test_change_invisible_gives_a_new_receipt_and_keeps_it_hidden(topic):
    await publish(topic, entry(0))
    queue, _ = await queue_on(topic)
    (item,) = await pop(queue, 1, invisible_ms=100)
    old = item.retrieve_ms
    queue.change_invisible(item, 60_000)
    assert item.retrieve_ms > old
    assert queue.lookup(item.queue_offset, old) is None
    assert queue.lookup(item.queue_offset, item.retrieve_ms) is item
    assert await pop(queue, 1, wait_s=0.3) == []  # past the first invisible time, still hidden


async def test_max_attempts_dead_letters_and_acks(topic):
    await publish(topic, entry(0))
    queue, letters = await queue_on(topic, max_delivery_attempts=2, retry_after_ms=50)
    letters.fail = 1
    for attempt in (1, 2):
        (item,) = await pop(queue, 1, invisible_ms=50, wait_s=5)
        assert item.attempt == attempt
    assert await pop(queue, 1, wait_s=0.5) == []  # third delivery: dead-lettered instead (once failing)
    for _ in range(100):
        if letters.items:
            break
        await pop(queue, 1, wait_s=0.05)
    assert [body(i) for i in letters.items] == [b"m0"] and letters.items[0].attempt == 3
    await asyncio.sleep(0.01)
    assert queue.subscription.cursor.number_of_entries_in_backlog == 0


async def test_forward_to_dead_letter_now(topic):
    await publish(topic, entry(0))
    queue, letters = await queue_on(topic)
    (item,) = await pop(queue, 1)
    queue.dead_letter_now(item)
    assert queue.lookup(item.queue_offset, item.retrieve_ms) is None
    await asyncio.sleep(0.01)
    assert letters.items == [item]
    assert queue.subscription.cursor.number_of_entries_in_backlog == 0


async def test_filtered_entries_are_acked_for_the_group(topic):
    await publish(topic, entry(0), entry(1), entry(2))
    queue, _ = await queue_on(topic)
    queue.accept = lambda data: not bytes(data).endswith(b"m1")
    items = await pop(queue, 10)
    assert [body(i) for i in items] == [b"m0", b"m2"]
    for item in items:
        queue.ack(item)
    assert queue.subscription.cursor.number_of_entries_in_backlog == 0


async def test_fifo_hands_a_group_its_next_message_after_the_ack(topic):
    await publish(topic, entry(0, "a"), entry(1, "a"), entry(2, "b"), entry(3, "a"), entry(4))
    queue, _ = await queue_on(topic, fifo=True)
    first = await pop(queue, 10)
    assert [body(i) for i in first] == [b"m0", b"m2", b"m4"]
    assert await pop(queue, 10) == []
    queue.ack(first[0])
    (nxt,) = await pop(queue, 10, invisible_ms=100)
    assert body(nxt) == b"m1"
    (again,) = await pop(queue, 10, wait_s=5)  # m1's time lapses: m1 again, never m3 before it
    assert (body(again), again.attempt) == (b"m1", 2)
    queue.ack(again)
    (last,) = await pop(queue, 10)
    assert (body(last), last.attempt) == (b"m3", 1)


async def test_pop_shares_the_subscription_with_a_pulsar_consumer(topic):
    await publish(topic, *(entry(i) for i in range(4)))
    queue, _ = await queue_on(topic)
    items = await pop(queue, 2)
    assert len(items) == 2

    class Cnx:
        writable = True
        remote_address = "t"

        def __init__(self) -> None:
            self.got: list[int] = []

        def send_message(self, cid, position, partition, data, redelivery_count, ack_set=None) -> None:
            self.got.append(position.entry_id)

    cnx = Cnx()
    pulsar = Consumer(1, "c", cnx, queue.subscription, permits=10)
    queue.subscription.add_consumer(pulsar, SubType.Shared)
    await asyncio.sleep(0.01)
    assert sorted(cnx.got) == sorted({0, 1, 2, 3} - {i.position.entry_id for i in items})


async def test_a_cancelled_receive_gives_entries_back_uncounted(topic):
    await publish(topic, entry(0))
    queue, _ = await queue_on(topic)
    (item,) = await pop(queue, 1)
    queue.give_back(item)
    (again,) = await pop(queue, 1)
    assert again.attempt == 1 and body(again) == b"m0"
    queue.close()
    assert queue.subscription.consumers == []


async def test_batch_indexes_are_acked_one_by_one(topic):
    await publish(topic, entry(0, batch=3))
    queue, _ = await queue_on(topic)
    (item,) = await pop(queue, 1, invisible_ms=100)
    queue.ack_index(item, 1, 3)
    assert queue.acked_indexes(item) == 0b101
    with pytest.raises(ValueError, match="outside"):
        queue.ack_index(item, 3, 3)
    (again,) = await pop(queue, 1, wait_s=5)  # redelivered: the cursor still knows index 1 is acked
    assert again.attempt == 2 and queue.acked_indexes(again) == 0b101
    queue.ack_index(again, 0, 3)
    queue.ack_index(again, 2, 3)
    assert queue.subscription.cursor.number_of_entries_in_backlog == 0
    assert queue.lookup(again.queue_offset, again.retrieve_ms) is None


async def test_auto_renew_keeps_an_entry_hidden_while_its_client_is_connected(topic):
    await publish(topic, entry(0))
    sub = await topic.get_or_create_subscription("g", durable=True, initial_position=InitialPosition.Earliest)
    alive = {"c1"}
    queue = PopQueue(sub, group="g", dead_letter=Letters(), key_of=key_of, is_alive=alive.__contains__)
    (item,) = await PopWaiter(1, 100, owner="c1", auto_renew=True).wait([queue], 0.05)
    assert await pop(queue, 1, wait_s=0.5) == []  # renewed several times meanwhile
    assert queue.lookup(item.queue_offset, item.retrieve_ms) is item  # the same receipt still works
    alive.clear()  # the client went away: no more renewals
    (again,) = await pop(queue, 1, wait_s=5)
    assert again.attempt == 2


async def test_an_exclusive_pulsar_consumer_keeps_the_group_away(topic):
    from quasar.broker.errors import ConsumerBusyError

    await publish(topic, entry(0))
    queue, _ = await queue_on(topic)

    class Cnx:
        writable = True
        remote_address = "t"

        def send_message(self, *args, **kwargs) -> None:
            pass

    queue.subscription.add_consumer(Consumer(1, "x", Cnx(), queue.subscription), SubType.Exclusive)
    with pytest.raises(ConsumerBusyError):
        await pop(queue, 1)
    assert queue.idle and len(queue.subscription.consumers) == 1


async def test_a_queue_whose_subscription_was_dropped_closes_itself(topic):
    await publish(topic, entry(0))
    sub = await topic.get_or_create_subscription("g", durable=True, initial_position=InitialPosition.Earliest)
    current = [True]
    queue = PopQueue(sub, group="g", dead_letter=Letters(), key_of=key_of, is_current=lambda: current[0])
    (item,) = await PopWaiter(1, 50).wait([queue], 0.05)
    current[0] = False  # the topic was unloaded: the timer must not redeliver into the dropped subscription
    redelivered = sub.redelivery_counts.copy()
    for _ in range(100):  # the timer fires after 50 ms (bounded wait, 5 s at most)
        if queue.closed:
            break
        await asyncio.sleep(0.05)
    assert queue.closed and queue.lookup(item.queue_offset, item.retrieve_ms) is None
    assert sub.redelivery_counts == redelivered


async def test_a_receive_cancelled_while_waiting_leaves_nothing_in_flight(topic):
    queue, _ = await queue_on(topic)
    waiting = asyncio.create_task(pop(queue, 4, wait_s=5))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert queue.idle  # the waiter left: no permits, nothing held, the virtual consumer detached
    await publish(topic, entry(0))
    (item,) = await pop(queue, 1)
    assert item.attempt == 1


async def test_repeated_invisible_time_changes_keep_the_expiry_heap_bounded(topic):
    await publish(topic, entry(0))
    queue, _ = await queue_on(topic)
    (item,) = await pop(queue, 1)
    for _ in range(5000):
        retrieve = queue.change_invisible(item, 60_000)
    assert len(queue._expiry) <= 4 + 1024 + 1
    assert queue.lookup(item.queue_offset, retrieve) is item
