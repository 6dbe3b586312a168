"""BrokerMetricsCollector in process: replication lag per slave on a master (none on a slave or without
replication), the store's gauges from its statistics, index files and disk, and the flush histogram."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quasar.broker.loop_lag import LoopLagMonitor
from quasar.broker.metrics import BrokerMetricsCollector, new_registry
from quasar.broker.topic_stats import LatencyBuckets


@dataclass
class _Stats:
    min_commit_log_offset: int = 1000
    max_commit_log_offset: int = 5000
    flushed_commit_log_offset: int = 4200
    dispatch_behind_bytes: int = 300
    consume_queues: int = 3
    writable: bool = True
    disk_full: bool = False


@dataclass
class _IndexFile:
    index_count: int  # RocketMQ's header count: entries + 1


@dataclass
class _Index:
    files: list[_IndexFile] = field(default_factory=lambda: [_IndexFile(11), _IndexFile(6)])


@dataclass
class _Retention:
    def disk_usage(self, path: Path) -> float:
        return 0.25


@dataclass
class _Config:
    root_dir: Path = Path("/nonexistent")


@dataclass
class _Store:
    config: _Config = field(default_factory=_Config)
    index_service: _Index = field(default_factory=_Index)
    retention: _Retention = field(default_factory=_Retention)

    def statistics(self) -> _Stats:
        return _Stats()


def _scrape(status: dict[str, Any] | None, store: _Store | None = None) -> dict[tuple[str, tuple], float]:
    flush = LatencyBuckets()
    flush.observe(0.003)
    flush.observe(0.030)
    collector = BrokerMetricsCollector(
        "c1",
        store=store,  # type: ignore[arg-type]
        flush_latency=flush,
        replication_status=(lambda: status) if status is not None else None,
        loop_lag=LoopLagMonitor(),
    )
    text = generate_latest(new_registry(collector, process=False)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_master_reports_each_slaves_lag_in_sync_and_connection() -> None:
    status = {
        "role": "master",
        "group": "g1",
        "maxOffset": 10_000,
        "slaves": {
            "1": {"connected": True, "ackedOffset": 10_000, "inSync": True},
            "2": {"connected": False, "ackedOffset": 6_500, "inSync": False},
        },
    }
    samples = _scrape(status)

    def get(name: str, slave: str) -> float:
        return samples[(name, (("broker_group", "g1"), ("cluster", "c1"), ("slave", slave)))]

    assert get("quasar_replication_slave_lag_bytes", "1") == 0
    assert get("quasar_replication_slave_lag_bytes", "2") == 3_500
    assert (
        get("quasar_replication_slave_in_sync", "1") == 1
        and get("quasar_replication_slave_in_sync", "2") == 0
    )
    assert get("quasar_replication_slave_connected", "2") == 0


def test_a_slave_or_a_broker_without_replication_reports_no_replication_metrics() -> None:
    for status in (None, {"role": "slave", "maxOffset": 5, "haClient": {}}):
        assert not any(name.startswith("quasar_replication_") for name, _ in _scrape(status))


def test_store_gauges_come_from_the_stores_statistics() -> None:
    samples = _scrape(None, _Store())
    cluster = (("cluster", "c1"),)
    assert samples[("quasar_store_commit_log_max_offset_bytes", cluster)] == 5000
    assert samples[("quasar_store_commit_log_size_bytes", cluster)] == 4000
    assert samples[("quasar_store_flush_lag_bytes", cluster)] == 800
    assert samples[("quasar_store_reput_lag_bytes", cluster)] == 300
    assert samples[("quasar_store_index_entries", cluster)] == 10 + 5
    assert samples[("quasar_store_disk_used_ratio", cluster)] == 0.25
    assert samples[("quasar_store_flush_latency_count", cluster)] == 2
    assert samples[("quasar_store_flush_latency_le_5", cluster)] == 1
    assert samples[("quasar_store_flush_latency_le_50", cluster)] == 1
