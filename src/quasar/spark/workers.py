"""Do Spark's Python workers find Quasar? A one-task probe job run once per SparkContext by
:func:`quasar.spark.register`.

Spark starts its Python workers (and the planner processes that call ``QuasarDataSource.reader``/``writer``)
with the interpreter named by the environment variable ``PYSPARK_PYTHON`` when the SparkContext starts
(``python3`` from ``PATH`` without it; ``spark-submit`` and cluster managers also read the setting
``spark.pyspark.python``), not with the interpreter that runs the driver script. Without this check, a worker
that lacks ``quasar`` fails the first read or write with an executor traceback ending in
``ModuleNotFoundError: No module named 'quasar'``; with it, ``register(spark)`` raises
:class:`~quasar.spark.errors.WorkerSetupError` naming the setting that fixes it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from quasar.spark.errors import WorkerSetupError

__all__ = ["check_workers", "probe"]

#: Attribute set on a SparkContext whose workers passed the probe (the probe runs once per context).
_CHECKED = "_quasar_workers_checked"


def probe(_: Any) -> str:
    """Runs in a Python worker. Pickled *by reference* (``quasar.spark.workers.probe``): unpickling it imports
    the ``quasar.spark`` package (and with it the data source), so a worker without ``quasar`` fails exactly
    as it would on the first read or write."""
    return sys.executable


def _last_line(exc: BaseException) -> str:
    """The most telling line of a worker failure (Spark wraps the Python traceback in JVM text)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "No module named" in line or line.startswith(("ModuleNotFoundError", "ImportError")):
            return line
    return lines[0][:300] if lines else type(exc).__name__


def check_workers(spark: Any) -> str:
    """Run the probe as one task; the worker's ``sys.executable`` ("" on Spark Connect, where the probe cannot
    run from the client).

    Args:
        spark: a SparkSession (classic, not Spark Connect).

    Raises:
        WorkerSetupError: the task failed (the worker's Python cannot import ``quasar``, or cannot be
            started); the message names ``PYSPARK_PYTHON`` / ``spark.pyspark.python``, the worker's and the
            driver's interpreters, and the worker's error.
    """
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001  # Spark Connect has no SparkContext: its workers run on the server
        return ""
    checked = getattr(context, _CHECKED, None)
    if checked is not None:
        return str(checked)
    worker_python = getattr(context, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON", "python3")
    try:
        found = context.parallelize([0], 1).map(probe).collect()[0]
    except Exception as exc:  # noqa: BLE001  # Py4JJavaError / PythonException: any worker failure
        raise WorkerSetupError(
            f"Spark's Python workers cannot import quasar: they run {worker_python!r} (PYSPARK_PYTHON), the "
            f"driver runs {sys.executable!r}. Set the environment variable PYSPARK_PYTHON to a Python that has "
            f"quasar installed before the SparkSession starts, e.g. os.environ['PYSPARK_PYTHON'] = "
            f"sys.executable (with spark-submit or a cluster: the setting spark.pyspark.python); "
            f"worker error: {_last_line(exc)}"
        ) from None
    setattr(context, _CHECKED, found)
    return str(found)
