"""Quasar's PySpark connector: format ``quasar`` for batch and Structured Streaming reads and writes.

    from quasar.spark import register
    register(spark)
    df = (spark.readStream.format("quasar")
          .option("service.url", "pulsar://127.0.0.1:6650").option("admin.url", "http://127.0.0.1:8080")
          .option("topic", "flights").option("startingOffsets", "earliest").load())

Modules: :mod:`~quasar.spark.datasource` (the DataSource), :mod:`~quasar.spark.options` (option table),
:mod:`~quasar.spark.positions` (message positions and checkpoint offsets), :mod:`~quasar.spark.reader`
(batch reads and planning), :mod:`~quasar.spark.stream` (streaming source), :mod:`~quasar.spark.writer`
(sink and its exactly-once contract), :mod:`~quasar.spark.schema` (read schema), and
:mod:`~quasar.spark._client`, the only module that talks to the broker (through Quasar's own client,
:mod:`quasar.client`, and the admin REST API), with :mod:`~quasar.spark.passthrough` for its client options.

Needs pyspark >= 4.0 and pyarrow; importing this package imports pyspark.
"""

from quasar.spark.datasource import FORMAT, QuasarDataSource, register
from quasar.spark.errors import (
    BrokerUnavailableError,
    DataLossError,
    OptionError,
    QuasarSparkError,
    SaveModeError,
    SinkSchemaError,
    SinkWriteError,
    TopicNotFoundError,
    WorkerSetupError,
)

__all__ = [
    "FORMAT",
    "BrokerUnavailableError",
    "DataLossError",
    "OptionError",
    "QuasarDataSource",
    "QuasarSparkError",
    "SaveModeError",
    "SinkSchemaError",
    "SinkWriteError",
    "TopicNotFoundError",
    "WorkerSetupError",
    "register",
]
