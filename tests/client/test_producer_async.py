"""The asyncio API's publish fast path (bare bytes, no keyword arguments) against a real broker: the pending
queue limit (raise or wait), batch message ids, and the partitioned producer's C++-style partition switching."""

from __future__ import annotations

import asyncio

import pytest

import quasar.client as qc
from tests.interop.helpers import create_partitioned, topic_name


async def test_plain_send_async_respects_max_pending_and_block_if_queue_full(broker):
    async with qc.AsyncClient(broker.service_url, operation_timeout_seconds=15) as client:
        strict = await client.create_producer(
            topic_name("q"),
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,
            max_pending_messages=3,
        )
        futures = [await strict.send_async(b"x") for _ in range(3)]
        with pytest.raises(qc.ProducerQueueIsFullError):
            await strict.send_async(b"x")
        await strict.flush()
        ids = [f.result() for f in futures]
        assert [(m.batch_index, m.batch_size) for m in ids] == [(0, 3), (1, 3), (2, 3)]

        blocking = await client.create_producer(
            topic_name("q"),
            batching_enabled=True,
            batching_max_messages=2,
            max_pending_messages=2,
            block_if_queue_full=True,
        )
        futures = [await blocking.send_async(b"%d" % i) for i in range(9)]  # waits for room between batches
        await blocking.flush()
        ids = [f.result() for f in futures]
        assert ids == sorted(ids) and blocking.pending_messages == 0
        await strict.close()
        with pytest.raises(qc.AlreadyClosedError):
            await strict.send_async(b"x")


async def test_partitioned_plain_sends_fill_a_batch_per_partition_in_turn(broker):
    topic = topic_name("parts")
    create_partitioned(broker, topic, 4)
    async with qc.AsyncClient(broker.service_url, operation_timeout_seconds=15) as client:
        producer = await client.create_producer(
            topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=1000
        )  # the time window (10 x 1 s) never expires here: only the count moves the router on
        futures = [await producer.send_async(b"m") for _ in range(40)]
        await producer.flush()
        ids = await asyncio.gather(*futures)
        partitions = [m.partition for m in ids]
        assert {partitions.count(p) for p in range(4)} == {10}
        assert all(m.batch_size == 5 for m in ids)
        assert all(len(set(partitions[i : i + 5])) == 1 for i in range(0, 40, 5))  # 5 in a row, then move on
