"""The write contract against a real broker process: save modes (Append writes every row once, every other
mode fails on the driver and sends nothing), and workers that cannot import quasar (the setting-naming error).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.spark.helpers import create_topic, new_topic, options

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("write-contract") / "data")
    process.start()
    yield process
    process.stop()


def _values(spark, broker, topic) -> list[str]:
    rows = spark.read.format("quasar").options(**options(broker, topic)).load().select("value").collect()
    return sorted(r.value.decode() for r in rows)


@pytest.fixture(scope="module")
def target(spark, broker) -> tuple[str, list[str]]:
    """A topic holding 50 rows written with .mode("append") (the one mode that writes)."""
    topic = new_topic("modes")
    create_topic(broker, topic, partitions=2)
    rows = [(f"v{i}", f"k{i % 5}") for i in range(50)]
    df = spark.createDataFrame(rows, "value STRING, key STRING")
    df.write.format("quasar").options(**options(broker, topic)).mode("append").save()
    return topic, sorted(v for v, _ in rows)


def test_append_writes_every_row_once(spark, broker, target):
    topic, expected = target
    assert _values(spark, broker, topic) == expected


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("overwrite", r'\.mode\("append"\)'),  # refused by the sink, naming the fix
        ("ignore", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),  # refused by Spark 4 before the sink is asked
        ("errorifexists", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
        (None, "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),  # Spark's default mode, ErrorIfExists
    ],
)
def test_other_modes_fail_and_send_nothing(spark, broker, target, mode, error):
    topic, expected = target
    writer = spark.createDataFrame([("new",)], "value STRING").write.format("quasar")
    writer = writer.options(**options(broker, topic))
    if mode is not None:
        writer = writer.mode(mode)
    with pytest.raises(Exception, match=error):
        writer.save()
    assert _values(spark, broker, topic) == expected  # the topic is unchanged


def test_overwrite_is_refused_on_the_driver_before_any_task(spark, broker):
    from quasar.spark import SaveModeError
    from quasar.spark.datasource import QuasarDataSource

    source = QuasarDataSource(options(broker, new_topic("never")))
    schema = spark.createDataFrame([("x",)], "value STRING").schema
    with pytest.raises(SaveModeError, match=r'\.mode\("append"\)'):
        source.writer(schema, True)
    assert source.writer(schema, False).columns == ("value",)


def test_workers_without_quasar_get_the_setting_naming_error(spark, tmp_path):
    """A worker interpreter that has pyspark but not quasar: this venv's python with ``-S`` (no site-packages,
    so no editable-install hook) and only the site-packages directory on PYTHONPATH."""
    from quasar.spark import WorkerSetupError
    from quasar.spark.workers import _CHECKED, check_workers

    site = sysconfig.get_paths()["purelib"]
    worker = tmp_path / "python-without-quasar"
    worker.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    worker.chmod(0o755)
    context = spark.sparkContext
    saved_exec, saved_check = context.pythonExec, getattr(context, _CHECKED, None)
    context.pythonExec = str(worker)
    if saved_check is not None:
        delattr(context, _CHECKED)
    try:
        with pytest.raises(WorkerSetupError, match="PYSPARK_PYTHON") as caught:
            check_workers(spark)
        assert "No module named 'quasar'" in str(caught.value)
        assert str(worker) in str(caught.value)
    finally:
        context.pythonExec = saved_exec
        if saved_check is not None:
            setattr(context, _CHECKED, saved_check)
    # the session's own workers pass (and the result is cached per SparkContext)
    assert os.path.basename(check_workers(spark)).startswith("python")
