"""The sink's bulk path: each Arrow batch becomes Pulsar batch entries built in compiled code
(:func:`quasar.client.bulk.encode_entries`: keys, properties, event times and sequence ids straight from the
Arrow buffers, no Python object per row), compressed by the producer and sent with many entries in flight.

Per Arrow batch of a task:

1. columns are normalized with pyarrow (strings and large types cast to ``binary``, ``eventTime`` to int64
   ms); a null ``value`` or ``topic`` fails the task before anything of the batch is sent;
2. rows are grouped by topic (the ``topic`` option, else the ``topic`` column) and, on a partitioned topic, by
   partition: a keyed row goes where the producer's router sends its key (``hash(key) % partitions``; each
   distinct key is hashed once), unkeyed rows go round robin, one run of ``batchingMaxMessages`` rows per
   partition (Pulsar's batching-aware round robin; from a random partition, or for the exactly-once producer
   from the task's partition id, so that a replay routes each row as before);
3. each group's rows become entries of at most ``quasar.producer.batchingMaxMessages`` messages (default 1000)
   and ``quasar.producer.batchingMaxAllowedSizeInBytes`` value bytes (default 128 KiB), Pulsar's defaults;
4. item ``r`` (the row's position in the task's input) carries sequence id ``first + r``: ``first`` is
   ``(batchId << 32) + 1`` for the exactly-once streaming producer (:mod:`quasar.spark.writer`), else the
   producer's next sequence id. An entry's metadata carries its first and highest sequence ids, which a broker
   with deduplication judges it by, so a replayed entry is dropped whole.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

from quasar.client.bulk import encode_entries
from quasar.spark._client import BrokerClient
from quasar.spark._producer import TopicProducer
from quasar.spark.errors import SinkWriteError

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_MESSAGES", "BulkSink", "uses_bulk_path"]

#: Pulsar's ``batchingMaxMessages`` and ``batchingMaxBytes`` defaults.
DEFAULT_MAX_MESSAGES = 1000
DEFAULT_MAX_BYTES = 128 * 1024

_ROW = re.compile(r"in row (\d+)")


def _conf(producer_conf: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {key.lower(): value for key, value in producer_conf}


def uses_bulk_path(producer_conf: tuple[tuple[str, str], ...]) -> bool:
    """True unless ``quasar.producer.chunkingEnabled`` is true or ``quasar.producer.batchingEnabled`` false
    (then every message is an entry of its own: the message-by-message path)."""
    conf = _conf(producer_conf)
    chunking = conf.get("chunkingenabled", "false").strip().lower() == "true"
    batching = conf.get("batchingenabled", "true").strip().lower() == "true"
    return batching and not chunking


def _limits(producer_conf: tuple[tuple[str, str], ...]) -> tuple[int, int]:
    conf = _conf(producer_conf)
    messages = int(conf.get("batchingmaxmessages", DEFAULT_MAX_MESSAGES))
    size = int(conf.get("batchingmaxallowedsizeinbytes", DEFAULT_MAX_BYTES))
    return (messages if messages > 0 else 1 << 30), (size if size > 0 else 1 << 30)


def _var(array: Any) -> tuple[Any, ...]:
    buffers = array.buffers()
    return (array.offset, buffers[0], buffers[1], buffers[2])


def _int64_buffer(array: Any) -> Any:
    """The values buffer of an int64 array, starting at its first element."""
    import pyarrow as pa

    if array.offset:
        array = pa.concat_arrays([array])
    return array.buffers()[1]


def _first_null(array: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.index(array.is_null(), True).as_py())


class _Batch:
    """One Arrow batch, normalized: ``value`` binary (no nulls), ``key`` binary or None, ``properties`` map or
    None, ``event`` int64 ms or None, ``topic`` string or None."""

    __slots__ = ("event", "key", "length", "properties", "topic", "value")

    def __init__(self, batch: Any, columns: tuple[str, ...], row_base: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        def column(name: str) -> Any:
            return batch.column(batch.schema.get_field_index(name)) if name in columns else None

        self.length = batch.num_rows
        value = column("value")
        if value.null_count:
            raise SinkWriteError(
                f"column 'value' is null in row {row_base + _first_null(value)} of this task"
            )
        self.value = value.cast(pa.binary())
        key = column("key")
        self.key = None if key is None else key.cast(pa.binary())
        self.properties = column("properties")
        string_map = pa.map_(pa.string(), pa.string())
        if self.properties is not None and self.properties.type != string_map:
            self.properties = self.properties.cast(string_map)
        event = column("eventTime")
        if event is not None and pa.types.is_timestamp(event.type):
            micros = pc.cast(event.cast(pa.timestamp("us", tz="UTC")), pa.int64())
            event = pc.divide(micros, 1000)  # ms; a negative time fails in the encoder anyway
        self.event = None if event is None else event.cast(pa.int64())
        self.topic = column("topic")

    def take(self, indices: Any) -> _Batch:
        """The rows at ``indices`` (a pyarrow int64 array)."""
        other = _Batch.__new__(_Batch)
        other.length = len(indices)
        for name in ("value", "key", "properties", "event", "topic"):
            array = getattr(self, name)
            setattr(other, name, None if array is None else array.take(indices))
        return other


class BulkSink:
    """The bulk path of one write task: :meth:`write` per Arrow batch, then :meth:`finish`.

    Args:
        client: the broker. topic: the ``topic`` option (None: rows carry a ``topic`` column).
        producer_conf: ``quasar.producer.*`` pairs. producer_name: the exactly-once producer name or None.
        first_sequence_id: ``(batchId << 32) + 1`` for the exactly-once producer, else None (the producer's).
        round_robin_start: the partition unkeyed rows start at on a partitioned topic; None: a random one.
            The exactly-once path passes the task's partition id, so a replay routes every row as before
            (deduplication is per topic partition).
    """

    def __init__(
        self,
        client: BrokerClient,
        topic: str | None,
        producer_conf: tuple[tuple[str, str], ...],
        producer_name: str | None = None,
        first_sequence_id: int | None = None,
        round_robin_start: int | None = None,
    ) -> None:
        self._client = client
        self._start = round_robin_start
        self._topic = topic
        self._conf = producer_conf
        self._name = producer_name
        self._first = first_sequence_id
        self._max_messages, self._max_bytes = _limits(producer_conf)
        self.producers: dict[str, TopicProducer] = {}
        self._next: dict[tuple[str, int], int] = {}  # batch writes: next sequence id per (topic, partition)
        self._round_robin: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.rows = 0

    def _producer(self, topic: str) -> TopicProducer:
        producer = self.producers.get(topic)
        if producer is None:
            producer = self.producers[topic] = self._client.producer(topic, self._conf, self._name, bulk=True)
        return producer

    def write(self, batch: Any, columns: tuple[str, ...]) -> None:
        """Send every row of one Arrow batch (entries may still be in flight afterwards).

        Raises:
            SinkWriteError: a null ``value`` or ``topic``, a key or property that is not UTF-8, a null
                property value, a negative event time, or an entry the broker refused.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        if batch.num_rows == 0:
            return
        base = self.rows
        data = _Batch(batch, columns, base)
        positions = pa.array(range(data.length), pa.int64())
        if self._topic is not None:
            groups: Iterable[tuple[str, Any]] = [(self._topic, None)]
        else:
            assert data.topic is not None
            if data.topic.null_count:
                raise SinkWriteError(
                    f"column 'topic' is null in row {base + _first_null(data.topic)} of this task"
                )
            topics = pc.unique(data.topic).to_pylist()
            groups = [(t, pc.indices_nonzero(pc.equal(data.topic, t)).cast(pa.int64())) for t in topics]
        for topic, rows in groups:
            part = data if rows is None else data.take(rows)
            part_rows = positions if rows is None else rows
            self._write_topic(topic, part, part_rows, base)
            self.counts[topic] = self.counts.get(topic, 0) + part.length
        self.rows += data.length

    def _partitions(self, topic: str, producer: TopicProducer, data: _Batch) -> Iterator[tuple[int, Any]]:
        """``(partition, indices into data or None for all)`` of a topic's rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        count = producer.num_partitions
        if count <= 1:
            yield 0, None
            return
        key = data.key
        unkeyed_mask = None if key is None else key.is_null()
        unkeyed = data.length if key is None else key.null_count
        chosen = None
        if unkeyed:  # runs of max_messages unkeyed rows, partition after partition
            start = self._round_robin.get(topic)
            if start is None:
                start = random.randrange(count) if self._start is None else self._start % count
            runs = -(-unkeyed // self._max_messages)
            self._round_robin[topic] = (start + runs) % count
            run_partitions = pa.array([(start + i) % count for i in range(runs)], pa.int32())
            if unkeyed_mask is None:
                order = pa.array(range(data.length), pa.int64())
            else:
                order = pc.subtract(pc.cumulative_sum(unkeyed_mask.cast(pa.int64())), 1)
            chosen = pc.take(run_partitions, pc.divide(order, self._max_messages))
        if key is not None and unkeyed < data.length:
            distinct = pc.unique(key.drop_null())
            routes = [producer.partition_of(k.decode("utf-8", "replace")) for k in distinct.to_pylist()]
            keyed = pc.take(pa.array(routes, pa.int32()), pc.index_in(key, value_set=distinct))
            chosen = keyed if chosen is None else pc.if_else(unkeyed_mask, chosen, keyed)
        for partition in range(count):
            indices = pc.indices_nonzero(pc.equal(chosen, partition)).cast(pa.int64())
            if len(indices):
                yield partition, indices

    def _write_topic(self, topic: str, data: _Batch, rows: Any, base: int) -> None:
        producer = self._producer(topic)
        for partition, indices in self._partitions(topic, producer, data):
            part = data if indices is None else data.take(indices)
            part_rows = rows if indices is None else rows.take(indices)
            if self._first is not None:
                first = self._first + base
                row_buffer = part_rows
            else:  # the producer's own numbering, consecutive per partition
                slot = (topic, partition)
                known = self._next.get(slot)
                first = producer.next_sequence_id(partition) if known is None else known
                self._next[slot] = first + part.length
                row_buffer = None
            self._send(producer, partition, part, first, row_buffer, base, part_rows)

    def _send(
        self,
        producer: TopicProducer,
        partition: int,
        data: _Batch,
        first: int,
        rows: Any,
        base: int,
        where: Any,
    ) -> None:
        props = data.properties
        try:
            entries = encode_entries(
                data.length,
                _var(data.value),
                None if data.key is None else _var(data.key),
                None if props is None else (props.offset, props.buffers()[0], props.buffers()[1],
                                            _var(props.keys), _var(props.items)),
                None if data.event is None else (data.event.offset, *data.event.buffers()[:2]),
                first,
                None if rows is None else _int64_buffer(rows),
                self._max_messages,
                self._max_bytes,
            )  # fmt: skip
        except ValueError as exc:
            message = _ROW.sub(
                lambda m: f"in row {base + where[int(m.group(1))].as_py()} of this task", str(exc)
            )
            raise SinkWriteError(f"cannot write to {producer.topic}: {message}") from None
        keys = data.key
        for payload, count, first_row in entries:
            if rows is None:
                low, high = first + first_row, first + first_row + count - 1
            else:
                low = first + rows[first_row].as_py()
                high = first + rows[first_row + count - 1].as_py()
            key = None
            if keys is not None and keys[first_row].is_valid:
                key = keys[first_row].as_py().decode("utf-8")
            producer.send_entry(partition, payload, count, low, high, key)

    def finish(self) -> None:
        """Wait for every receipt; SinkWriteError for the first failure."""
        for producer in self.producers.values():
            producer.flush()

    def close(self, failed: bool) -> None:
        """Close the producers (after a failure, first let what was queued land, so a replay is deduplicated)."""
        for producer in self.producers.values():
            if failed:
                try:
                    producer.flush()
                except SinkWriteError:
                    pass
            producer.close()
