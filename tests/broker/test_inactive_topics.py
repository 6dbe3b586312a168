"""Idle topics are unloaded from memory (quasar.broker.inactive_topics), on a BrokerService over the fake store
and the memory metadata backend, with a fake clock."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from quasar.broker.broker_service import BrokerService
from quasar.broker.dedup import DedupStatus
from quasar.broker.inactive_topics import InactiveTopicUnloader
from quasar.broker.topic import PersistentTopic
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.paths import CURSORS_ROOT
from quasar.metadata.memory import MemoryMetadataStore
from quasar.protocol import TopicName
from quasar.protocol.enums import InitialPosition
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata
from quasar.testing.fake_store import FakeMessageStore

CONFIG = ManagedLedgerConfig(cursor_persist_interval_ms=60_000)  # only closes persist cursors here
NAME = TopicName.parse("persistent://public/default/idle")
MAX_INACTIVE = 300.0


def entry(producer: str, sequence_id: int) -> bytes:
    raw = MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1).SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"payload"


class Clock:
    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


class SlowCursorWritesMetadata(MemoryMetadataStore):
    """Cursor writes take a while once ``slow`` is set, so a close still has them in flight when the next
    load reads the cursors."""

    slow = False

    async def put(self, path, *args, **kwargs):
        if self.slow and path.startswith(CURSORS_ROOT):
            await asyncio.sleep(0.05)
        return await super().put(path, *args, **kwargs)


class Broker:
    def __init__(self) -> None:
        self.metadata = SlowCursorWritesMetadata()
        self.factory = ManagedLedgerFactory(FakeMessageStore(), self.metadata, CONFIG)
        self.service = BrokerService(self.factory, self.metadata, deduplication_enabled=True)
        self.clock = Clock()
        self.unloader = self.service.inactive_topics
        self.unloader.clock = self.clock
        self.unloader.configure(enabled=True, frequency_s=60, max_inactive_s=MAX_INACTIVE)

    async def start(self) -> Broker:
        await self.factory.start()
        await self.service.bootstrap()
        return self

    async def stop(self) -> None:
        await self.service.close()
        await self.factory.close()
        await self.metadata.close()

    async def topic(self) -> PersistentTopic:
        loaded = await self.service.get_or_create_topic(NAME)
        assert isinstance(loaded, PersistentTopic)
        return loaded


@pytest.fixture
async def broker():
    made = await Broker().start()
    yield made
    await made.stop()


async def publish(topic: PersistentTopic, producer: str, sequence_id: int):
    assert topic.dedup.is_duplicate(producer, sequence_id, 0) is DedupStatus.NOT_DUP
    position = await topic.ledger.add_entry(entry(producer, sequence_id))
    topic.dedup.record_persisted(producer, sequence_id, position)
    return position


async def test_an_idle_topic_is_unloaded_and_reloads_with_cursor_backlog_and_dedup_state(broker: Broker):
    topic = await broker.topic()
    subscription = await topic.get_or_create_subscription(
        "sub", durable=True, initial_position=InitialPosition.Earliest
    )
    positions = [await publish(topic, "p", seq) for seq in range(6)]
    subscription.cursor.mark_delete(positions[0])
    subscription.cursor.delete([positions[2], positions[4]])  # individually acked
    backlog = subscription.cursor.number_of_entries_in_backlog

    broker.clock.now = topic.last_active + MAX_INACTIVE - 1
    assert broker.unloader.unload_idle() == []  # not idle for long enough
    broker.clock.now = topic.last_active + MAX_INACTIVE
    assert broker.unloader.unload_idle() == [NAME.full_name]
    assert NAME.full_name not in broker.service.topics
    await broker.unloader.wait_unloaded()
    assert topic.ledger.is_closed and broker.factory.get(NAME.full_name) is None
    assert broker.service.list_topics("public/default") == [NAME.full_name]  # still exists
    assert broker.unloader.unloaded_total == 1

    again = await broker.topic()
    assert again is not topic
    cursor = again.subscriptions["sub"].cursor
    assert cursor.mark_delete_position == positions[0]
    assert (
        cursor.is_acked(positions[2]) and cursor.is_acked(positions[4]) and not cursor.is_acked(positions[3])
    )
    assert cursor.number_of_entries_in_backlog == backlog
    assert again.dedup.is_duplicate("p", 5, 0) is DedupStatus.DUP  # resent after the reload: deduplicated
    assert again.dedup.is_duplicate("p", 6, 0) is DedupStatus.NOT_DUP


async def test_a_topic_with_a_producer_or_consumer_or_pending_work_is_kept(broker: Broker):
    topic = await broker.topic()
    subscription = await topic.get_or_create_subscription(
        "sub", durable=True, initial_position=InitialPosition.Earliest
    )
    broker.clock.now = topic.last_active + 10 * MAX_INACTIVE
    consumer = object()
    subscription.consumers.append(consumer)  # type: ignore[arg-type]
    assert broker.unloader.unload_idle() == []
    subscription.consumers.remove(consumer)  # type: ignore[arg-type]
    topic.producers["p"] = object()  # type: ignore[assignment]
    assert broker.unloader.unload_idle() == []
    del topic.producers["p"]
    running = {NAME.full_name}
    broker.unloader._compacting = lambda name: name.full_name in running
    assert broker.unloader.unload_idle() == []  # a compaction runs
    running.clear()
    assert broker.unloader.unload_idle() == [NAME.full_name]


async def test_losing_a_consumer_restarts_the_idle_time(broker: Broker):
    topic = await broker.topic()
    subscription = await topic.get_or_create_subscription(
        "sub", durable=True, initial_position=InitialPosition.Earliest
    )

    class FakeConsumer:
        pending_acks: dict = {}
        unacked_messages = 0

        def clear_pending(self) -> None:
            pass

    consumer = FakeConsumer()
    subscription.consumers.append(consumer)  # type: ignore[arg-type]
    topic.last_active -= 2 * MAX_INACTIVE  # loaded long ago
    subscription.remove_consumer(consumer)  # type: ignore[arg-type]
    broker.clock.now = time.monotonic() + MAX_INACTIVE / 2
    assert broker.unloader.unload_idle() == []  # it lost its consumer just now
    broker.clock.now = topic.last_active + MAX_INACTIVE
    assert broker.unloader.unload_idle() == [NAME.full_name]


async def test_a_request_during_the_close_loads_what_the_close_persisted(broker: Broker):
    topic = await broker.topic()
    subscription = await topic.get_or_create_subscription(
        "sub", durable=True, initial_position=InitialPosition.Earliest
    )
    positions = [await publish(topic, "p", seq) for seq in range(3)]
    subscription.cursor.mark_delete(positions[1])  # dirty: only the close persists it (flusher interval 60 s)
    broker.clock.now = topic.last_active + MAX_INACTIVE
    broker.metadata.slow = True
    assert broker.unloader.unload_idle() == [NAME.full_name]
    again = await broker.topic()  # at once, while the close is in flight
    assert topic.ledger.is_closed
    assert again.subscriptions["sub"].cursor.mark_delete_position == positions[1]


async def test_a_topic_whose_load_slot_is_taken_is_left_alone(broker: Broker):
    topic = await broker.topic()
    broker.clock.now = topic.last_active + MAX_INACTIVE
    slot = asyncio.get_running_loop().create_future()
    broker.service._loading[NAME.full_name] = slot  # a load, unload or deletion in progress
    assert broker.unloader.unload_idle() == []
    del broker.service._loading[NAME.full_name]
    slot.cancel()
    assert broker.unloader.unload_idle() == [NAME.full_name]


async def test_a_non_persistent_topic_without_producer_or_subscription_is_dropped(broker: Broker):
    service = broker.service
    names = [TopicName.parse(f"non-persistent://public/default/np-{i}") for i in range(3)]
    kept_sub, kept_producer, dropped = [await service.get_or_create_topic(name) for name in names]
    await kept_sub.get_or_create_subscription("s", durable=False, initial_position=InitialPosition.Latest)
    kept_producer.producers["p"] = object()  # type: ignore[assignment]
    broker.clock.now = dropped.last_active + MAX_INACTIVE - 1
    assert broker.unloader.unload_idle() == []
    broker.clock.now = dropped.last_active + MAX_INACTIVE
    assert broker.unloader.unload_idle() == [names[2].full_name]
    assert set(service.topics) == {names[0].full_name, names[1].full_name}
    assert service.count_topics("public/default") == 2  # the registry's non-persistent index followed
    await kept_sub.delete_subscription("s")  # losing it restarts the idle time
    broker.clock.now = time.monotonic() + MAX_INACTIVE / 2
    assert broker.unloader.unload_idle() == []
    again = await service.get_or_create_topic(names[2])  # the next use creates it afresh
    assert again is not dropped and names[2].full_name in service.topics


async def test_the_timer_task_unloads_and_close_cancels_it_until_started_again(broker: Broker):
    broker.unloader.clock = time.monotonic
    broker.unloader.configure(enabled=True, frequency_s=0.02, max_inactive_s=0.05)
    broker.unloader.start()
    await broker.topic()
    for _ in range(200):  # bounded: 200 x 20 ms
        if NAME.full_name not in broker.service.topics:
            break
        await asyncio.sleep(0.02)
    assert NAME.full_name not in broker.service.topics
    task = broker.unloader._task
    assert task is not None and not task.done()
    await broker.unloader.close()
    assert task.cancelled() and broker.unloader._task is None
    broker.unloader.start()  # started again (a replicated broker promoted after a step-down)
    await broker.topic()
    for _ in range(200):
        if NAME.full_name not in broker.service.topics:
            break
        await asyncio.sleep(0.02)
    assert NAME.full_name not in broker.service.topics


async def test_disabled_never_starts_and_bad_settings_are_refused(broker: Broker):
    unloader = InactiveTopicUnloader({}, {}, lambda: broker.factory, lambda name: False)
    unloader.configure(enabled=False, frequency_s=1, max_inactive_s=1)
    unloader.start()
    assert unloader._task is None
    for frequency, max_inactive in ((0, 1), (1, 0), (-1, 5)):
        with pytest.raises(ValueError, match="must be positive"):
            unloader.configure(enabled=True, frequency_s=frequency, max_inactive_s=max_inactive)
    await unloader.close()
