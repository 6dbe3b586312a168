"""Latency recording and reporting for ``quasar perf``: HdrHistogram recorders, the per-second progress line,
the HDR log file and the final summary.

Latencies are recorded in **microseconds** into ``hdrh`` histograms (3 significant digits, 1 us .. 1 hour;
longer values are clamped to the top). A :class:`LatencyRecorder` is written from client callback threads
(the official client's I/O thread, our client's event-loop thread) under a lock; the reporter thread swaps out
the interval histogram once a second (``pulsar-perf``'s ``Recorder.getIntervalHistogram``), prints one progress
line, appends the interval to the HDR log, and adds it to the run's total histogram.

The HDR log (``--histogram-file``) is HdrHistogram's interval log format 1.2 as written by
``HistogramLogWriter`` (Java and ``hdrh.log``): ``#[StartTime: ...]`` / ``#[BaseTime: ...]`` comments, the
legend, then one ``start,length,max,HISTFAAA...`` line per second with times in seconds relative to the base
time and the max in milliseconds. ``hdrh.log.HistogramLogReader`` reads it back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter
from rich.console import Console
from rich.table import Table

__all__ = [
    "HIGHEST_TRACKABLE_US",
    "HdrLog",
    "IntervalStats",
    "LatencyRecorder",
    "Reporter",
    "RunSummary",
    "new_histogram",
]

#: Largest latency (us) a histogram tracks; larger values are recorded as this.
HIGHEST_TRACKABLE_US = 3_600_000_000
#: Percentiles of the progress line and of the summary.
LINE_PERCENTILES = (50.0, 99.0, 99.9)
SUMMARY_PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)
_MB = 1024 * 1024


def new_histogram() -> HdrHistogram:
    """An empty latency histogram: 1 us .. :data:`HIGHEST_TRACKABLE_US`, 3 significant digits."""
    return HdrHistogram(1, HIGHEST_TRACKABLE_US, 3)


@dataclass(frozen=True)
class IntervalStats:
    """What one reporting interval saw: ``messages`` and payload ``bytes`` completed, ``failures``, the interval's
    ``histogram`` (us), and its clock bounds ``start`` / ``end`` (seconds since the run started)."""

    messages: int
    bytes: int
    failures: int
    histogram: HdrHistogram
    start: float
    end: float


class LatencyRecorder:
    """Counts and latencies, recorded from any thread.

    ``record(latency_us, nbytes)`` is called once per completed message (negative latencies, e.g. from clock
    skew between hosts, count as 0); ``record_failure(error)`` once per failed send. :meth:`take_interval`
    returns what was recorded since the previous call and starts a new interval.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._histogram = new_histogram()
        self._messages = 0
        self._bytes = 0
        self._failures = 0
        self.completed = 0  # messages recorded or failed since the start, never reset
        self.first_error: object = None

    def record(self, latency_us: int, nbytes: int) -> None:
        """Record one completed message of ``nbytes`` payload bytes that took ``latency_us`` microseconds."""
        value = (
            0 if latency_us < 0 else HIGHEST_TRACKABLE_US if latency_us > HIGHEST_TRACKABLE_US else latency_us
        )
        with self._lock:
            self._histogram.record_value(value)
            self._messages += 1
            self._bytes += nbytes
            self.completed += 1

    def record_failure(self, error: object) -> None:
        """Count one failed message; the first ``error`` is kept for the summary."""
        with self._lock:
            self._failures += 1
            self.completed += 1
            if self.first_error is None:
                self.first_error = error

    def take_interval(self, start: float, end: float) -> IntervalStats:
        """Everything recorded since the last call, as an :class:`IntervalStats` bounded by ``start`` / ``end``
        (seconds since the run started)."""
        fresh = new_histogram()
        with self._lock:
            histogram, self._histogram = self._histogram, fresh
            messages, self._messages = self._messages, 0
            nbytes, self._bytes = self._bytes, 0
            failures, self._failures = self._failures, 0
        return IntervalStats(messages, nbytes, failures, histogram, start, end)


class HdrLog:
    """An HdrHistogram interval log file (format 1.2) written with ``hdrh.log.HistogramLogWriter``.

    Args:
        stream: a text file opened for writing; closed by :meth:`close`.

    :meth:`begin` writes the header once the run's start is known; :meth:`write` appends intervals.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._writer = HistogramLogWriter(stream)
        self._stream = stream
        self._base_ms = 0.0

    def begin(self, base_time_s: float) -> None:
        """Write the header: ``base_time_s`` (wall clock, seconds since the epoch) is the run's start, which
        interval times are relative to (``#[StartTime: ...]``, ``#[BaseTime: ...]``)."""
        stream = self._stream
        self._base_ms = base_time_s * 1000.0
        self._writer.base_time = self._base_ms
        when = datetime.fromtimestamp(base_time_s, tz=UTC).isoformat(" ")
        self._writer.output_comment("Logged with quasar perf (latencies in microseconds)")
        self._writer.output_log_format_version()
        # hdrh's output_start_time formats the date wrongly; this is the line Java's writer emits.
        stream.write(f"#[StartTime: {base_time_s:f} (seconds since epoch), {when}]\n")
        self._writer.output_base_time(self._base_ms)
        self._writer.output_legend()

    @classmethod
    def create(cls, path: str) -> HdrLog:
        """Open (truncate) ``path`` for the log.

        Raises:
            OSError: the file cannot be written.
        """
        stream = open(path, "w", encoding="utf-8")  # noqa: SIM115 - owned by the log, closed by close()
        return cls(stream)

    def write(self, interval: IntervalStats) -> None:
        """Append one interval (its times are seconds since the base time)."""
        histogram = interval.histogram
        histogram.set_start_time_stamp(self._base_ms + interval.start * 1000.0)
        histogram.set_end_time_stamp(self._base_ms + interval.end * 1000.0)
        self._writer.output_interval_histogram(histogram, max_value_unit_ratio=1000.0)
        self._stream.flush()

    def close(self) -> None:
        """Close the file."""
        self._stream.close()


@dataclass(frozen=True)
class RunSummary:
    """The totals of a run: ``messages`` completed, payload ``bytes``, ``failures``, ``elapsed`` seconds and the
    run's total latency ``histogram`` (us)."""

    messages: int
    bytes: int
    failures: int
    elapsed: float
    histogram: HdrHistogram

    @property
    def rate(self) -> float:
        """Messages per second over the run."""
        return self.messages / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def throughput_mb(self) -> float:
        """Payload MB (2**20 bytes) per second over the run."""
        return self.bytes / _MB / self.elapsed if self.elapsed > 0 else 0.0


def _ms(histogram: HdrHistogram, percentile: float) -> float:
    return histogram.get_value_at_percentile(percentile) / 1000.0 if histogram.get_total_count() else 0.0


def _max_ms(histogram: HdrHistogram) -> float:
    return histogram.get_max_value() / 1000.0 if histogram.get_total_count() else 0.0


class Reporter:
    """Prints one progress line per interval and keeps the run's totals.

    Args:
        verb: what a message went through, for the line: ``"produced"`` or ``"consumed"``.
        recorder: the run's :class:`LatencyRecorder`.
        console: where lines and the summary go.
        hdr_log: the ``--histogram-file`` log, or None.
        extra: called for a suffix of each line (e.g. the producers' pending count), or None.
        clock: monotonic clock (s).
        wall: wall clock (s since the epoch), for the HDR log's start time.
    """

    def __init__(
        self,
        verb: str,
        recorder: LatencyRecorder,
        console: Console,
        *,
        hdr_log: HdrLog | None = None,
        extra: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.verb = verb
        self.wall = wall
        self.recorder = recorder
        self.console = console
        self.hdr_log = hdr_log
        self.extra = extra
        self.clock = clock
        self.total = new_histogram()
        self.messages = 0
        self.bytes = 0
        self.failures = 0
        self.start = clock()
        self._last = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def restart(self, start: float) -> None:
        """Make clock time ``start`` the beginning of the run (and of the first interval); call once, before
        :meth:`run_in_background`. Writes the HDR log's header."""
        self.start = start
        self._last = 0.0
        if self.hdr_log is not None:
            self.hdr_log.begin(self.wall() - (self.clock() - start))

    def tick(self) -> IntervalStats:
        """Close the current interval: print its line, log it, add it to the totals."""
        now = self.clock() - self.start
        interval = self.recorder.take_interval(self._last, now)
        self._last = now
        self.messages += interval.messages
        self.bytes += interval.bytes
        self.failures += interval.failures
        self.total.add(interval.histogram)
        if self.hdr_log is not None:
            self.hdr_log.write(interval)
        self.console.print(self.progress_line(interval), highlight=False)
        return interval

    def progress_line(self, interval: IntervalStats) -> str:
        """One line: totals so far, this interval's rate (msg/s, MB/s) and latency percentiles (ms)."""
        length = interval.end - interval.start
        rate = interval.messages / length if length > 0 else 0.0
        mb = interval.bytes / _MB / length if length > 0 else 0.0
        histogram = interval.histogram
        latencies = " ".join(f"p{p:g} {_ms(histogram, p):.3f}" for p in LINE_PERCENTILES)
        line = (
            f"[{interval.end:6.1f}s] {self.messages} msgs {self.verb} | {rate:10.1f} msg/s {mb:8.3f} MB/s"
            f" | latency ms {latencies} max {_max_ms(histogram):.3f}"
        )
        if interval.failures:
            line += f" | [red]{interval.failures} failed[/red]"
        if self.extra is not None:
            line += self.extra()
        return line

    def run_in_background(self, period: float = 1.0) -> None:
        """Start the reporter thread: :meth:`tick` every ``period`` seconds until :meth:`stop`."""

        def loop() -> None:
            next_tick = self.start + period
            while not self._stop.wait(max(0.0, next_tick - self.clock())):
                self.tick()
                next_tick += period

        self._thread = threading.Thread(target=loop, name="quasar-perf-reporter", daemon=True)
        self._thread.start()

    def stop(self) -> RunSummary:
        """Stop the reporter thread, close the last interval (printing it if it saw anything) and return the
        run's totals."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        now = self.clock() - self.start
        if now > self._last:
            self.tick()
        if self.hdr_log is not None:
            self.hdr_log.close()
        return RunSummary(self.messages, self.bytes, self.failures, self._last, self.total)

    def print_summary(self, title: str, summary: RunSummary, count_label: str) -> None:
        """Print the final summary table (``count_label``: e.g. ``"Messages sent"``)."""
        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column("what")
        table.add_column("value", justify="right")
        table.add_row(count_label, str(summary.messages))
        table.add_row("Failed", str(summary.failures))
        table.add_row("Duration s", f"{summary.elapsed:.3f}")
        table.add_row("Rate msg/s", f"{summary.rate:.1f}")
        table.add_row("Throughput MB/s", f"{summary.throughput_mb:.3f}")
        histogram = summary.histogram
        mean = histogram.get_mean_value() / 1000.0 if histogram.get_total_count() else 0.0
        table.add_row("Latency mean ms", f"{mean:.3f}")
        for percentile in SUMMARY_PERCENTILES:
            table.add_row(f"Latency p{percentile:g} ms", f"{_ms(histogram, percentile):.3f}")
        table.add_row("Latency max ms", f"{_max_ms(histogram):.3f}")
        self.console.print(table)
