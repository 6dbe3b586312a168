"""Batch reads (``spark.read.format("quasar")``) and the planning both batch and streaming reads share.

Planning runs on the driver: resolve the topics (``topic``/``topics``/``topicsPattern``) to topic partitions
through the admin API, resolve where each starts and ends (:class:`~quasar.spark.positions.Position`), and cut
one :class:`QuasarPartition` per topic partition with data. ``minPartitions`` splits the largest ranges
further, at entry boundaries, when a range lies within one ledger (entry ids are contiguous there; across a
ledger boundary the entry count is unknown without reading, so such ranges stay whole).

``read()`` runs on the executors: one reader per partition reads ``(start, end]`` as whole stored entries and
yields Arrow batches built in compiled code (:mod:`quasar.spark.entry_scan`, :mod:`quasar.spark.columns`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from quasar.spark._client import BrokerClient
from quasar.spark.entry_scan import read_batches
from quasar.spark.errors import DataLossError, OptionError, TopicNotFoundError
from quasar.spark.options import ReadConfig
from quasar.spark.positions import EARLIEST, Position, StartSpec, partition_index, position_before

__all__ = [
    "QuasarBatchReader",
    "QuasarPartition",
    "plan_partitions",
    "read_partition",
    "resolve_positions",
    "resolve_topic_partitions",
]

log = logging.getLogger("quasar.spark")


class QuasarPartition(InputPartition):
    """One Spark input partition: messages ``start < id <= end`` of one topic partition (picklable)."""

    def __init__(self, topic_partition: str, start: Position, end: Position) -> None:
        super().__init__((topic_partition, str(start), str(end)))
        self.topic_partition = topic_partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"QuasarPartition({self.topic_partition}, ({self.start}, {self.end}])"


def broker_client(config: ReadConfig) -> BrokerClient:
    return BrokerClient(config.service_url, config.admin_url, config.client_conf)


def resolve_topic_partitions(client: BrokerClient, config: ReadConfig) -> list[str]:
    """Full names of every topic partition to read, sorted.

    Raises:
        TopicNotFoundError: a named topic does not exist, or ``topicsPattern`` matches nothing.
    """
    if config.topics_pattern is not None:
        namespace = config.topics_pattern.split("://", 1)[-1].rsplit("/", 1)[0]
        if "/" not in namespace or any(c in namespace for c in "*+?[](){}|\\^$"):
            raise OptionError(
                f"option 'topicsPattern': {config.topics_pattern!r} must name one namespace literally, "
                "e.g. persistent://public/default/flights-.*"
            )
        regex = re.compile(config.topics_pattern)
        topics = [t for t in client.list_topics(namespace) if regex.fullmatch(t)]
        if not topics:
            raise TopicNotFoundError(f"option 'topicsPattern': no topic matches {config.topics_pattern!r}")
    else:
        topics = list(config.topics)
    partitions: list[str] = []
    for topic in topics:
        partitions.extend(client.topic_partitions(topic))
    return sorted(partitions)


def _spec_for(specs: StartSpec | dict[str, StartSpec], tp: str, default: str) -> StartSpec:
    if isinstance(specs, StartSpec):
        return specs
    if tp in specs:
        return specs[tp]
    parent, _ = partition_index(tp)
    return specs.get(parent, StartSpec(default))


def resolve_positions(
    client: BrokerClient,
    topic_partitions: list[str],
    specs: StartSpec | dict[str, StartSpec],
    default: str,
    *,
    timestamp_ms: int | None = None,
    poll_timeout_ms: int = 5000,
) -> dict[str, Position]:
    """Turn ``startingOffsets``/``endingOffsets`` specs into a consumed-through Position per topic partition.

    ``timestamp_ms`` (``startingTimestamp``) wins over ``specs``. A JSON spec names topics or topic
    partitions; unnamed partitions get ``default`` (``earliest`` or ``latest``).

    Raises:
        OptionError: a JSON spec names a topic that is not read, or a serialized id of another partition.
    """
    if isinstance(specs, dict):
        known = set(topic_partitions) | {partition_index(tp)[0] for tp in topic_partitions}
        unknown = sorted(set(specs) - known)
        if unknown:
            raise OptionError(f"startingOffsets/endingOffsets name topics that are not read: {unknown}")
    out: dict[str, Position] = {}
    for tp in topic_partitions:
        spec = StartSpec("time", timestamp_ms) if timestamp_ms is not None else _spec_for(specs, tp, default)
        if spec.kind == "earliest":
            out[tp] = EARLIEST
        elif spec.kind == "latest":
            out[tp] = client.last_position(tp)
        elif spec.kind == "time":
            out[tp] = client.position_at_time(tp, spec.value, poll_timeout_ms)
        elif spec.kind == "position":
            out[tp] = spec.value
        else:  # message_id_bytes
            partition, ledger, entry, batch = client.position_of_serialized(spec.value)
            if partition >= 0 and partition != partition_index(tp)[1]:
                raise OptionError(f"the serialized message id for {tp} belongs to partition {partition}")
            out[tp] = position_before(ledger, entry, batch)
    return dict(sorted(out.items()))


def plan_partitions(
    starts: dict[str, Position],
    ends: dict[str, Position],
    *,
    min_partitions: int | None,
    fail_on_data_loss: bool,
) -> list[QuasarPartition]:
    """One QuasarPartition per topic partition whose end is past its start, split up to ``min_partitions``.

    Raises:
        DataLossError: an end lies before its start (the topic was recreated or truncated) and
            ``fail_on_data_loss`` is set; otherwise that partition is logged and skipped.
    """
    ranges: list[tuple[str, Position, Position]] = []
    for tp, end in sorted(ends.items()):
        start = starts.get(tp, EARLIEST)
        if end.key > start.key:
            ranges.append((tp, start, end))
        elif end.key < start.key:
            text = (
                f"{tp}: the end position {end} lies before the start {start} (topic recreated or truncated?)"
            )
            if fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to skip")
            log.warning("%s; skipping", text)
    if min_partitions is not None:
        ranges = _split(ranges, min_partitions)
    return [QuasarPartition(tp, start, end) for tp, start, end in ranges]


def _span(start: Position, end: Position) -> int:
    """Entries in ``(start, end]`` when both lie in one ledger, else 0 (unknown: not split). From the earliest
    position, the entries of the end's ledger are counted (any earlier ledgers go to the first piece)."""
    if start.is_earliest:
        return end.entry_id + 1
    if start.ledger_id != end.ledger_id:
        return 0
    return end.entry_id - max(start.entry_id, -1)


def _split(ranges: list[tuple[str, Position, Position]], want: int) -> list[tuple[str, Position, Position]]:
    """Split the widest single-ledger ranges in two at an entry boundary until there are ``want`` ranges."""
    ranges = list(ranges)
    while len(ranges) < want:
        widest = max(range(len(ranges)), key=lambda i: _span(ranges[i][1], ranges[i][2]), default=None)
        if widest is None:
            break
        tp, start, end = ranges[widest]
        span = _span(start, end)
        if span < 2:
            break
        first_entry = max(start.entry_id, -1) + 1
        middle = Position(end.ledger_id, first_entry + span // 2 - 1, -1)
        ranges[widest : widest + 1] = [(tp, start, middle), (tp, middle, end)]
    return ranges


def read_partition(config: ReadConfig, partition: QuasarPartition) -> Iterator[Any]:
    """Arrow batches of one input partition (runs on an executor): whole entries read in bulk and decoded in
    compiled code (:mod:`quasar.spark.entry_scan`); the same rows as the message path
    (``BrokerClient.read_range`` + :func:`~quasar.spark.schema.to_arrow_batches`)."""
    return read_batches(
        broker_client(config),
        partition.topic_partition,
        partition.start,
        partition.end,
        poll_timeout_ms=config.poll_timeout_ms,
        fail_on_data_loss=config.fail_on_data_loss,
        reader_conf=config.reader_conf,
    )


class QuasarBatchReader(DataSourceReader):
    """Batch reader: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest), fixed when
    the query is planned."""

    def __init__(self, config: ReadConfig) -> None:
        self.config = config

    def partitions(self) -> list[QuasarPartition]:
        config = self.config
        client = broker_client(config)
        tps = resolve_topic_partitions(client, config)
        starts = resolve_positions(
            client,
            tps,
            config.starting_or("earliest"),
            "earliest",
            timestamp_ms=config.starting_timestamp_ms,
            poll_timeout_ms=min(config.poll_timeout_ms, 10_000),
        )
        ends = resolve_positions(client, tps, config.ending, "latest")
        planned = plan_partitions(
            starts, ends, min_partitions=config.min_partitions, fail_on_data_loss=config.fail_on_data_loss
        )
        # Spark needs at least one partition; an empty range reads nothing.
        return planned or [QuasarPartition(tps[0], EARLIEST, EARLIEST)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QuasarPartition)
        return read_partition(self.config, partition)
