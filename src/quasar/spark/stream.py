"""Structured Streaming source (``spark.readStream.format("quasar")``).

Offsets are :class:`~quasar.spark.positions.Offset` JSON (topic partition -> consumed-through position, sorted
keys), stored by Spark in the checkpoint; a restarted query resumes from the checkpoint's last end offset, so
it neither loses nor repeats data. What the pitfalls of the Python Data Source API (reference/spark.md §0)
mean here:

- Offsets are compared by Spark as JSON text: every dict is built sorted, and ``latestOffset`` returns its
  ``start`` object unchanged when nothing moved, so an idle stream runs no empty batches.
- ``initialOffset()`` is resolved once per run (cached) and is recomputed by Spark when batch 0 is replayed
  after a restart; the end of batch 0 carries its real start (``from``, see positions.py), and
  ``partitions()`` reads batch 0 from there, so a ``latest``/timestamp start never skips data.
- ``commit(end)`` lags one batch and ``stop()`` is never called: readers are non-durable, positions live
  only in the checkpoint. With the ``subscription`` option, ``commit(end)`` moves that durable subscription
  (cumulative ack) so the broker can trim what every batch up to ``end`` has read; it is never read back, and
  it is the user's to delete when the query is retired (``stop()`` cannot do it). Under
  ``Trigger.AvailableNow`` Spark (4.3.0, observed) calls no ``commit`` at all: use a processing-time trigger
  when the subscription must follow.
- New partitions of a partitioned topic (and new topics matching ``topicsPattern``) are discovered in every
  ``latestOffset`` and start at the earliest position.
- Admission control: ``maxMessagesPerTrigger`` through ``ReadMaxRows`` on pyspark 4.2+ (engine-driven,
  honoured by ``Trigger.AvailableNow``), emulated on 4.0/4.1 from the last planned end. The cap is split evenly
  over the partitions that have new data; each partition's end is found by reading that many message ids on
  the driver (ids are not contiguous numbers, so counting needs a read).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from quasar.spark._client import BrokerClient
from quasar.spark.errors import DataLossError
from quasar.spark.options import ReadConfig
from quasar.spark.positions import EARLIEST, Offset, Position
from quasar.spark.reader import (
    QuasarPartition,
    broker_client,
    plan_partitions,
    read_partition,
    resolve_positions,
    resolve_topic_partitions,
)

try:  # pyspark 4.2+: admission control
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on pyspark < 4.2 (Spark then runs AvailableNow as a single batch)."""


__all__ = ["ADMISSION_CONTROL", "QuasarStreamReader"]

#: True when the installed pyspark drives ``maxMessagesPerTrigger`` itself (4.2+).
ADMISSION_CONTROL = ReadMaxRows is not None

log = logging.getLogger("quasar.spark")


class QuasarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring for the offset contract."""

    def __init__(self, config: ReadConfig) -> None:
        self.config = config
        self._initial: dict[str, Any] | None = None
        self._last_end: dict[str, Any] | None = None  # 4.0/4.1: the last planned end (admission emulation)
        self._target: dict[str, Position] | None = None  # AvailableNow: latest positions when it started
        self._latest_seen: dict[str, Any] | None = None

    # ------------------------------------------------------------------ offsets (driver, source runner)
    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            config = self.config
            client = broker_client(config)
            tps = resolve_topic_partitions(client, config)
            starts = resolve_positions(
                client,
                tps,
                config.starting_or("latest"),
                "latest",
                timestamp_ms=config.starting_timestamp_ms,
                poll_timeout_ms=min(config.poll_timeout_ms, 10_000),
            )
            if config.subscription is not None:  # create it now, so it holds the data from the start
                for tp in tps:
                    client.advance_subscription(tp, config.subscription, EARLIEST)
            self._initial = Offset(starts, initial=True).to_json()
        return self._initial

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is None:  # pyspark 4.0/4.1 call latestOffset() without arguments
            start = self._last_end or self.initialOffset()
            cap = self.config.max_messages_per_trigger
        else:
            cap = limit.max_rows if ADMISSION_CONTROL and isinstance(limit, ReadMaxRows) else None
        begin = Offset.from_json(start)
        client = broker_client(self.config)
        tps = resolve_topic_partitions(client, self.config)
        latest = {tp: client.last_position(tp) for tp in tps}
        self._latest_seen = Offset(latest).to_json()
        if self._target is not None:
            latest = {
                tp: min(pos, self._target.get(tp, EARLIEST), key=lambda p: p.key)
                for tp, pos in latest.items()
            }
        ends: dict[str, Position] = {}
        for tp, last in latest.items():
            first = begin.positions.get(tp, EARLIEST)
            if last.key < first.key:
                text = f"{tp}: the last message {last} lies before the consumed position {first}"
                if self.config.fail_on_data_loss:
                    raise DataLossError(
                        text + " (topic recreated or truncated?); set failOnDataLoss=false to skip"
                    )
                log.warning("%s; continuing from %s", text, last)
            ends[tp] = last
        if cap is not None:
            ends = self._cap(client, begin.positions, ends, cap)
        if not begin.initial and ends == begin.positions:
            return start  # the same JSON text: Spark sees no new data
        first_batch_start = begin.positions if begin.initial else None
        return Offset(ends, start_of_first_batch=first_batch_start).to_json()

    def _cap(
        self, client: BrokerClient, starts: dict[str, Position], ends: dict[str, Position], cap: int
    ) -> dict[str, Position]:
        behind = [tp for tp, end in ends.items() if end.key > starts.get(tp, EARLIEST).key]
        if not behind:
            return ends
        share = max(1, cap // len(behind))
        capped = dict(ends)
        for tp in behind:
            capped[tp] = client.peek_position(
                tp, starts.get(tp, EARLIEST), ends[tp], share, min(self.config.poll_timeout_ms, 10_000)
            )
        return capped

    if ADMISSION_CONTROL:

        def getDefaultReadLimit(self) -> Any:
            cap = self.config.max_messages_per_trigger
            return ReadMaxRows(cap) if cap else ReadAllAvailable()

        def reportLatestOffset(self) -> dict[str, Any] | None:
            return self._latest_seen

    def prepareForTriggerAvailableNow(self) -> None:
        client = broker_client(self.config)
        tps = resolve_topic_partitions(client, self.config)
        self._target = {tp: client.last_position(tp) for tp in tps}

    # ------------------------------------------------------------------ planning and reading
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[QuasarPartition]:
        self._last_end = end
        begin, finish = Offset.from_json(start), Offset.from_json(end)
        starts = begin.positions
        if begin.initial and finish.start_of_first_batch is not None:
            starts = finish.start_of_first_batch  # batch 0, possibly replayed: its recorded start
        return plan_partitions(
            starts,
            finish.positions,
            min_partitions=self.config.min_partitions,
            fail_on_data_loss=self.config.fail_on_data_loss,
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QuasarPartition)
        return read_partition(self.config, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished the batch ending at ``end`` (called one batch late). With the ``subscription``
        option, that durable subscription is moved to ``end`` so the broker can trim; nothing else."""
        subscription = self.config.subscription
        if subscription is None:
            return
        client = broker_client(self.config)
        for tp, position in Offset.from_json(end).positions.items():
            client.advance_subscription(tp, subscription, position)
