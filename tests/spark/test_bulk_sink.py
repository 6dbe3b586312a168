"""The bulk sink against a real broker process: it writes what the message-by-message path writes (same rows,
keys on the same partitions, properties, event times), in batched, compressed entries that the official
client reads; a replayed streaming micro-batch is dropped whole by broker deduplication."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.spark.helpers import admin_post, client, create_topic, new_topic, options, produce

pytestmark = pytest.mark.interop

ROWS = 240


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("bulk-sink") / "data")
    process.start()
    yield process
    process.stop()


def _read(spark, broker, topic):
    return spark.read.format("quasar").options(**options(broker, topic)).load().collect()


def _frame(spark, shuffle: bool = True):
    when = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    rows = [
        (
            f"value-{i}-" + "x" * (i % 50),
            None if i % 7 == 0 else f"key-{i % 11}",
            None if i % 5 == 0 else {"row": str(i), "kind": "bulk"},
            None if i % 3 == 0 else when,
        )
        for i in range(ROWS)
    ]
    schema = "value STRING, key STRING, properties MAP<STRING,STRING>, eventTime TIMESTAMP"
    df = spark.createDataFrame(rows, schema)
    return (df.repartition(2) if shuffle else df), rows


def _content(rows):
    return sorted(
        (
            r.value,
            r.key,
            sorted((r.properties or {}).items()),
            r.eventTime and r.eventTime.replace(tzinfo=UTC),
        )
        for r in rows
    )


def test_bulk_path_writes_what_the_message_path_writes(spark, broker):
    df, rows = _frame(spark)
    bulk, single = new_topic("bulk"), new_topic("single")
    for topic in (bulk, single):
        create_topic(broker, topic, partitions=3)
    batched = {"quasar.producer.compressionType": "LZ4", "quasar.producer.batchingMaxMessages": "9"}
    df.write.format("quasar").options(**options(broker, bulk, **batched)).mode("append").save()
    df.write.format("quasar").options(
        **options(broker, single, **{"quasar.producer.batchingEnabled": "false"})
    ).mode("append").save()

    written, reference = _read(spark, broker, bulk), _read(spark, broker, single)
    assert len(written) == len(reference) == ROWS
    assert _content(written) == _content(reference)
    assert sorted(r.value.decode() for r in written) == sorted(v for v, _, _, _ in rows)  # byte for byte
    # a key lands on the partition the client's router gives it, on both paths
    partition_of = {r.key: r.partition for r in reference if r.key is not None}
    assert all(r.partition == partition_of[r.key] for r in written if r.key is not None)
    assert len({r.partition for r in written}) == 3  # unkeyed rows spread round robin
    # batched entries of at most 9 messages on the bulk path, one message per entry on the other
    assert max(r.batchIndex for r in written) == 8
    assert {r.batchIndex for r in reference} == {-1} or max(r.batchIndex for r in reference) <= 0


def test_official_client_reads_the_bulk_entries(spark, broker):
    import pulsar

    topic = new_topic("official")
    create_topic(broker, topic)
    df, rows = _frame(spark, shuffle=False)
    df.coalesce(1).write.format("quasar").options(
        **options(broker, topic, **{"quasar.producer.compressionType": "ZSTD"})
    ).mode("append").save()
    c = client(broker)
    try:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        for _ in range(ROWS):
            message = reader.read_next(timeout_millis=10_000)
            got.append(
                (
                    message.data().decode(),
                    message.partition_key() or None,
                    message.properties() or None,
                    message.event_timestamp() or None,
                )
            )
        assert not reader.has_message_available()
    finally:
        c.close()
    ms = int(datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC).timestamp() * 1000)
    expected = [(v, k, p, None if t is None else ms) for v, k, p, t in rows]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert [value for value, *_ in got] == [v for v, _, _, _ in rows]  # one task: the rows' order


def test_replayed_micro_batch_is_dropped_whole(spark, broker, tmp_path):
    assert admin_post(broker, "/admin/v2/namespaces/public/default/deduplication", True) in (200, 204)
    source, sink = new_topic("replay-src"), new_topic("replay-dst")
    create_topic(broker, source, partitions=2)
    create_topic(broker, sink, partitions=2)
    produce(broker, source, [f"r{i}".encode() for i in range(ROWS)], keys=[f"k{i % 13}" for i in range(ROWS)])
    checkpoint = tmp_path / "checkpoint"

    def run():
        query = (
            spark.readStream.format("quasar")
            .options(**options(broker, source, startingOffsets="earliest"))
            .load()
            # a third of the rows unkeyed: they go round robin, which a replay must repeat exactly
            .selectExpr("IF(substr(CAST(value AS STRING), -1) IN ('0', '3', '6'), NULL, key) AS key", "value")
            .writeStream.format("quasar")
            .options(**options(broker, sink, **{"quasar.producer.batchingMaxMessages": "16"}))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress]

    assert sum(run()) == ROWS
    first = _read(spark, broker, sink)
    assert len(first) == ROWS and max(r.batchIndex for r in first) > 0  # batched entries
    # forget that batch 0 was committed: Spark runs it again, with the same batch id and rows
    shutil.rmtree(checkpoint / "commits")
    assert sum(run()) == ROWS  # the micro-batch really was written a second time
    again = _read(spark, broker, sink)
    assert sorted(r.value for r in again) == sorted(r.value for r in first)  # ... and dropped whole
