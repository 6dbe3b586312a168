"""The sink: ``df.write.format("quasar")`` (batch) and ``df.writeStream.format("quasar")`` (streaming).

Columns of the DataFrame written (checked on the driver before any task runs; anything else is refused):

| column       | type                         | becomes                                                     |
|--------------|------------------------------|-------------------------------------------------------------|
| value        | binary or string (required)  | the payload (string: UTF-8); null values fail the write     |
| key          | string or binary (UTF-8)     | the partition key (routes to a partition of a partitioned topic) |
| topic        | string                       | the topic, when the ``topic`` option is not set (the option wins) |
| properties   | map<string,string>           | message properties                                          |
| eventTime    | timestamp or bigint (ms)     | the event time                                              |

Rows go out as Pulsar batch entries built in compiled code from the Arrow batches (:mod:`quasar.spark.sink_bulk`:
at most ``quasar.producer.batchingMaxMessages`` messages (1000) and
``quasar.producer.batchingMaxAllowedSizeInBytes`` value bytes (128 KiB) per entry, compressed with
``quasar.producer.compressionType`` (``LZ4``, ``ZSTD``, ...), many entries in flight). With
``quasar.producer.chunkingEnabled=true`` or ``quasar.producer.batchingEnabled=false`` every message is sent on
its own instead (the message-by-message path below, :func:`write_chunks`).

**Exactly-once contract (streaming writes).** Each task of micro-batch ``B`` produces with

- producer name ``quasar-spark-<queryId>-<partitionId>`` (``sql.streaming.queryId`` is stable across query
  restarts from the same checkpoint), and
- sequence id ``(B << 32) + rowPosition + 1`` (``rowPosition``: the row's 0-based position in the task's
  input; never 0, which the official Python client treats as "no sequence id"),

so the sequence ids of one producer name only grow, batch after batch. A batch entry carries the sequence ids
of its first and last message (``sequence_id``, ``highest_sequence_id``). On a topic with broker-side
deduplication enabled (``POST /admin/v2/namespaces/{tenant}/{ns}/deduplication`` ``true``), the broker drops any
entry whose sequence ids are not above the last one it persisted for that producer name: a retried task, or
a batch that Spark replays after a query restart (Spark replays the same batch id with the same rows, which
become the same entries), is written once. Requirements: a deterministic plan (a replayable source such as
``quasar``; no nondeterministic ``repartition()``), ``spark.speculation=false`` (the default), fewer than
2**32 - 1 rows per task, batch ids below 2**31, and the same producer options on the replay. Without
deduplication on the topic, the sink is at-least-once. Batch writes
(``df.write``) are at-least-once: they have no batch id to derive sequence ids from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, DataType, LongType, MapType, StringType, StructType, TimestampType

from quasar.spark._client import BrokerClient, TopicProducer
from quasar.spark.errors import SinkSchemaError, SinkWriteError
from quasar.spark.options import WriteConfig
from quasar.spark.sink_bulk import BulkSink, uses_bulk_path

try:  # pyspark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    STREAM_ARROW = True
except ImportError:  # pragma: no cover - pyspark 4.0
    # the row-based base class of pyspark 4.0 stands in for the Arrow one (same methods, rows instead of batches)
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
    STREAM_ARROW = False

__all__ = [
    "SINK_COLUMNS",
    "QuasarBatchWriter",
    "QuasarCommitMessage",
    "QuasarStreamWriter",
    "check_sink_schema",
]

log = logging.getLogger("quasar.spark")

SINK_COLUMNS = ("value", "key", "topic", "properties", "eventTime")
_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "key": (StringType, BinaryType),
    "topic": (StringType,),
    "eventTime": (TimestampType, LongType),
}
#: Bits of the row position in a sequence id; the batch id takes the bits above.
ROW_BITS = 32


def check_sink_schema(schema: StructType, config: WriteConfig) -> tuple[str, ...]:
    """The columns the sink will use, in :data:`SINK_COLUMNS` order.

    Raises:
        SinkSchemaError: no ``value`` column; a column of another name; a column of the wrong type; no
            ``topic`` column and no ``topic`` option.
    """
    names = {field.name: field for field in schema.fields}
    if "value" not in names:
        raise SinkSchemaError(
            f"the DataFrame written to format 'quasar' needs a 'value' column (binary or string); it has "
            f"{sorted(names)}"
        )
    extra = sorted(set(names) - set(SINK_COLUMNS))
    if extra:
        raise SinkSchemaError(
            f"format 'quasar' cannot write the columns {extra}; allowed: {', '.join(SINK_COLUMNS)} "
            "(pack other columns into 'value', e.g. to_json(struct(...)))"
        )
    for name, field in names.items():
        if name == "properties":
            dtype = field.dataType
            ok = (
                isinstance(dtype, MapType)
                and isinstance(dtype.keyType, StringType)
                and isinstance(dtype.valueType, StringType)
            )
        else:
            ok = isinstance(field.dataType, _TYPES[name])
        if not ok:
            wanted = (
                "map<string,string>"
                if name == "properties"
                else " or ".join(t.typeName() for t in _TYPES[name])
            )
            raise SinkSchemaError(
                f"column {name!r} has type {field.dataType.simpleString()}; format 'quasar' needs {wanted}"
            )
    if config.topic is None and "topic" not in names:
        raise SinkSchemaError("set the 'topic' option or give the DataFrame a 'topic' column")
    return tuple(name for name in SINK_COLUMNS if name in names)


@dataclass
class QuasarCommitMessage(WriterCommitMessage):
    """What one write task produced: ``rows`` messages sent and acknowledged, per topic."""

    rows: int
    topics: dict[str, int]
    partition_id: int = -1


def _rows(messages: list[WriterCommitMessage | None]) -> int:
    """Messages written by the tasks that reported (their :class:`QuasarCommitMessage`)."""
    return sum(m.rows for m in messages if isinstance(m, QuasarCommitMessage))


def _chunks_from_arrow(batches: Iterable[Any], columns: tuple[str, ...]) -> Iterator[dict[str, list[Any]]]:
    """Per Arrow batch, the used columns as Python lists (timestamps as ms, maps as dicts, keys as str)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        if batch.num_rows == 0:
            continue
        chunk: dict[str, list[Any]] = {}
        for name in columns:
            column = batch.column(batch.schema.get_field_index(name))
            if name == "eventTime" and pa.types.is_timestamp(column.type):
                column = pc.cast(column.cast(pa.timestamp("us", tz="UTC")), pa.int64())
                chunk[name] = [None if v is None else v // 1000 for v in column.to_pylist()]
            elif name == "properties":
                chunk[name] = [None if v is None else dict(v) for v in column.to_pylist()]
            else:
                chunk[name] = column.to_pylist()
        yield chunk


def _chunks_from_rows(
    rows: Iterable[Any], columns: tuple[str, ...], size: int = 10_000
) -> Iterator[dict[str, list[Any]]]:
    """The same chunks from Row objects (pyspark 4.0's row-based stream writer)."""
    chunk: dict[str, list[Any]] = {name: [] for name in columns}
    count = 0
    for row in rows:
        for name in columns:
            value = row[name]
            if name == "eventTime" and value is not None and not isinstance(value, int):
                value = int(value.timestamp() * 1000)
            chunk[name].append(value)
        count += 1
        if count >= size:
            yield chunk
            chunk, count = {name: [] for name in columns}, 0
    if count:
        yield chunk


def write_chunks(
    config: WriteConfig,
    chunks: Iterable[dict[str, list[Any]]],
    *,
    producer_name: str | None = None,
    batch_id: int | None = None,
    partition_id: int = -1,
) -> QuasarCommitMessage:
    """Produce every row of ``chunks``; flush and check every receipt before returning.

    With ``producer_name`` and ``batch_id``, each message carries sequence id ``(batch_id << 32) + row + 1``.

    Raises:
        SinkWriteError: a null ``value``/``topic``, a key that is not UTF-8, or a send the broker refused.
    """
    client = BrokerClient(config.service_url, config.admin_url, config.client_conf)
    producers: dict[str, TopicProducer] = {}
    counts: dict[str, int] = {}
    row = 0
    base = None if batch_id is None else batch_id << ROW_BITS
    failed = True
    try:
        for chunk in chunks:
            values = chunk["value"]
            n = len(values)
            if None in values:
                raise SinkWriteError(f"column 'value' is null in row {row + values.index(None)} of this task")
            topics = [config.topic] * n if config.topic is not None else chunk["topic"]
            if config.topic is None and None in topics:
                raise SinkWriteError(f"column 'topic' is null in row {row + topics.index(None)} of this task")
            keys = chunk.get("key") or [None] * n
            props = chunk.get("properties") or [None] * n
            events = chunk.get("eventTime") or [None] * n
            for i in range(n):
                value = values[i]
                if isinstance(value, str):
                    value = value.encode()
                key = keys[i]
                if isinstance(key, (bytes, bytearray)):
                    try:
                        key = bytes(key).decode()
                    except UnicodeDecodeError:
                        raise SinkWriteError(f"column 'key' is not UTF-8 in row {row}") from None
                topic = topics[i]
                producer = producers.get(topic)
                if producer is None:
                    producer = producers[topic] = client.producer(topic, config.producer_conf, producer_name)
                sequence_id = None if base is None else base + row + 1
                producer.send(value, key, props[i], events[i], sequence_id)
                counts[topic] = counts.get(topic, 0) + 1
                row += 1
        for producer in producers.values():
            producer.flush()
        failed = False
    finally:
        for producer in producers.values():
            if failed:  # let what was already queued land, so a replay is really deduplicated
                try:
                    producer.flush()
                except SinkWriteError as exc:
                    log.warning("%s", exc)
            producer.close()
    return QuasarCommitMessage(rows=row, topics=counts, partition_id=partition_id)


def write_arrow(
    config: WriteConfig,
    batches: Iterable[Any],
    columns: tuple[str, ...],
    *,
    producer_name: str | None = None,
    batch_id: int | None = None,
    partition_id: int = -1,
) -> QuasarCommitMessage:
    """Produce every row of the Arrow ``batches`` (bulk path, or :func:`write_chunks` when the producer
    options ask for one message per entry); flush and check every receipt before returning.

    Raises:
        SinkWriteError: see :meth:`quasar.spark.sink_bulk.BulkSink.write`.
    """
    if not uses_bulk_path(config.producer_conf):
        return write_chunks(
            config,
            _chunks_from_arrow(batches, columns),
            producer_name=producer_name,
            batch_id=batch_id,
            partition_id=partition_id,
        )
    client = BrokerClient(config.service_url, config.admin_url, config.client_conf)
    first = None if batch_id is None else (batch_id << ROW_BITS) + 1
    start = None if batch_id is None else max(partition_id, 0)
    sink = BulkSink(client, config.topic, config.producer_conf, producer_name, first, start)
    failed = True
    try:
        for batch in batches:
            sink.write(batch, columns)
        sink.finish()
        failed = False
    finally:
        sink.close(failed)
    return QuasarCommitMessage(rows=sink.rows, topics=sink.counts, partition_id=partition_id)


class QuasarBatchWriter(DataSourceArrowWriter):
    """Batch sink (at-least-once); Arrow batches in, one producer per topic per task."""

    def __init__(self, config: WriteConfig, columns: tuple[str, ...]) -> None:
        self.config = config
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> QuasarCommitMessage:
        return write_arrow(self.config, iterator, self.columns)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = _rows(messages)
        log.info("wrote %d messages in %d tasks", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = _rows(messages)
        log.warning("write aborted; %d messages of the tasks that succeeded are on the topics", done)


class QuasarStreamWriter(_StreamWriterBase):
    """Streaming sink with the exactly-once contract of the module docstring."""

    def __init__(self, config: WriteConfig, columns: tuple[str, ...]) -> None:
        self.config = config
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> QuasarCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = batch_id = None
        partition_id = -1
        if context is not None:
            partition_id = context.partitionId()
            query_id = context.getLocalProperty("sql.streaming.queryId")
            raw_batch = context.getLocalProperty("streaming.sql.batchId")
            batch_id = int(raw_batch) if raw_batch is not None else None
        name = f"quasar-spark-{query_id}-{partition_id}" if query_id and batch_id is not None else None
        if STREAM_ARROW:
            return write_arrow(
                self.config,
                iterator,
                self.columns,
                producer_name=name,
                batch_id=batch_id if name else None,
                partition_id=partition_id,
            )
        return write_chunks(  # pragma: no cover - pyspark 4.0: rows, message by message
            self.config,
            _chunks_from_rows(iterator, self.columns),
            producer_name=name,
            batch_id=batch_id if name else None,
            partition_id=partition_id,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = _rows(messages)
        log.info("batch %d: wrote %d messages", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted; a replay is deduplicated on topics with deduplication", batchId)
