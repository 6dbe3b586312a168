"""``QuasarDataSource``: the PySpark Python Data Source named ``quasar`` (pyspark >= 4.0).

``spark.dataSource.register(QuasarDataSource)`` (or :func:`quasar.spark.register`) makes
``spark.read/readStream/write/writeStream.format("quasar")`` read and write Quasar (Pulsar-protocol) topics.
The instance is built several times on the driver and pickled to executors, so ``__init__`` only keeps the
options; option checking happens in :meth:`reader`/:meth:`writer`/..., i.e. when a query is planned.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from quasar.spark.errors import OptionError, SaveModeError
from quasar.spark.options import parse_read, parse_write
from quasar.spark.reader import QuasarBatchReader
from quasar.spark.schema import READ_COLUMNS, READ_SCHEMA_DDL
from quasar.spark.stream import QuasarStreamReader
from quasar.spark.workers import check_workers
from quasar.spark.writer import QuasarBatchWriter, QuasarStreamWriter, check_sink_schema

__all__ = ["FORMAT", "QuasarDataSource", "register"]

#: The format name (not ``pulsar``: JVM sources win name clashes, reference/spark.md §0.10).
FORMAT = "quasar"


def _check_read_schema(schema: StructType) -> None:
    names = [field.name for field in schema.fields]
    if names != list(READ_COLUMNS):
        raise OptionError(
            f"format 'quasar' has a fixed read schema ({READ_SCHEMA_DDL}); do not pass .schema(...), got {names}"
        )


class QuasarDataSource(DataSource):
    """Batch and streaming reader and writer for Quasar topics (see the package docstring for options)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema: StructType) -> QuasarBatchReader:
        _check_read_schema(schema)
        return QuasarBatchReader(parse_read(self.options))

    def streamReader(self, schema: StructType) -> QuasarStreamReader:
        _check_read_schema(schema)
        if any(key.lower() == "endingoffsets" for key in self.options):
            raise OptionError("option 'endingOffsets' is for batch reads only (as in Kafka's connector)")
        return QuasarStreamReader(parse_read(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> QuasarBatchWriter:
        """The batch sink (planned on the driver, before any task runs).

        Save modes, as Kafka's connector: Append writes; Overwrite (``overwrite=True``) raises
        :class:`SaveModeError` naming ``.mode("append")``, since a topic's messages are never replaced. Spark 4
        itself refuses ErrorIfExists (its default mode) and Ignore for Python data sources with
        ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE`` before calling this method, so those never reach the sink.

        Raises:
            SaveModeError: ``overwrite``. OptionError / SinkSchemaError: bad options or columns.
        """
        if overwrite:
            raise SaveModeError(
                "format 'quasar' only appends to topics: write with .mode(\"append\") (the Overwrite save "
                "mode would delete the topic's messages, which the sink never does; as Kafka's connector, it "
                "refuses every mode but Append, and nothing was sent)"
            )
        config = parse_write(self.options)
        return QuasarBatchWriter(config, check_sink_schema(schema, config))

    def streamWriter(self, schema: StructType, overwrite: bool) -> QuasarStreamWriter:
        """The streaming sink. Output modes append and complete (``overwrite=True``: each trigger writes the
        whole result table, as Kafka's sink does); Spark refuses update for Python sinks."""
        config = parse_write(self.options)
        return QuasarStreamWriter(config, check_sink_schema(schema, config))


def register(spark: SparkSession, *, check_workers_import: bool = True) -> None:
    """Register :class:`QuasarDataSource` with ``spark`` (a SparkSession) as format ``quasar``.

    With ``check_workers_import`` (the default) a one-task probe job first checks, once per SparkContext,
    that Spark's Python workers can import ``quasar`` (:mod:`quasar.spark.workers`).

    Raises:
        WorkerSetupError: they cannot; the message names ``PYSPARK_PYTHON`` (``spark.pyspark.python`` with
            spark-submit), the setting that fixes it.
    """
    if check_workers_import:
        check_workers(spark)
    spark.dataSource.register(QuasarDataSource)
