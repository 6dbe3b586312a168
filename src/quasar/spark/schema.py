"""The read schema of ``format("quasar")`` and the message-by-message path's Arrow batches
(:func:`to_arrow_batches`: the reference the bulk path, :mod:`quasar.spark.columns`, is tested against).

| column          | Spark type         | Arrow type            | source                                         |
|-----------------|--------------------|-----------------------|------------------------------------------------|
| key             | string             | string                | partition key; null when the message has none  |
| value           | binary             | binary                | payload                                        |
| topic           | string             | string                | topic name (of a partitioned topic: its name)  |
| partition       | int                | int32                 | partition index, -1 for a non-partitioned topic |
| messageId       | binary             | binary                | serialized MessageId (usable in startingOffsets) |
| ledgerId        | bigint             | int64                 | message id                                     |
| entryId         | bigint             | int64                 | message id                                     |
| batchIndex      | int                | int32                 | index in its batch, -1 when not batched        |
| publishTime     | timestamp          | timestamp[us, tz=UTC] | broker publish time (ms -> µs)                 |
| eventTime       | timestamp          | timestamp[us, tz=UTC] | producer event time; null when unset (0)       |
| properties      | map<string,string> | map<string, string>   | message properties                             |
| redeliveryCount | int                | int32                 | redelivery count                               |

pyspark 4.2+ requires the batch schema to *equal* ``to_arrow_schema(schema, timezone="UTC")``; 4.0 fails with
a cryptic ``getInt`` error on a mismatch (reference/spark.md §1.7), so the types above are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

__all__ = ["ARROW_BATCH_ROWS", "READ_COLUMNS", "READ_SCHEMA_DDL", "arrow_read_schema", "to_arrow_batches"]

READ_SCHEMA_DDL = (
    "key STRING, value BINARY, topic STRING, partition INT, messageId BINARY, ledgerId BIGINT, "
    "entryId BIGINT, batchIndex INT, publishTime TIMESTAMP, eventTime TIMESTAMP, "
    "properties MAP<STRING, STRING>, redeliveryCount INT"
)

#: Column names of the read schema, in order.
READ_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "messageId",
    "ledgerId",
    "entryId",
    "batchIndex",
    "publishTime",
    "eventTime",
    "properties",
    "redeliveryCount",
)

#: Rows per Arrow batch yielded by ``read()`` (Spark's own default chunk is 10,000).
ARROW_BATCH_ROWS = 10_000

_SCHEMA = None


def arrow_read_schema() -> Any:
    """The ``pyarrow.Schema`` equal to Spark's Arrow form of :data:`READ_SCHEMA_DDL`."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        ts = pa.timestamp("us", tz="UTC")
        _SCHEMA = pa.schema(
            [
                ("key", pa.string()),
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("messageId", pa.binary()),
                ("ledgerId", pa.int64()),
                ("entryId", pa.int64()),
                ("batchIndex", pa.int32()),
                ("publishTime", ts),
                ("eventTime", ts),
                ("properties", pa.map_(pa.string(), pa.string())),
                ("redeliveryCount", pa.int32()),
            ]
        )
    return _SCHEMA


def to_arrow_batches(
    messages: Iterable[tuple[Any, ...]], topic: str, partition: int, rows: int = ARROW_BATCH_ROWS
) -> Iterator[Any]:
    """Group raw messages (see ``quasar.spark._client.RawMessage``) of one topic partition into
    ``pyarrow.RecordBatch`` es of at most ``rows`` rows in :func:`arrow_read_schema`.

    Per chunk the message tuples are transposed in C (``zip(*chunk)``) and each column is converted once;
    times are scaled ms -> µs and event time 0 (unset) -> null with Arrow compute, not per message;
    ``topic`` and ``partition`` are constant per partition.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_read_schema()
    ts_type = schema.field("publishTime").type
    props_type = schema.field("properties").type
    null_ms = pa.scalar(None, pa.int64())
    iterator = iter(messages)
    while True:
        chunk = list(islice(iterator, rows))
        if not chunk:
            return
        n = len(chunk)
        keys, values, ledgers, entries, batches, published, events, props, redeliveries, ids = zip(
            *chunk, strict=True
        )
        published_ms = pa.array(published, pa.int64())
        events_ms = pa.array(events, pa.int64())
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.string()),
                pa.array(values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(ids, pa.binary()),
                pa.array(ledgers, pa.int64()),
                pa.array(entries, pa.int64()),
                pa.array(batches, pa.int32()),
                pc.multiply(published_ms, 1000).cast(ts_type),
                pc.if_else(pc.equal(events_ms, 0), null_ms, pc.multiply(events_ms, 1000)).cast(ts_type),
                pa.array(props, props_type),
                pa.array(redeliveries, pa.int32()),
            ],
            schema=schema,
        )
        if n < rows:
            return
