"""Per-topic counters, rates and latency buckets that ``GET {topic}/stats`` and ``GET /metrics`` both read.

Pulsar keeps the same numbers on its topics (``AbstractTopic`` msgIn/bytesIn counters, the managed ledger's
``addEntryLatencyStatsUsec`` buckets) and turns counters into rates once per ``statsUpdateFrequencyInSecs``
(``BrokerService.updateRates``); the broker's ``metrics.rates.StatsUpdater`` does that here. Every update on
the hot path is O(1) per entry (a SEND, a dispatched entry), never per message of a batch, and is a plain
increment on the event loop thread.

Latency buckets follow Pulsar's ``ENTRY_LATENCY_BUCKETS_USEC`` (upper bounds 0.5, 1, 5, 10, 20, 50, 100,
200, 1000 ms, then overflow): each bucket counts the observations in ``(previous bound, bound]``, as Pulsar's
``StatsBuckets`` (not Prometheus' cumulative ``le``), but the counts grow from the broker's start instead of
restarting every stats period, so Prometheus' ``rate()`` works on them.
"""

from __future__ import annotations

import bisect

__all__ = [
    "LATENCY_BUCKETS_MS",
    "LATENCY_BUCKET_SUFFIXES",
    "LatencyBuckets",
    "RateMeter",
    "TopicCounters",
]

LATENCY_BUCKETS_MS: tuple[float, ...] = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Upper bounds (ms, inclusive) of Pulsar's entry latency buckets; a last bucket takes the overflow."""

LATENCY_BUCKET_SUFFIXES: tuple[str, ...] = (
    "le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "le_overflow",
)  # fmt: skip
"""Pulsar's metric name suffixes of the buckets, in order (``pulsar_storage_write_latency_le_0_5`` ...)."""

_BOUNDS_S = tuple(bound / 1000 for bound in LATENCY_BUCKETS_MS)


class LatencyBuckets:
    """Counts of latencies in Pulsar's buckets (module docstring), their number and their sum (ms).

    ``counts[i]`` is the number of observations in bucket ``i`` (``LATENCY_BUCKET_SUFFIXES[i]``); ``count``
    is their total and ``sum_ms`` the sum of the observed latencies in milliseconds. Loop thread only.
    """

    __slots__ = ("count", "counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def observe(self, seconds: float, n: int = 1) -> None:
        """Record ``n`` observations of ``seconds`` (a negative value counts as 0). O(log 10)."""
        if seconds < 0:
            seconds = 0.0
        self.counts[bisect.bisect_left(_BOUNDS_S, seconds)] += n
        self.count += n
        self.sum_ms += seconds * 1000 * n

    def add(self, other: LatencyBuckets) -> None:
        """Add ``other``'s counts to these (namespace aggregation)."""
        for i, value in enumerate(other.counts):
            self.counts[i] += value
        self.count += other.count
        self.sum_ms += other.sum_ms


class RateMeter:
    """Messages and bytes per second between the last two :meth:`update` calls (Pulsar's ``Rate``: the
    counters are cumulative, the rates are the deltas over the stats period)."""

    __slots__ = ("_last_bytes", "_last_msgs", "_last_s", "msg_rate", "throughput")

    def __init__(self) -> None:
        self._last_s: float | None = None
        self._last_msgs = 0
        self._last_bytes = 0
        self.msg_rate = 0.0
        """Messages per second over the last period."""
        self.throughput = 0.0
        """Bytes per second over the last period."""

    def update(self, now_s: float, msgs: int, nbytes: int) -> None:
        """Close a period at ``now_s`` (monotonic seconds) with the cumulative ``msgs`` and ``nbytes``; the
        first call only starts the first period. A counter that went back (a topic reloaded) restarts it."""
        last = self._last_s
        if last is not None and now_s > last and msgs >= self._last_msgs and nbytes >= self._last_bytes:
            elapsed = now_s - last
            self.msg_rate = (msgs - self._last_msgs) / elapsed
            self.throughput = (nbytes - self._last_bytes) / elapsed
        self._last_s, self._last_msgs, self._last_bytes = now_s, msgs, nbytes


class TopicCounters:
    """What a topic counts for its stats and metrics (loop thread only).

    - ``msg_in`` / ``bytes_in``: messages and bytes published to the topic since it was loaded (every
      producer, also the ones gone since; Pulsar's topic ``msgInCounter`` / ``bytesInCounter``); bytes are
      the stored entry bytes (metadata + payload) of each SEND, as Pulsar counts them.
    - ``msg_out_removed`` / ``bytes_out_removed``: what subscriptions deleted since had dispatched (Pulsar's
      ``msgOutFromRemovedSubscriptions``), so the topic's out counters never go back.
    - ``publish_latency``: SEND handled -> SEND_RECEIPT written, per entry.
    - ``storage_write_latency``: the managed ledger's add (a commit log put and, with SYNC_FLUSH, its group
      commit) -> durable, per entry (Pulsar's ``pulsar_storage_write_latency``).
    - ``dispatch_latency``: a dispatch round asked for (new entries persisted, permits granted, acks,
      redeliveries) -> the round that wrote the messages to the consumers' connections, per message.
    - ``rate_in`` / ``rate_out``: :class:`RateMeter` over the stats period.
    """

    __slots__ = (
        "bytes_in",
        "bytes_out_removed",
        "dispatch_latency",
        "msg_in",
        "msg_out_removed",
        "publish_latency",
        "rate_in",
        "rate_out",
        "storage_write_latency",
    )

    def __init__(self) -> None:
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_out_removed = 0
        self.bytes_out_removed = 0
        self.publish_latency = LatencyBuckets()
        self.storage_write_latency = LatencyBuckets()
        self.dispatch_latency = LatencyBuckets()
        self.rate_in = RateMeter()
        self.rate_out = RateMeter()
