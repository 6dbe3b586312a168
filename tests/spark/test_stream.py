"""Structured Streaming reads: ``trigger(availableNow=True)``, admission control, restarts from a checkpoint."""

from __future__ import annotations

import json
import urllib.request

import pytest

from quasar.spark.stream import ADMISSION_CONTROL
from tests.spark.helpers import create_topic, new_topic, options, produce

pytestmark = pytest.mark.interop


def _run_available_now(spark, broker, topic, checkpoint, output, **extra):
    query = (
        spark.readStream.format("quasar")
        .options(**options(broker, topic, startingOffsets="earliest", **extra))
        .load()
        .selectExpr("CAST(value AS STRING) AS v", "partition")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(120)
    assert finished, f"query still running: {query.recentProgress[-1:]}"
    assert query.exception() is None, query.exception()
    return [p["numInputRows"] for p in query.recentProgress]


def test_available_now_with_restarts_neither_loses_nor_repeats(spark, broker, tmp_path):
    topic = new_topic()
    create_topic(broker, topic, partitions=2)
    produce(broker, topic, [f"a{i}".encode() for i in range(40)], keys=[f"k{i}" for i in range(40)])
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

    batches = _run_available_now(spark, broker, topic, checkpoint, output, maxMessagesPerTrigger="15")
    assert sum(batches) == 40
    if ADMISSION_CONTROL:  # pyspark 4.2+ honours the cap under AvailableNow
        assert max(batches) <= 15 and len([b for b in batches if b]) >= 3

    produce(broker, topic, [f"b{i}".encode() for i in range(25)], keys=[f"k{i}" for i in range(25)])
    assert sum(_run_available_now(spark, broker, topic, checkpoint, output)) == 25
    # a restart with nothing new reads nothing
    assert sum(_run_available_now(spark, broker, topic, checkpoint, output)) == 0

    values = [row.v for row in spark.read.parquet(str(output)).collect()]
    expected = [f"a{i}" for i in range(40)] + [f"b{i}" for i in range(25)]
    assert sorted(values) == sorted(expected)  # each exactly once

    offsets = sorted(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    assert list(last["positions"]) == sorted(last["positions"])  # sorted keys: Spark compares the text
    assert len(last["positions"]) == 2


def test_processing_time_query_follows_new_data_from_latest(spark, broker, tmp_path):
    topic = new_topic()
    produce(broker, topic, [b"before"])  # older than the query's 'latest' start: not read
    query = (
        spark.readStream.format("quasar")
        .options(**options(broker, topic))  # startingOffsets defaults to latest for streams
        .load()
        .selectExpr("CAST(value AS STRING) AS v", "key", "properties")
        .writeStream.format("memory")
        .queryName("stream_latest")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        produce(
            broker, topic, [f"n{i}".encode() for i in range(10)], props=[{"n": str(i)} for i in range(10)]
        )
        query.processAllAvailable()
        rows = spark.sql("SELECT * FROM stream_latest").collect()
    finally:
        query.stop()
    assert sorted(row.v for row in rows) == sorted(f"n{i}" for i in range(10))
    assert {row.properties["n"] for row in rows} == {str(i) for i in range(10)}


def test_commit_moves_the_retention_subscription(spark, broker):
    topic = new_topic()
    produce(broker, topic, [f"a{i}".encode() for i in range(30)])  # 3 entries (batches of 10)
    query = (
        spark.readStream.format("quasar")
        .options(**options(broker, topic, startingOffsets="earliest", subscription="spark-retention"))
        .load()
        .writeStream.format("memory")
        .queryName("stream_retention")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    local = topic.split("persistent://", 1)[1]

    def backlog():
        with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/{local}/stats") as response:
            return json.load(response)["subscriptions"]["spark-retention"]["msgBacklog"]

    try:
        query.processAllAvailable()
        assert backlog() == 3  # created at the start; batch 0 is not committed yet (commit lags a batch)
        produce(broker, topic, [f"b{i}".encode() for i in range(4)], batching=False)  # 4 more entries
        query.processAllAvailable()
        # planning batch 1 committed batch 0: its 3 entries are released; the last batch's entries (all 4, or
        # fewer if the trigger saw them in two batches) are still held, as commit lags one batch
        assert 1 <= backlog() <= 4
        assert spark.sql("SELECT count(*) AS n FROM stream_retention").first().n == 34
    finally:
        query.stop()
