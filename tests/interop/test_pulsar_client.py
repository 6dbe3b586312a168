"""The official pulsar-client (C++ core) against a real `quasar standalone` process.

Each test talks to a broker subprocess started on port 0 with its own data directory (fixture ``broker`` in
conftest.py); restarts and SIGKILL use the same data directory.
"""

from __future__ import annotations

import re
import time
import uuid

import pulsar
import pytest

from tests.interop.helpers import create_partitioned, new_client, topic_name

pytestmark = pytest.mark.interop

COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


def receive_all(consumer, count: int, *, ack: bool = True, timeout_ms: int = 10_000) -> list:
    messages = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=timeout_ms)
        messages.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return messages


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: str(c).rsplit(".", 1)[-1])
@pytest.mark.parametrize("partitions", [0, 3])
def test_produce_consume_batched_compressed(broker, compression, partitions):
    topic = topic_name()
    if partitions:
        create_partitioned(broker, topic, partitions)
    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic,
            "sub",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=50,
            batching_max_publish_delay_ms=5,
            compression_type=compression,
        )
        sent = {}
        for i in range(300):
            payload = (f"message-{i}-" + "x" * (i % 97)).encode()
            sent[payload] = f"key-{i % 7}"
            producer.send_async(payload, None, partition_key=f"key-{i % 7}", properties={"i": str(i)})
        producer.flush()
        received = receive_all(consumer, len(sent))
        got = {m.data(): m.partition_key() for m in received}
        assert got == sent
        assert all(m.properties()["i"] == m.data().decode().split("-")[1] for m in received)
        if partitions:
            assert {m.topic_name() for m in received} == {f"{topic}-partition-{i}" for i in range(partitions)}
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
    finally:
        client.close()


def test_non_batched_messages_keep_metadata(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        ids = [
            producer.send(
                f"m{i}".encode(), properties={"k": str(i)}, partition_key=f"pk{i}", event_timestamp=1000 + i
            )
            for i in range(5)
        ]
        msgs = receive_all(consumer, 5)
        assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(5)]
        assert [m.partition_key() for m in msgs] == [f"pk{i}" for i in range(5)]
        assert [m.event_timestamp() for m in msgs] == [1000 + i for i in range(5)]
        assert [m.message_id() for m in msgs] == ids
        # entry ids are consecutive within a ledger
        assert [i.entry_id() for i in ids] == list(range(ids[0].entry_id(), ids[0].entry_id() + 5))
    finally:
        client.close()


def test_exclusive_rejects_second_consumer(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
        # a different subscription on the same topic is fine
        client.subscribe(topic, "other", consumer_type=pulsar.ConsumerType.Exclusive)
    finally:
        client.close()


def test_shared_spreads_across_two_consumers(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        c1 = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        c2 = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        producer = client.create_producer(topic)
        for i in range(100):
            producer.send_async(f"{i}".encode(), None)
        producer.flush()
        got1, got2 = [], []
        while len(got1) + len(got2) < 100:
            progressed = False
            for consumer, got in ((c1, got1), (c2, got2)):
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                got.append(int(msg.data()))
                consumer.acknowledge(msg)
                progressed = True
            assert progressed or len(got1) + len(got2) < 100
        assert sorted(got1 + got2) == list(range(100))
        assert got1 and got2, "both Shared consumers must receive messages"
    finally:
        client.close()


def test_cumulative_ack_and_redelivery_after_reconnect(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "cum", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"{i}".encode())
        msgs = receive_all(consumer, 10, ack=False)
        consumer.acknowledge_cumulative(msgs[5])  # acks 0..5
        consumer.close()
        consumer = client.subscribe(topic, "cum")
        again = receive_all(consumer, 4)
        assert [int(m.data()) for m in again] == [6, 7, 8, 9]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
    finally:
        client.close()


def test_restart_resumes_after_mark_delete(broker):
    topic = topic_name()
    client = new_client(broker)
    consumer = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
    # Not batched: without batch-index acks a partly acked batch is redelivered whole, as in Pulsar.
    producer = client.create_producer(topic)
    for i in range(200):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    first = receive_all(consumer, 120)
    assert [int(m.data()) for m in first] == list(range(120))
    consumer.close()  # flushes the grouped acks
    client.close()

    broker.restart()

    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "durable")
        rest = receive_all(consumer, 80)
        assert [int(m.data()) for m in rest] == list(range(120, 200))
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=500)
        producer = client.create_producer(topic)
        producer.send(b"after-restart")
        assert consumer.receive(timeout_millis=10_000).data() == b"after-restart"
    finally:
        client.close()


def test_sigkill_keeps_every_receipted_message(broker):
    topic = topic_name()
    client = new_client(broker)
    receipted: list[bytes] = []
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=1, block_if_queue_full=True
    )

    def on_sent(i):
        def callback(result, _msg_id):
            if result == pulsar.Result.Ok:
                receipted.append(f"{i}".encode())

        return callback

    for i in range(3000):
        producer.send_async(f"{i}".encode(), on_sent(i))
        if i == 2000:
            producer.flush()  # at least 2001 receipts before the crash
        if i == 2500:
            broker.kill()  # SIGKILL while sends are in flight
    client.close()
    confirmed = list(receipted)
    assert len(confirmed) >= 2000

    broker.start()
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "after-crash", initial_position=pulsar.InitialPosition.Earliest)
        seen = set()
        while True:
            try:
                msg = consumer.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            seen.add(msg.data())
            consumer.acknowledge(msg)
        missing = set(confirmed) - seen
        assert not missing, f"{len(missing)} receipted messages lost"
    finally:
        client.close()


def test_reader_and_last_message_id(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        ids = [producer.send(f"r{i}".encode()) for i in range(5)]
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert [reader.read_next(10_000).data() for _ in range(5)] == [f"r{i}".encode() for i in range(5)]
        assert not reader.has_message_available()
        reader2 = client.create_reader(topic, ids[2])  # exclusive of the start id by default
        assert reader2.read_next(10_000).data() == b"r3"
        reader3 = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
        assert reader3.read_next(10_000).data() == b"r2"
        consumer = client.subscribe(topic, "lm", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.get_last_message_id() == ids[-1]
    finally:
        client.close()


def test_seek_to_message_id(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        ids = [producer.send(f"s{i}".encode()) for i in range(6)]
        consumer = client.subscribe(topic, "seeker", initial_position=pulsar.InitialPosition.Earliest)
        assert len(receive_all(consumer, 6)) == 6
        consumer.seek(ids[1])
        # the client drops the sought entry itself (start_message_id_inclusive=False)
        assert consumer.receive(timeout_millis=10_000).data() == b"s2"
        consumer.seek(pulsar.MessageId.earliest)
        assert consumer.receive(timeout_millis=10_000).data() == b"s0"
    finally:
        client.close()


def test_unsubscribe_then_resubscribe_starts_fresh(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "u", initial_position=pulsar.InitialPosition.Earliest)
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"
        consumer.unsubscribe()
        producer.send(b"between")
        consumer = client.subscribe(topic, "u")  # Latest: a new subscription sees only later messages
        producer.send(b"after")
        assert consumer.receive(timeout_millis=10_000).data() == b"after"
    finally:
        client.close()


def test_negative_ack_redelivers_with_count(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic,
            "nack",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic)
        producer.send(b"retry-me")
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.redelivery_count() == 0
        consumer.negative_acknowledge(msg)
        again = consumer.receive(timeout_millis=10_000)
        assert again.data() == b"retry-me"
        assert again.redelivery_count() == 1
        consumer.acknowledge(again)
    finally:
        client.close()


def test_seek_to_publish_time(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"old{i}".encode())
        consumer = client.subscribe(topic, "by-time", initial_position=pulsar.InitialPosition.Earliest)
        assert len(receive_all(consumer, 3)) == 3
        time_after_old = int(time.time() * 1000) + 5
        time.sleep(0.05)
        for i in range(2):
            producer.send(f"new{i}".encode())
        assert len(receive_all(consumer, 2)) == 2
        consumer.seek(time_after_old)
        assert [m.data() for m in receive_all(consumer, 2)] == [b"new0", b"new1"]
        consumer.seek(0)
        assert consumer.receive(timeout_millis=10_000).data() == b"old0"
    finally:
        client.close()


def test_reader_seek_to_publish_time(broker):
    """A reader's non-durable subscription keeps its reset cursor across the seek: the client re-subscribes from
    its old start id, and must still read from the sought time (then back to the start with seek(0))."""
    topic = topic_name()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"old{i}".encode())
        time_after_old = int(time.time() * 1000) + 5
        time.sleep(0.05)
        for i in range(2):
            producer.send(f"new{i}".encode())
        reader = client.create_reader(topic, pulsar.MessageId.latest)
        reader.seek(time_after_old)
        assert [reader.read_next(timeout_millis=10_000).data() for _ in range(2)] == [b"new0", b"new1"]
        reader.seek(0)
        assert reader.read_next(timeout_millis=10_000).data() == b"old0"
        reader.close()
    finally:
        client.close()


def test_regex_subscription_uses_topic_listing(broker):
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    client = new_client(broker)
    try:
        producers = [client.create_producer(f"persistent://public/default/{prefix}-{i}") for i in range(2)]
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            "rx",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i, producer in enumerate(producers):
            producer.send(f"from-{i}".encode())
        got = sorted(m.data() for m in receive_all(consumer, 2))
        assert got == [b"from-0", b"from-1"]
    finally:
        client.close()


def test_failover_delivers_to_one_active_consumer_then_fails_over(broker):
    topic = topic_name()
    client = new_client(broker)
    try:
        consumers = {
            name: client.subscribe(
                topic,
                "fo",
                consumer_type=pulsar.ConsumerType.Failover,
                consumer_name=name,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for name in ("a", "b")
        }
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"{i}".encode())
        # a non-partitioned topic picks its active consumer on a hash ring of the consumer names (Pulsar
        # peekConsumerIndexFromHashRing): exactly one of them receives, the standby nothing
        try:
            first = consumers["a"].receive(timeout_millis=2000)
            active, standby = "a", "b"
        except pulsar.Timeout:
            active, standby = "b", "a"
            first = consumers["b"].receive(timeout_millis=10_000)
        consumers[active].acknowledge(first)
        got = [int(first.data())] + [int(m.data()) for m in receive_all(consumers[active], 4)]
        assert got == [0, 1, 2, 3, 4]
        with pytest.raises(pulsar.Timeout):
            consumers[standby].receive(timeout_millis=300)
        consumers[active].close()
        rest = [int(m.data()) for m in receive_all(consumers[standby], 5)]
        assert rest == [5, 6, 7, 8, 9]
    finally:
        client.close()
