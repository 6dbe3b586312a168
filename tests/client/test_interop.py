"""Quasar's client against a real broker, interoperating with the official ``pulsar-client`` both ways:
plain, batched (each compression), chunked, keyed and partitioned messages; negative ack -> redelivery ->
dead-letter topic; deduplication across a broker restart mid-stream."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

import quasar.client as qc
from tests.interop.helpers import create_partitioned, topic_name
from tests.interop.helpers import new_client as official

pytestmark = pytest.mark.interop

COMPRESSIONS = [
    (qc.CompressionType.NONE, pulsar.CompressionType.NONE),
    (qc.CompressionType.LZ4, pulsar.CompressionType.LZ4),
    (qc.CompressionType.ZLIB, pulsar.CompressionType.ZLib),
    (qc.CompressionType.ZSTD, pulsar.CompressionType.ZSTD),
    (qc.CompressionType.SNAPPY, pulsar.CompressionType.SNAPPY),
]


def ours(broker) -> qc.Client:
    return qc.Client(broker.service_url, operation_timeout_seconds=15)


@pytest.fixture
def clients(broker):
    mine, theirs = ours(broker), official(broker)
    yield mine, theirs
    mine.close()
    theirs.close()


def test_our_producer_to_official_consumer_plain_and_batched_with_every_compression(clients):
    mine, theirs = clients
    for ours_compression, _ in COMPRESSIONS:
        for batching in (False, True):
            topic = topic_name("c")
            consumer = theirs.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            producer = mine.create_producer(
                topic, batching_enabled=batching, compression_type=ours_compression
            )
            results: list = []
            for i in range(30):
                producer.send_async(
                    f"msg-{i}".encode() * 20, lambda e, m, out=results: out.append((e, m)),
                    properties={"i": str(i)}, partition_key=f"k{i % 3}", event_timestamp=1000 + i,
                )  # fmt: skip
            producer.flush()
            assert [e for e, _ in results] == [None] * 30
            ids = [m for _, m in results]
            assert ids == sorted(ids) and len(set(ids)) == 30
            for i in range(30):
                message = consumer.receive(10_000)
                assert message.data() == f"msg-{i}".encode() * 20
                assert message.properties() == {"i": str(i)}
                assert message.partition_key() == f"k{i % 3}"
                assert message.event_timestamp() == 1000 + i
                consumer.acknowledge(message)
            consumer.close()
            producer.close()


def test_official_producer_to_our_consumer_plain_and_batched_with_every_compression(clients):
    mine, theirs = clients
    for _, their_compression in COMPRESSIONS:
        for batching in (False, True):
            topic = topic_name("c")
            consumer = mine.subscribe(topic, "s", initial_position=qc.InitialPosition.Earliest)
            producer = theirs.create_producer(
                topic, batching_enabled=batching, compression_type=their_compression
            )
            for i in range(30):
                producer.send_async(
                    f"m{i}".encode() * 10, None, properties={"i": str(i)}, partition_key=f"k{i}"
                )
            producer.flush()
            seen = []
            for i in range(30):
                message = consumer.receive(10_000)
                assert message.data() == f"m{i}".encode() * 10
                assert message.properties() == {"i": str(i)} and message.partition_key() == f"k{i}"
                seen.append(message.message_id())
                consumer.acknowledge(message)
            if batching:
                assert any(m.batch_index >= 0 for m in seen)
            consumer.close()
            producer.close()


@pytest.fixture
def small_broker(broker_factory, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("max_message_size = 10000\n")
    return broker_factory(extra_args=("--config", str(config)))


BIG = bytes(range(256)) * 150  # 38 400 bytes: 4+ chunks under a 10 000-byte max_message_size


def test_our_chunked_messages_to_official_and_our_consumers(small_broker):
    mine, theirs = ours(small_broker), official(small_broker)
    try:
        topic = topic_name("chunk")
        their_consumer = theirs.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        my_consumer = mine.subscribe(topic, "s2", initial_position=qc.InitialPosition.Earliest)
        producer = mine.create_producer(
            topic, chunking_enabled=True, compression_type=qc.CompressionType.NONE
        )
        message_id = producer.send(BIG, properties={"n": "1"})
        assert message_id.entry_id >= 3  # the id of the last chunk
        with pytest.raises(qc.MessageTooBigError):
            mine.create_producer(topic).send(BIG)
        message = their_consumer.receive(10_000)
        assert message.data() == BIG and message.properties() == {"n": "1"}
        their_consumer.acknowledge(message)
        mine_message = my_consumer.receive(10_000)
        assert mine_message.data() == BIG and mine_message.properties() == {"n": "1"}
        my_consumer.acknowledge(mine_message)
        assert producer.last_sequence_id() == 0
        # compressed first, then split: the consumer decompresses the reassembled payload
        noisy = __import__("random").Random(1).randbytes(30_000)  # incompressible: still 4 chunks
        mine.create_producer(topic, chunking_enabled=True, compression_type=qc.CompressionType.LZ4).send(
            noisy
        )
        assert their_consumer.receive(10_000).data() == noisy
        assert my_consumer.receive(10_000).data() == noisy
    finally:
        mine.close()
        theirs.close()


def test_official_chunked_messages_to_our_consumer(small_broker):
    mine, theirs = ours(small_broker), official(small_broker)
    try:
        topic = topic_name("chunk")
        my_consumer = mine.subscribe(topic, "s", initial_position=qc.InitialPosition.Earliest)
        their_producer = theirs.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        their_producer.send(BIG[::-1])
        message = my_consumer.receive(10_000)
        assert message.data() == BIG[::-1]
        my_consumer.acknowledge(message)
    finally:
        mine.close()
        theirs.close()


def test_keyed_messages_on_a_partitioned_topic_both_ways(broker, clients):
    mine, theirs = clients
    topic = topic_name("part")
    create_partitioned(broker, topic, 3)
    their_consumer = theirs.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    my_consumer = mine.subscribe(topic, "s2", initial_position=qc.InitialPosition.Earliest)
    producer = mine.create_producer(topic, batching_enabled=True)
    assert len(mine.get_topic_partitions(topic)) == 3
    keys = [f"key-{i}" for i in range(12)]
    results: list = []
    for round_ in range(3):
        for key in keys:
            producer.send_async(
                f"{key}/{round_}".encode(), lambda e, m, key=key: results.append((key, m)), partition_key=key
            )
    producer.flush()
    assert len(results) == 36
    partitions_of: dict[str, set[int]] = {}
    for key, message_id in results:
        partitions_of.setdefault(key, set()).add(message_id.partition)
    assert all(len(p) == 1 for p in partitions_of.values())  # a key always lands on one partition
    assert {p for s in partitions_of.values() for p in s} == {0, 1, 2}
    got: dict[str, list[int]] = {}
    for _ in range(36):
        message = their_consumer.receive(10_000)
        key, round_ = message.data().decode().split("/")
        assert message.partition_key() == key
        got.setdefault(key, []).append(int(round_))
        their_consumer.acknowledge(message)
    assert all(rounds == [0, 1, 2] for rounds in got.values())  # per-key order kept
    mine_got = {}
    for _ in range(36):
        message = my_consumer.receive(10_000)
        mine_got.setdefault(message.partition_key(), []).append(message.data())
        my_consumer.acknowledge(message)
    assert len(mine_got) == 12
    # the official producer into our multi-partition consumer
    their_producer = theirs.create_producer(topic)
    for i in range(9):
        their_producer.send(f"o{i}".encode(), partition_key=f"p{i}")
    received = sorted(my_consumer.receive(10_000).data() for _ in range(9))
    assert received == sorted(f"o{i}".encode() for i in range(9))


def test_negative_ack_redelivery_then_dead_letter_topic(clients):
    mine, theirs = clients
    topic = topic_name("dlq")
    dlq_consumer = theirs.subscribe(
        f"{topic}-sub-DLQ", "dlq-reader", initial_position=pulsar.InitialPosition.Earliest
    )
    consumer = mine.subscribe(
        topic, "sub", consumer_type=qc.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100,
        initial_position=qc.InitialPosition.Earliest, dead_letter_policy=qc.DeadLetterPolicy(max_redeliver_count=2),
    )  # fmt: skip
    producer = theirs.create_producer(topic)
    producer.send(b"poison", properties={"p": "1"})
    producer.send(b"good")
    counts = []
    deadline = time.monotonic() + 20
    good_seen = False
    while time.monotonic() < deadline:
        try:
            message = consumer.receive(1000)
        except qc.ReceiveTimeoutError:
            if len(counts) >= 3:
                break
            continue
        if message.data() == b"good":
            consumer.acknowledge(message)
            good_seen = True
            continue
        counts.append(message.redelivery_count())
        consumer.negative_acknowledge(message)
    assert good_seen
    assert counts == [0, 1, 2]  # delivered, redelivered twice, then moved to the DLQ instead
    dead = dlq_consumer.receive(10_000)
    assert dead.data() == b"poison"
    assert dead.properties()["p"] == "1"
    assert dead.properties()["REAL_TOPIC"] == topic
    with pytest.raises(qc.ReceiveTimeoutError):
        consumer.receive(500)  # acked after the move: not redelivered again


def _enable_dedup(broker) -> None:
    request = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/namespaces/public/default/deduplication",
        data=b"true",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405):
            pytest.skip(f"broker deduplication admin endpoint answers {exc.code} (issue 4 not landed)")
        raise


@pytest.mark.slow
async def test_dedup_after_broker_restart_mid_stream_nothing_lost_nothing_doubled(broker):
    import asyncio

    _enable_dedup(broker)
    async with qc.AsyncClient(broker.service_url, operation_timeout_seconds=15) as client:
        # a durable subscription keeps the backlog: without one, the broker's background trim (every second,
        # retention 0, as Pulsar) may delete the ledger closed by the restart before the reader gets to it
        keeper = await client.subscribe("dedup", "keep", initial_position=qc.InitialPosition.Earliest)
        await keeper.close()
        producer = await client.create_producer(
            "dedup", producer_name="dedup-producer", send_timeout_millis=0, max_pending_messages=5000
        )
        futures = [producer.send_nowait(f"{i}".encode()) for i in range(1000)]
        # restart (SIGTERM + start on the same data) while those 1000 sends are in flight: the producer
        # reconnects and resends every op still pending, in order; the broker drops the ones it already has
        restart = asyncio.create_task(asyncio.to_thread(broker.restart))
        await asyncio.sleep(0.05)
        await restart
        futures += [producer.send_nowait(f"{i}".encode()) for i in range(1000, 1500)]
        ids = await asyncio.wait_for(asyncio.gather(*futures), 60)
        assert len(ids) == 1500  # every send completed; a resent duplicate gets the receipt id (-1, -1)
        assert all(i.entry_id >= 0 or i.ledger_id == -1 for i in ids)
        reader = await client.create_reader("dedup", qc.EARLIEST)
        payloads = []
        while await reader.has_message_available():
            payloads.append(int((await reader.read_next(10_000)).data()))
        assert payloads == list(range(1500))


def test_reader_seek_multi_topic_and_pattern(broker, clients):
    mine, theirs = clients
    topic = topic_name("read")
    producer = theirs.create_producer(topic, batching_enabled=True)
    for i in range(10):
        producer.send_async(f"r{i}".encode(), None)
    producer.flush()
    reader = mine.create_reader(topic, qc.EARLIEST)
    first = [reader.read_next(10_000) for _ in range(10)]
    assert [m.data() for m in first] == [f"r{i}".encode() for i in range(10)]
    assert not reader.has_message_available()
    from_fifth = mine.create_reader(topic, first[4].message_id(), start_message_id_inclusive=True)
    assert from_fifth.read_next(10_000).data() == b"r4"
    consumer = mine.subscribe(topic, "seeker", initial_position=qc.InitialPosition.Earliest)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(10_000))
    consumer.seek(qc.EARLIEST)
    assert consumer.receive(10_000).data() == b"r0"
    other = topic_name("read")
    theirs.create_producer(other).send(b"other")
    multi = mine.subscribe([topic, other], "multi", initial_position=qc.InitialPosition.Earliest)
    assert sorted(multi.receive(10_000).data() for _ in range(11))[-1] == b"r9"
    prefix = topic.rsplit("/", 1)[1][:-10]
    pattern = mine.subscribe(
        __import__("re").compile(f"persistent://public/default/{prefix}.*"), "pat",
        initial_position=qc.InitialPosition.Earliest,
    )  # fmt: skip
    assert len({pattern.receive(10_000).data() for _ in range(11)}) == 11


def test_bad_input_raises_documented_errors(broker, clients):
    mine, _ = clients
    with pytest.raises(TypeError, match="topic"):
        mine.create_producer(5)
    with pytest.raises(ValueError, match="max_pending_messages"):
        mine.create_producer("t", max_pending_messages=0)
    with pytest.raises(TypeError, match="unknown ProducerConfig option"):
        mine.create_producer("t", no_such_option=1)
    producer = mine.create_producer(topic_name("c"), max_pending_messages=1, send_timeout_millis=0)
    with pytest.raises(TypeError, match="content"):
        producer.send(1234)
    producer.close()
    with pytest.raises(qc.AlreadyClosedError):
        producer.send(b"x")
    consumer = mine.subscribe(topic_name("c"), "s")
    with pytest.raises(qc.ReceiveTimeoutError):
        consumer.receive(50)
    with pytest.raises(ValueError, match="timeout_millis"):
        consumer.receive(-1)
    topic = topic_name("c")
    mine.subscribe(topic, "exclusive")
    with pytest.raises(qc.BrokerResponseError) as info:
        mine.subscribe(topic, "exclusive")
    assert info.value.code == qc.BrokerResponseError(5, "").code  # ConsumerBusy


async def test_pattern_consumer_picks_up_new_topics(broker):
    import re

    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    async with qc.AsyncClient(broker.service_url, operation_timeout_seconds=15) as client:
        first = await client.create_producer(f"{prefix}-a")
        await first.send(b"a")
        consumer = await client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"), "pat", pattern_auto_discovery_period=1,
            initial_position=qc.InitialPosition.Earliest,
        )  # fmt: skip
        assert (await consumer.receive(10_000)).data() == b"a"
        later = await client.create_producer(f"{prefix}-b")  # created after the subscription
        await later.send(b"b")
        message = await consumer.receive(10_000)
        assert message.data() == b"b" and message.topic_name().endswith(f"{prefix}-b")
        await consumer.acknowledge(message)
        assert len(consumer.consumers) == 2


def test_reader_read_batch_takes_queued_messages_in_order_and_across_partitions(broker, clients):
    mine, theirs = clients
    topic = topic_name("rbatch")
    producer = theirs.create_producer(topic, batching_enabled=True)
    for i in range(300):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    reader = mine.create_reader(topic, qc.EARLIEST)
    got: list[bytes] = []
    while len(got) < 300:
        batch = reader.read_batch(128, 10_000)
        assert 0 < len(batch) <= 128
        got.extend(m.data() for m in batch)
    assert got == [f"b{i}".encode() for i in range(300)]
    assert reader.read_batch(10, 200) == []  # nothing left: an empty list after the timeout
    assert not reader.has_message_available()
    with pytest.raises(ValueError):
        reader.read_batch(0)

    partitioned = topic_name("rbatch-p")
    create_partitioned(broker, partitioned, 3)
    keyed = theirs.create_producer(partitioned, batching_enabled=False)
    for i in range(30):
        keyed.send(f"p{i}".encode(), partition_key=f"k{i}")
    multi_reader = mine.create_reader(partitioned, qc.EARLIEST)
    seen: list[bytes] = []
    while len(seen) < 30:
        seen.extend(m.data() for m in multi_reader.read_batch(100, 10_000))
    assert sorted(seen) == sorted(f"p{i}".encode() for i in range(30))


def test_ordering_keys_sequence_ids_and_metadata_fields_both_ways(clients):
    """What the compiled codec writes for every optional field reaches the official consumer, and what the
    official producer writes reaches ours (batched and not; ordering keys, explicit sequence ids, event times)."""
    mine, theirs = clients
    for batching in (False, True):
        topic = topic_name("fields")
        their_consumer = theirs.subscribe(topic, "t", initial_position=pulsar.InitialPosition.Earliest)
        our_consumer = mine.subscribe(topic, "o", initial_position=qc.InitialPosition.Earliest)
        ours = mine.create_producer(topic, batching_enabled=batching, producer_name=f"ours-{batching}")
        for i in range(10):
            ours.send_async(
                b"o%d" % i, None, ordering_key=f"ok{i % 2}", sequence_id=100 + i, event_timestamp=7 + i,
                properties={"p": "ü" * i} if i % 3 else None, partition_key="pk" if i % 2 else None,
            )  # fmt: skip
        ours.flush()
        official = theirs.create_producer(
            topic, batching_enabled=batching, producer_name=f"theirs-{batching}"
        )
        for i in range(10):
            official.send_async(
                b"t%d" % i, None, ordering_key=f"tk{i}", event_timestamp=70 + i, sequence_id=500 + i
            )
        official.flush()
        for consumer, timeout in ((their_consumer, 10_000), (our_consumer, 10_000)):
            got = [consumer.receive(timeout) for _ in range(20)]
            for message in got:
                consumer.acknowledge(message)
            assert [m.data() for m in got] == [b"o%d" % i for i in range(10)] + [
                b"t%d" % i for i in range(10)
            ]
            keys = [_as_bytes(m.ordering_key()) for m in got]  # the official client returns str, ours bytes
            assert keys == [f"ok{i % 2}".encode() for i in range(10)] + [f"tk{i}".encode() for i in range(10)]
            assert [m.event_timestamp() for m in got] == [7 + i for i in range(10)] + [
                70 + i for i in range(10)
            ]
            assert [m.properties() for m in got[:10]] == [{"p": "ü" * i} if i % 3 else {} for i in range(10)]
            assert [m.producer_name() for m in (got[0], got[10])] == [
                f"ours-{batching}",
                f"theirs-{batching}",
            ]
        assert [m.sequence_id() for m in got] == [100 + i for i in range(10)] + [500 + i for i in range(10)]
        for closable in (ours, official, their_consumer, our_consumer):
            closable.close()


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value
