"""Broker-wide metrics: the RocketMQ-style store (``quasar_store_*``), replication lag per slave
(``quasar_replication_*``) and the event loop's lag (``quasar_event_loop_lag_*``), read at scrape time.

The store is read through :class:`StoreView` (duck-typed: ``quasar.broker`` does not import
``quasar.storage``; the composition root hands the ``MessageStore`` in). Units: bytes, ratios in 0..1,
latencies in ms (Pulsar-style ``_le_*`` buckets, ``topic_stats``).

- ``quasar_store_commit_log_max_offset_bytes``: end of the written commit log (its max offset);
  ``quasar_store_commit_log_min_offset_bytes``: start of the oldest segment kept;
  ``quasar_store_commit_log_size_bytes``: their difference (what retention keeps on disk);
- ``quasar_store_flush_lag_bytes``: written but not yet fdatasynced commit log bytes;
- ``quasar_store_reput_lag_bytes``: commit log bytes not yet dispatched to the index (RocketMQ's
  ``dispatchBehindBytes``); consume queue units are written inline by ``put``, so they never lag;
- ``quasar_store_index_entries``: keys held by the index files;
- ``quasar_store_disk_used_ratio``: used fraction of the file system holding the store;
- ``quasar_store_writable`` / ``quasar_store_disk_full``: 1 or 0;
- ``quasar_store_consume_queues``: consume queue (topic partition) count;
- ``quasar_store_flush_latency_le_*``: SYNC_FLUSH group commit rounds by fdatasync time;
- ``quasar_replication_slave_lag_bytes{slave}`` / ``..._in_sync`` / ``..._connected``: on a master, per slave
  broker id, how far its acknowledged commit log offset is behind the master's max offset;
- ``quasar_event_loop_lag_ms``: the lag of the loop-lag monitor's last tick;
  ``quasar_event_loop_lag_le_*``: ticks by lag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from quasar.broker.loop_lag import LoopLagMonitor
from quasar.broker.metrics.families import Families
from quasar.broker.topic_stats import LatencyBuckets

__all__ = ["BrokerMetricsCollector", "StoreView"]


class _Statistics(Protocol):
    @property
    def min_commit_log_offset(self) -> int: ...
    @property
    def max_commit_log_offset(self) -> int: ...
    @property
    def flushed_commit_log_offset(self) -> int: ...
    @property
    def dispatch_behind_bytes(self) -> int: ...
    @property
    def consume_queues(self) -> int: ...
    @property
    def writable(self) -> bool: ...
    @property
    def disk_full(self) -> bool: ...


class _IndexFile(Protocol):
    @property
    def index_count(self) -> int: ...


class _IndexService(Protocol):
    @property
    def files(self) -> Sequence[_IndexFile]: ...


class _Retention(Protocol):
    @property
    def disk_usage(self) -> Callable[[Path], float]: ...


class _Config(Protocol):
    @property
    def root_dir(self) -> Path: ...


class StoreView(Protocol):
    """What the metrics read of ``quasar.storage.MessageStore``."""

    @property
    def config(self) -> _Config: ...
    @property
    def index_service(self) -> _IndexService: ...
    @property
    def retention(self) -> _Retention: ...

    def statistics(self) -> _Statistics: ...


class BrokerMetricsCollector(Collector):
    """Collects the store's gauges, ``flush_latency`` (filled by the store's flush latency observer),
    ``replication_status()`` (``ReplicationPort.status``; None without replication) and ``loop_lag``.
    Runs on the event loop thread, in the ``/metrics`` handler; one statvfs per scrape."""

    def __init__(
        self,
        cluster: str,
        *,
        store: StoreView | None,
        flush_latency: LatencyBuckets,
        replication_status: Callable[[], dict[str, Any]] | None,
        loop_lag: LoopLagMonitor,
    ) -> None:
        self._labels = {"cluster": cluster}
        self._store = store
        self._flush_latency = flush_latency
        self._replication_status = replication_status
        self._loop_lag = loop_lag

    def collect(self) -> Iterator[Metric]:
        out = Families()
        if self._store is not None:
            self._collect_store(out, self._store)
        if self._replication_status is not None:
            self._collect_replication(out, self._replication_status())
        labels = self._labels
        out.gauge(
            "quasar_event_loop_lag_ms",
            "Lag of the event loop's last monitor tick (ms)",
            labels,
            self._loop_lag.last_lag_s * 1000,
        )
        out.buckets(
            "quasar_event_loop_lag",
            "Event loop monitor ticks by lag (ms)",
            labels,
            self._loop_lag.lag_buckets,
        )
        yield from out

    def _collect_store(self, out: Families, store: StoreView) -> None:
        labels = self._labels
        stats = store.statistics()
        top = stats.max_commit_log_offset
        out.gauge(
            "quasar_store_commit_log_max_offset_bytes", "End of the written commit log (bytes)", labels, top
        )
        out.gauge(
            "quasar_store_commit_log_min_offset_bytes",
            "Start of the oldest commit log segment kept (bytes)",
            labels,
            stats.min_commit_log_offset,
        )
        out.gauge(
            "quasar_store_commit_log_size_bytes",
            "Commit log bytes kept on disk",
            labels,
            top - stats.min_commit_log_offset,
        )
        out.gauge(
            "quasar_store_flush_lag_bytes",
            "Commit log bytes written but not yet flushed",
            labels,
            max(0, top - stats.flushed_commit_log_offset),
        )
        out.gauge(
            "quasar_store_reput_lag_bytes",
            "Commit log bytes not yet dispatched to the index",
            labels,
            stats.dispatch_behind_bytes,
        )
        index_entries = sum(max(0, f.index_count - 1) for f in list(store.index_service.files))
        out.gauge("quasar_store_index_entries", "Keys held by the index files", labels, index_entries)
        out.gauge(
            "quasar_store_disk_used_ratio",
            "Used fraction of the store's file system (0..1)",
            labels,
            store.retention.disk_usage(store.config.root_dir),
        )
        out.gauge(
            "quasar_store_consume_queues",
            "Consume queues (topic partitions) in the store",
            labels,
            stats.consume_queues,
        )
        out.gauge("quasar_store_writable", "1 while the store accepts writes", labels, int(stats.writable))
        out.gauge(
            "quasar_store_disk_full", "1 while the disk guard refuses writes", labels, int(stats.disk_full)
        )
        out.buckets(
            "quasar_store_flush_latency",
            "Group commit rounds by fdatasync latency (ms)",
            labels,
            self._flush_latency,
        )

    def _collect_replication(self, out: Families, status: dict[str, Any]) -> None:
        slaves = status.get("slaves")
        if status.get("role") != "master" or not isinstance(slaves, dict):
            return
        top = int(status.get("maxOffset", 0))
        group = str(status.get("group", ""))
        for broker_id, slave in slaves.items():
            labels = {**self._labels, "broker_group": group, "slave": str(broker_id)}
            lag = max(0, top - int(slave.get("ackedOffset", 0)))
            out.gauge(
                "quasar_replication_slave_lag_bytes",
                "Master commit log bytes the slave has not acknowledged",
                labels,
                lag,
            )
            out.gauge(
                "quasar_replication_slave_in_sync",
                "1 while the slave is in the sync state set",
                labels,
                int(bool(slave.get("inSync"))),
            )
            out.gauge(
                "quasar_replication_slave_connected",
                "1 while the slave is connected",
                labels,
                int(bool(slave.get("connected"))),
            )
