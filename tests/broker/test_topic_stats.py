"""topic_stats: Pulsar's latency buckets (bounds inclusive, overflow past 1 s, count and sum in ms) and the
per-period rates of a RateMeter."""

from __future__ import annotations

import pytest

from quasar.broker.topic_stats import LATENCY_BUCKET_SUFFIXES, LatencyBuckets, RateMeter


@pytest.mark.parametrize(
    ("seconds", "suffix"),
    [
        (0.0, "le_0_5"),
        (0.0005, "le_0_5"),  # the bound itself belongs to its bucket (Pulsar: <= 0.5 ms)
        (0.00051, "le_1"),
        (0.003, "le_5"),
        (0.2, "le_200"),
        (0.2001, "le_1000"),
        (1.0, "le_1000"),
        (1.5, "le_overflow"),
        (-0.1, "le_0_5"),  # a clock that went back counts as 0
    ],
)
def test_an_observation_lands_in_pulsars_bucket(seconds: float, suffix: str) -> None:
    buckets = LatencyBuckets()
    buckets.observe(seconds)
    assert buckets.counts[LATENCY_BUCKET_SUFFIXES.index(suffix)] == 1
    assert sum(buckets.counts) == buckets.count == 1
    assert buckets.sum_ms == pytest.approx(max(seconds, 0) * 1000)


def test_weighted_observations_and_adding_buckets() -> None:
    a, b = LatencyBuckets(), LatencyBuckets()
    a.observe(0.002, 5)  # a dispatch round that sent five messages
    b.observe(2.0)
    a.add(b)
    assert a.count == 6 and a.counts[LATENCY_BUCKET_SUFFIXES.index("le_5")] == 5
    assert a.counts[-1] == 1 and a.sum_ms == pytest.approx(5 * 2 + 2000)


def test_rate_meter_reports_the_last_period() -> None:
    meter = RateMeter()
    meter.update(100.0, 0, 0)
    assert (meter.msg_rate, meter.throughput) == (0.0, 0.0)  # the first call only starts a period
    meter.update(102.0, 50, 5000)
    assert (meter.msg_rate, meter.throughput) == (25.0, 2500.0)
    meter.update(104.0, 50, 5000)
    assert (meter.msg_rate, meter.throughput) == (0.0, 0.0)  # nothing in the last period
    meter.update(105.0, 10, 100)  # counters went back (topic reloaded): a new period starts, no negative rate
    assert meter.msg_rate >= 0 and meter.throughput >= 0
