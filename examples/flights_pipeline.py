"""The flights pipeline, as a script: Spark Structured Streaming over a Quasar topic with the ``quasar`` connector.

Run a broker and fill the flights topic first::

    quasar standalone &
    quasar demo flights --limit 20000
    python examples/flights_pipeline.py --limit 20000     # same as: quasar demo flights-pipeline --limit 20000

What it shows, step by step (the pipeline itself is :func:`quasar.cli.pipeline.build_stats`, shared with the
``quasar demo flights-pipeline`` command):

1. a SparkSession (``local[2]``) and ``register(spark)``: format ``quasar`` is available;
2. ``spark.readStream.format("quasar")``: the flights topic from its first message, as rows of
   ``key, value, topic, partition, messageId, ..., eventTime, properties``;
3. ``from_json`` on ``value``, a 1-hour watermark on ``eventTime``, per-carrier 1-hour windows;
4. ``writeStream.format("quasar")`` (exactly-once on a topic with deduplication) and ``format("parquet")``;
5. the per-carrier totals, compared with pandas over the same rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from quasar.cli.pipeline import PipelineConfig, compare_totals, pandas_totals, run_flights_pipeline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--topic", default="persistent://public/default/flights")
    parser.add_argument("--limit", type=int, default=None, help="rows given to `quasar demo flights --limit`")
    args = parser.parse_args()

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers must import quasar too
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    config = PipelineConfig(
        service_url=args.service_url, admin_url=args.admin_url, topic=args.topic, limit=args.limit
    )
    totals = run_flights_pipeline(spark, config)  # registers format "quasar", runs both queries
    for carrier, t in sorted(totals.items(), key=lambda item: -item[1].flights):
        mean = "-" if t.mean_dep_delay is None else f"{t.mean_dep_delay:7.2f}"
        share = "-" if t.share_delayed is None else f"{t.share_delayed:6.1%}"
        print(f"{carrier}  flights {t.flights:7,}  mean dep. delay {mean} min  delayed > 15 min {share}")
    problems = compare_totals(totals, pandas_totals(args.limit))
    print("equal to pandas" if not problems else "\n".join(["differs from pandas:", *problems]))
    spark.stop()
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
