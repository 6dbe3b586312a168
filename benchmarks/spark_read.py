"""Spark batch-read benchmark: the ``quasar`` connector beside Parquet, same rows, same Spark session.

1. Fills a fresh ``--partitions``-partition topic (default 4) with ``--messages`` messages (default 1,000,000)
   of ``--payload`` bytes (default 100) through the official client, batching on (1000 per batch), keyed.
2. Reads it with ``spark.read.format("quasar")`` into Spark's ``noop`` sink (every column materialised, nothing
   written) and times it: connector rows/s. The first read of the session pays for worker start-up, so a
   1000-message topic is read first and not counted (``--no-warmup`` to skip it).
3. Writes the same rows (all 12 columns) to Parquet, reads them back into ``noop`` and times that.
4. Prints both rates and their ratio (Parquet / connector).

Spark runs ``local[2]`` (``--master``) with the UI off. Unless ``--service-url`` is given, a ``quasar
standalone`` subprocess is started in a temporary directory and stopped at the end. Numbers are for
comparison only; no test asserts them.

Usage: ``python benchmarks/spark_read.py [--messages N] [--partitions P] [--payload BYTES]``
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
import warnings
from pathlib import Path

import click
import pulsar

from quasar.testing.broker_process import BrokerProcess


def _fill(
    service_url: str, admin_url: str, topic: str, partitions: int, messages: int, payload: int
) -> float:
    local = topic.split("://", 1)[1]
    request = urllib.request.Request(
        f"{admin_url}/admin/v2/persistent/{local}/partitions",
        data=json.dumps(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_allowed_size_in_bytes=1 << 20,
            batching_max_publish_delay_ms=10,
            block_if_queue_full=True,
            max_pending_messages=20_000,
            max_pending_messages_across_partitions=80_000,
        )
        body = os.urandom(payload)
        failures = []
        start = time.perf_counter()
        for i in range(messages):
            producer.send_async(
                body,
                lambda result, _id: result == pulsar.Result.Ok or failures.append(result),
                partition_key=str(i),
            )
        producer.flush()
        elapsed = time.perf_counter() - start
        if failures:
            raise SystemExit(f"{len(failures)} sends failed: {failures[0]}")
        return elapsed
    finally:
        client.close()


def _timed_noop(df) -> float:
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


@click.command()
@click.option("--messages", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--payload", type=click.IntRange(min=1), default=100, show_default=True, help="Bytes per message."
)
@click.option("--master", default="local[2]", show_default=True)
@click.option("--service-url", default=None, help="Use this broker instead of starting one.")
@click.option("--admin-url", default=None, help="Admin URL of --service-url's broker.")
@click.option("--warmup/--no-warmup", default=True, show_default=True)
def main(
    messages: int,
    partitions: int,
    payload: int,
    master: str,
    service_url: str | None,
    admin_url: str | None,
    warmup: bool,
) -> None:
    """Rows/s of a batch read with the quasar connector vs. Parquet (see the module docstring)."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from quasar.spark import register

    work = Path(tempfile.mkdtemp(prefix="quasar-spark-bench-"))
    broker = None
    try:
        if service_url is None:
            broker = BrokerProcess(work / "broker").start()
            service_url, admin_url = broker.service_url, broker.admin_url
        elif admin_url is None:
            raise click.UsageError("--admin-url is needed with --service-url")
        topic = f"persistent://public/default/spark-bench-{uuid.uuid4().hex[:8]}"
        produce_s = _fill(service_url, admin_url, topic, partitions, messages, payload)
        print(f"filled {topic}: {messages:,} x {payload} B in {partitions} partitions in {produce_s:.1f} s")

        spark = (
            SparkSession.builder.master(master)
            .appName("quasar-spark-read-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        connector = (
            spark.read.format("quasar")
            .option("service.url", service_url)
            .option("admin.url", admin_url)
            .option("topic", topic)
            .load()
        )
        if warmup:  # a full read of a small topic: starts the Python workers and loads the connector
            small = f"{topic}-warmup"
            _fill(service_url, admin_url, small, partitions, 1000, payload)
            _timed_noop(
                spark.read.format("quasar")
                .options(**{"service.url": service_url, "admin.url": admin_url, "topic": small})
                .load()
            )
        connector_s = _timed_noop(connector)
        parquet_dir = work / "rows.parquet"
        connector.write.parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))
        rows = parquet.count()
        if rows != messages:
            raise SystemExit(f"Parquet holds {rows:,} rows, expected {messages:,}")
        parquet_s = _timed_noop(parquet)
        connector_rate, parquet_rate = messages / connector_s, messages / parquet_s
        print(f"connector: {messages:,} rows in {connector_s:.2f} s = {connector_rate:,.0f} rows/s")
        print(f"parquet:   {messages:,} rows in {parquet_s:.2f} s = {parquet_rate:,.0f} rows/s")
        print(
            f"ratio parquet/connector: {parquet_rate / connector_rate:.1f}x ({master}, {partitions} partitions)"
        )
        spark.stop()
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
