"""Spark connector benchmark (issue 23): the ``quasar`` format beside Parquet files of the same rows.

1. Starts a ``quasar standalone`` subprocess in a temporary directory (unless ``--service-url``), creates a
   ``--partitions``-partition topic (default 4) and loads the 336,776 flights of ``quasar demo flights``
   into it the way the demo does (official client, LZ4, batches of up to 1000, key = carrier, event time,
   one property); ``--limit`` loads fewer.
2. Writes Parquet files of the same rows (``key`` string, ``value`` binary; one file per partition) with
   pyarrow.
3. In one Spark session (``local[2]``, the venv's python on the workers) runs each workload once as a
   warm-up, then ``--runs`` times (default 3) on each side, and prints the median times and the ratio
   (Parquet time / Quasar time; 1.0 = as fast as Parquet):

   | workload | Quasar side | Parquet side |
   |---|---|---|
   | scan | ``sum(length(value))`` of ``format("quasar")`` | the same of ``read.parquet`` |
   | from_json | ``from_json(value)`` -> groupBy carrier: count, avg(dep_delay) (results must be equal) | same |
   | write | ``df.write.format("quasar").mode("append")`` of key + value into a new topic | ``write.parquet`` |
   | stream | ``readStream`` ``availableNow`` into the ``noop`` sink | a Parquet file stream, same |

Numbers are for comparison on one machine in one sitting; no test asserts them.

Usage: ``python benchmarks/spark.py [--limit N] [--runs 3] [--partitions 4]`` (``make bench`` runs it).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from quasar.testing.broker_process import BrokerProcess

FLIGHT_FIELDS = (
    "id INT, year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay INT, arr_time INT, "
    "sched_arr_time INT, arr_delay INT, carrier STRING, flight INT, tailnum STRING, origin STRING, "
    "dest STRING, air_time INT, distance INT, hour INT, minute INT, time_hour STRING"
)


def _load(
    service_url: str, admin_url: str, topic: str, partitions: int, limit: int | None
) -> tuple[int, float]:
    """Load the flights into ``topic`` as ``quasar demo flights`` does; returns (messages, seconds)."""
    import pulsar

    from quasar.cli.demo import ensure_partitioned_topic
    from quasar.cli.demo_topic import TopicName
    from quasar.cli.flights import load_flights

    sample = load_flights(limit)
    ensure_partitioned_topic(admin_url, TopicName.parse(topic), partitions)
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    failures: list[object] = []
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            compression_type=pulsar.CompressionType.LZ4,
            block_if_queue_full=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=10,
            max_pending_messages=10_000,
            max_pending_messages_across_partitions=50_000,
        )
        start = time.perf_counter()
        properties = {"run": "bench"}
        for i in range(len(sample)):
            producer.send_async(
                sample.payloads[i],
                lambda result, _id: result == pulsar.Result.Ok or failures.append(result),
                properties=properties,
                partition_key=sample.carriers[i],
                event_timestamp=sample.event_times_ms[i],
            )
        producer.flush()
        elapsed = time.perf_counter() - start
    finally:
        client.close()
    if failures:
        raise SystemExit(f"{len(failures)} sends failed: {failures[0]}")
    return len(sample), elapsed


def _write_parquet(directory: Path, partitions: int, limit: int | None) -> None:
    """The same rows as Parquet: one file per partition (rows routed as the topic's key hash is not needed:
    every query here is order-free)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from quasar.cli.flights import load_flights

    sample = load_flights(limit)
    directory.mkdir(parents=True)
    n = len(sample)
    for p in range(partitions):
        rows = range(p, n, partitions)
        table = pa.table(
            {
                "key": pa.array([sample.carriers[i] for i in rows], pa.string()),
                "value": pa.array([sample.payloads[i] for i in rows], pa.binary()),
            }
        )
        pq.write_table(table, directory / f"part-{p}.parquet")


def _median(fn: Callable[[], object], runs: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _workloads(spark: Any, topic: str, opts: dict[str, str], parquet_dir: Path, work: Path) -> dict[str, Any]:
    """name -> (Quasar run, Parquet run, compare results) of each workload (see the module docstring)."""
    from pyspark.sql import functions as F

    def quasar_df():
        return spark.read.format("quasar").options(topic=topic, **opts).load()

    def parquet_df():
        return spark.read.parquet(str(parquet_dir))

    def scan(df_fn):
        return lambda: df_fn().select(F.sum(F.length("value"))).collect()[0][0]

    def from_json(df_fn):
        def run():
            flight = F.from_json(F.col("value").cast("string"), FLIGHT_FIELDS).alias("f")
            rows = (
                df_fn()
                .select(flight)
                .groupBy("f.carrier")
                .agg(F.count(F.lit(1)).alias("flights"), F.avg("f.dep_delay").alias("avg_dep_delay"))
                .collect()
            )
            return sorted((r[0], r[1], round(r[2], 9)) for r in rows)

        return run

    targets = []

    def write_quasar():
        target = f"{topic}-out-{len(targets)}"
        targets.append(target)
        parquet_df().select("key", "value").write.format("quasar").options(topic=target, **opts).mode(
            "append"
        ).save()

    def write_parquet():
        out = work / f"out-{uuid.uuid4().hex[:8]}"
        parquet_df().select("key", "value").write.parquet(str(out))

    def stream(reader_fn):
        def run():
            checkpoint = work / f"ckpt-{uuid.uuid4().hex[:8]}"
            query = (
                reader_fn()
                .writeStream.format("noop")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(600)
            if query.exception() is not None:
                raise SystemExit(f"stream failed: {query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress)

        return run

    def quasar_stream():
        return (
            spark.readStream.format("quasar").options(topic=topic, startingOffsets="earliest", **opts).load()
        )

    def parquet_stream():
        return spark.readStream.schema("key STRING, value BINARY").parquet(str(parquet_dir))

    workloads = {
        "scan": (scan(quasar_df), scan(parquet_df), True),
        "from_json": (from_json(quasar_df), from_json(parquet_df), True),
        "write": (write_quasar, write_parquet, False),
        "stream": (stream(quasar_stream), stream(parquet_stream), True),
    }
    return workloads


@click.command()
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Load only the first N flights.")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--master", default="local[2]", show_default=True)
@click.option("--only", multiple=True, type=click.Choice(["scan", "from_json", "write", "stream"]))
@click.option("--service-url", default=None, help="Use this broker instead of starting one.")
@click.option("--admin-url", default=None, help="Admin URL of --service-url's broker.")
def main(
    limit: int | None,
    partitions: int,
    runs: int,
    master: str,
    only: tuple[str, ...],
    service_url: str | None,
    admin_url: str | None,
) -> None:
    """Times of four Spark workloads on Quasar and on Parquet files of the same rows (see the module doc)."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from quasar.spark import register

    work = Path(tempfile.mkdtemp(prefix="quasar-spark-bench-"))
    broker = None
    spark = None
    try:
        if service_url is None:
            broker = BrokerProcess(work / "broker").start()
            service_url, admin_url = broker.service_url, broker.admin_url
        elif admin_url is None:
            raise click.UsageError("--admin-url is needed with --service-url")
        topic = f"persistent://public/default/flights-bench-{uuid.uuid4().hex[:8]}"
        count, load_s = _load(service_url, admin_url, topic, partitions, limit)
        print(f"loaded {count:,} flights into {topic} ({partitions} partitions) in {load_s:.1f} s")
        parquet_dir = work / "flights.parquet"
        _write_parquet(parquet_dir, partitions, limit)

        spark = (
            SparkSession.builder.master(master)
            .appName("quasar-spark-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        opts = {"service.url": service_url, "admin.url": admin_url}
        workloads = _workloads(spark, topic, opts, parquet_dir, work)
        print(
            f"\n{'workload':<10} {'Quasar s':>9} {'Parquet s':>10} {'ratio':>6}  (median of {runs}, {master})"
        )
        for name, (q_fn, p_fn, compare) in workloads.items():
            if only and name not in only:
                continue
            q_fn(), p_fn()  # warm-up: workers, codegen, caches
            q_s, q_result = _median(q_fn, runs)
            p_s, p_result = _median(p_fn, runs)
            note = ""
            if compare and q_result != p_result:
                note = f"  RESULTS DIFFER: {str(q_result)[:80]} vs {str(p_result)[:80]}"
            print(f"{name:<10} {q_s:>9.2f} {p_s:>10.2f} {p_s / q_s:>6.2f}{note}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
