"""Batch reads of topics filled by the official pulsar-client, and bad input, against a real broker."""

from __future__ import annotations

import base64
import json
import socket

import pulsar
import pytest

from tests.spark.helpers import create_topic, new_topic, options, produce

pytestmark = pytest.mark.interop


def test_batch_read_unpacks_batches_with_keys_properties_and_ids(spark, broker):
    topic = new_topic()
    create_topic(broker, topic, partitions=2)
    n = 60
    values = [f"v{i}".encode() for i in range(n)]
    keys = [f"k{i % 7}" for i in range(n)]
    props = [{"i": str(i), "kind": "batched"} for i in range(n)]
    produce(broker, topic, values, keys=keys, props=props, event_ms=[1_700_000_000_000 + i for i in range(n)])
    produce(broker, topic, [b"single"], batching=False, keys=["solo"], props=[{"kind": "single"}])

    rows = spark.read.format("quasar").options(**options(broker, topic)).load().collect()

    assert len(rows) == n + 1
    by_value = {row.value: row for row in rows}
    assert len(by_value) == n + 1
    for i in range(n):
        row = by_value[f"v{i}".encode()]
        assert row.key == keys[i]
        assert row.properties == props[i]
        assert row.topic == topic
        assert row.eventTime.timestamp() * 1000 == 1_700_000_000_000 + i
        assert row.batchIndex >= 0  # unpacked from a batch entry
        message_id = pulsar.MessageId.deserialize(row.messageId)
        assert (message_id.ledger_id(), message_id.entry_id(), message_id.batch_index()) == (
            row.ledgerId,
            row.entryId,
            row.batchIndex,
        )
        assert message_id.partition() == row.partition
    single = by_value[b"single"]
    assert single.batchIndex == -1 and single.properties == {"kind": "single"} and single.eventTime is None
    assert {row.partition for row in rows} <= {0, 1}
    assert all(row.redeliveryCount == 0 and row.publishTime is not None for row in rows)
    ids = {(row.partition, row.ledgerId, row.entryId, row.batchIndex) for row in rows}
    assert len(ids) == n + 1


def test_starting_and_ending_offsets_from_message_ids(spark, broker):
    topic = new_topic()
    produce(broker, topic, [f"m{i}".encode() for i in range(30)])

    def reader():  # DataFrameReader.option() mutates the reader: a fresh one per query
        return spark.read.format("quasar").options(**options(broker, topic))

    rows = sorted(reader().load().collect(), key=lambda r: (r.ledgerId, r.entryId, r.batchIndex))
    assert [r.value for r in rows] == [f"m{i}".encode() for i in range(30)]
    start, stop = rows[12], rows[25]
    # start inclusive (the serialized messageId column, pulsar-spark's byte list), end exclusive
    sliced = (
        reader()
        .option("startingOffsets", json.dumps({topic: list(start.messageId)}))
        .option("endingOffsets", json.dumps({topic: f"{stop.ledgerId}:{stop.entryId}:{stop.batchIndex}"}))
    )
    assert sorted(r.value for r in sliced.load().collect()) == sorted(f"m{i}".encode() for i in range(12, 25))
    b64 = "b64:" + base64.b64encode(start.messageId).decode()
    tail = reader().option("startingOffsets", json.dumps({topic.rsplit("/", 1)[1]: b64})).load()
    assert tail.count() == 18


def test_min_partitions_splits_the_read(spark, broker):
    topic = new_topic()
    produce(broker, topic, [f"m{i}".encode() for i in range(50)], batching=False)
    df = spark.read.format("quasar").options(**options(broker, topic, minPartitions="4")).load()
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.value for r in df.collect()) == sorted(f"m{i}".encode() for i in range(50))


def test_trimmed_start_fails_or_is_skipped(spark, broker):
    topic = new_topic()
    produce(broker, topic, [b"a", b"b", b"c"], batching=False)
    first = spark.read.format("quasar").options(**options(broker, topic)).load().first()
    # a start before the topic's first ledger: those messages are gone
    gone = json.dumps({topic: f"{first.ledgerId - 1}:0"})
    strict = spark.read.format("quasar").options(**options(broker, topic, startingOffsets=gone))
    with pytest.raises(Exception, match=r"DataLossError.*failOnDataLoss=false"):
        strict.load().collect()
    tolerant = spark.read.format("quasar").options(**options(broker, topic, startingOffsets=gone))
    assert sorted(r.value for r in tolerant.option("failOnDataLoss", "false").load().collect()) == [
        b"a",
        b"b",
        b"c",
    ]


def test_topic_that_does_not_exist(spark, broker):
    missing = new_topic("missing")
    with pytest.raises(Exception, match=f"TopicNotFoundError: topic {missing} does not exist"):
        spark.read.format("quasar").options(**options(broker, missing)).load().collect()


def test_broker_down_fails_fast_naming_the_url(spark):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    opts = {
        "service.url": f"pulsar://127.0.0.1:{port}",
        "admin.url": f"http://127.0.0.1:{port}",
        "topic": "t",
    }
    with pytest.raises(Exception, match=r"BrokerUnavailableError.*'admin.url'"):
        spark.read.format("quasar").options(**opts).load().collect()


def test_bad_options_fail_at_planning(spark, broker):
    def reader():
        return spark.read.format("quasar").options(**options(broker, new_topic()))

    with pytest.raises(Exception, match="OptionError: startingOffsets"):
        reader().option("startingOffsets", "{oops").load().collect()
    with pytest.raises(Exception, match=r"unknown read option 'bogus'.*valid options"):
        reader().option("bogus", "1").load().collect()
