"""The blocking facade's ``send_async`` (callbacks from the receipt, no Future per message) and the async
producer's callback waiters: order, batch message ids, ``block_if_queue_full`` limits enforced in the caller's
thread (per partition), queue-full errors, flush, and reconnect-and-resend in order."""

from __future__ import annotations

import asyncio
import threading

import pulsar
import pytest

import quasar.client as qc
from quasar.client import AsyncClient
from quasar.protocol import CommandType, commands
from tests.interop.helpers import create_partitioned, topic_name
from tests.interop.helpers import new_client as official

from .test_connection import FakeBroker, _standard
from .test_interop import ours


async def test_callbacks_get_batch_ids_in_order_and_survive_a_reconnect_with_resend():
    sends: list[tuple[int, int, int]] = []  # (connection number, sequence id, messages in the entry)

    def handler(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
        if _standard(broker, writer, frame):
            return
        if frame.type == CommandType.SEND:  # type: ignore[attr-defined]
            send = frame.command.send  # type: ignore[attr-defined]
            sends.append((broker.connections, send.sequence_id, send.num_messages))
            if broker.connections == 1:
                writer.close()  # lose the first connection with the first batch unanswered
            else:
                writer.write(commands.new_send_receipt(0, send.sequence_id, 7, len(sends)))

    broker = await FakeBroker(handler).start()
    async with AsyncClient(broker.url, operation_timeout_seconds=5, initial_backoff_interval_ms=10) as client:
        producer = await client.create_producer(
            "t", batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=10_000
        )
        results: list[tuple[object, object]] = []
        for i in range(6):
            producer.send_with_callback(b"m%d" % i, lambda e, m: results.append((e, m)))
        assert producer.pending_messages == 6
        await asyncio.wait_for(producer.flush(), 5)
        assert [e for e, _ in results] == [None] * 6
        ids = [m for _, m in results]
        assert [(m.batch_index, m.batch_size) for m in ids] == [(0, 3), (1, 3), (2, 3)] * 2  # type: ignore[attr-defined]
        assert [m.entry_id for m in ids[:3]] == [ids[0].entry_id] * 3  # type: ignore[attr-defined]
        assert ids[3].entry_id > ids[0].entry_id  # type: ignore[attr-defined]
        # first connection: batch 0-2 (unanswered); after the reconnect both batches, in order
        assert sends[0] == (1, 0, 3)
        assert [(s, n) for c, s, n in sends if c > 1][:2] == [(0, 3), (3, 3)]
        assert producer.pending_messages == 0 and producer.last_sequence_id == 5
    await broker.close()


async def test_flush_waits_for_the_receipts_of_callback_only_sends():
    held: list[tuple[asyncio.StreamWriter, int]] = []

    def handler(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
        if _standard(broker, writer, frame):
            return
        if frame.type == CommandType.SEND:  # type: ignore[attr-defined]
            held.append((writer, frame.command.send.sequence_id))  # type: ignore[attr-defined]

    broker = await FakeBroker(handler).start()
    async with AsyncClient(broker.url, operation_timeout_seconds=5) as client:
        producer = await client.create_producer(
            "t", batching_enabled=True, batching_max_publish_delay_ms=10_000
        )
        for _ in range(4):
            producer.send_with_callback(b"x", None)
        flush = asyncio.ensure_future(producer.flush())
        while not held:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert not flush.done()  # the batch went out, its receipt has not come back
        writer, sequence_id = held[0]
        writer.write(commands.new_send_receipt(0, sequence_id, 3, 0, 3))
        await asyncio.wait_for(flush, 5)
        assert producer.pending_messages == 0
    await broker.close()


def test_facade_blocks_at_max_pending_and_delivers_everything_in_order(broker):
    mine, theirs = ours(broker), official(broker)
    try:
        topic = topic_name("block")
        consumer = theirs.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = mine.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=4,
            block_if_queue_full=True,
            max_pending_messages=10,
        )
        inner = producer._producer
        seen: list[tuple[object, object, int]] = []
        for i in range(300):
            producer.send_async(b"%d" % i, lambda e, m: seen.append((e, m, inner.pending_messages)))
        producer.flush()
        assert len(seen) == 300 and all(e is None for e, _, _ in seen)
        assert max(p for _, _, p in seen) <= 10  # never more than max_pending_messages in flight
        ids = [m for _, m, _ in seen]
        assert ids == sorted(ids) and len(set(ids)) == 300
        got = []
        for _ in range(300):
            message = consumer.receive(10_000)
            got.append(int(message.data()))
            consumer.acknowledge(message)
        assert got == list(range(300))
    finally:
        mine.close()
        theirs.close()


def test_facade_passes_queue_full_to_the_callback_when_not_blocking(broker):
    mine = ours(broker)
    try:
        producer = mine.create_producer(
            topic_name("full"),
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,
            max_pending_messages=5,
        )
        outcomes: list[object] = []
        done = threading.Event()
        for _ in range(8):
            producer.send_async(b"x", lambda e, m: (outcomes.append(e), len(outcomes) == 8 and done.set()))
        producer.flush()  # sends the 5 accepted ones
        assert done.wait(10)
        assert sum(isinstance(e, qc.ProducerQueueIsFullError) for e in outcomes) == 3
        assert outcomes.count(None) == 5
    finally:
        mine.close()


def test_facade_partitioned_limits_each_partition_and_spreads_full_batches(broker):
    topic = topic_name("part-block")
    create_partitioned(broker, topic, 3)
    mine = ours(broker)
    try:
        producer = mine.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=4,
            batching_max_publish_delay_ms=1000,  # the router's time window (10 s) never expires here
            block_if_queue_full=True,
            max_pending_messages=8,
        )
        parts = producer._producer.producers
        seen: list[tuple[object, object, list[int]]] = []
        for i in range(240):
            producer.send_async(
                b"%d" % i, lambda e, m: seen.append((e, m, [p.pending_messages for p in parts]))
            )
        producer.flush()
        assert len(seen) == 240 and all(e is None for e, _, _ in seen)
        assert max(max(p) for _, _, p in seen) <= 8  # the limit holds per partition
        partitions = [m.partition for _, m, _ in seen]
        assert {partitions.count(p) for p in range(3)} == {80}  # 4 per partition in turn: an even spread
        assert all(m.batch_size == 4 for _, m, _ in seen)  # every batch full: switched after a batch's worth
    finally:
        mine.close()


@pytest.mark.parametrize("block", [True, False])
def test_facade_send_async_after_close_reports_already_closed(broker, block):
    mine = ours(broker)
    try:
        producer = mine.create_producer(topic_name("closed"), block_if_queue_full=block)
        producer.close()
        errors: list[object] = []
        done = threading.Event()
        producer.send_async(b"x", lambda e, m: (errors.append(e), done.set()))
        assert done.wait(10)
        assert isinstance(errors[0], qc.AlreadyClosedError)
    finally:
        mine.close()


def test_facade_send_async_from_a_send_callback_does_not_wait_for_room(broker):
    mine = ours(broker)
    try:
        producer = mine.create_producer(topic_name("chain"), block_if_queue_full=True, max_pending_messages=1)
        ids: list[object] = []
        done = threading.Event()

        def chain(error, message_id):  # runs on the loop thread, where waiting for room would never end
            ids.append(message_id)
            if len(ids) < 10:
                producer.send_async(b"next", chain)
                producer.send_async(b"extra", None)  # the queue is full now: accepted anyway on this thread
            else:
                done.set()

        producer.send_async(b"first", chain)
        assert done.wait(10)
        assert all(i is not None for i in ids) and ids == sorted(ids)
    finally:
        mine.close()
