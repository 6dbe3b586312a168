"""``quasar perf`` parts without a broker: the fixed-rate schedule, the coordinated-omission correction (with a
fake clock), the recorder, the HDR log round trip and option checks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from quasar.cli.main import main
from quasar.cli.perf_clients import probe_service_url
from quasar.cli.perf_consume import ConsumeRun, end_to_end_us
from quasar.cli.perf_options import topic_names
from quasar.cli.perf_pacing import FixedRatePacer
from quasar.cli.perf_produce import ProduceRun
from quasar.cli.perf_stats import HdrLog, LatencyRecorder, Reporter


class FakeClock:
    """A clock that only moves when slept on (or when a fake producer stalls)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps += 1
        self.now += seconds


class ListRecorder(LatencyRecorder):
    """Keeps every recorded latency (us) in order as well."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[int] = []

    def record(self, latency_us: int, nbytes: int) -> None:
        self.values.append(latency_us)
        super().record(latency_us, nbytes)


class FakeProducer:
    """Acknowledges every message at once; message ``stall_at`` (counted over all fakes sharing ``calls``) first
    stalls the clock by ``stall_s``; each send costs ``send_cost_s``."""

    def __init__(self, clock: FakeClock, calls: list[int], stall_at: int = -1, stall_s: float = 0.0,
                 send_cost_s: float = 0.0) -> None:  # fmt: skip
        self.clock, self.calls = clock, calls
        self.stall_at, self.stall_s, self.send_cost_s = stall_at, stall_s, send_cost_s
        self.payloads: list[bytes] = []

    def send_async(self, payload: bytes, callback: Any) -> None:
        index = len(self.calls)
        self.calls.append(index)
        self.payloads.append(payload)
        if index == self.stall_at:
            self.clock.now += self.stall_s
        self.clock.now += self.send_cost_s
        callback(None, index)


def make_run(clock: FakeClock, rate: float, producers: list[FakeProducer], recorder: LatencyRecorder,
             **kwargs: Any) -> ProduceRun:  # fmt: skip
    pacer = FixedRatePacer(rate, clock=clock, sleep=clock.sleep)
    pacer.restart()
    return ProduceRun(producers, b"x" * 10, pacer, recorder, lambda result: result is None, **kwargs)


# -- pacing ---------------------------------------------------------------------------------------------------


def test_intended_times_follow_start_plus_index_over_rate() -> None:
    clock = FakeClock(50.0)
    pacer = FixedRatePacer(200, clock=clock, sleep=clock.sleep)
    assert pacer.restart() == 50.0
    assert [pacer.intended_time(i) for i in (0, 1, 200, 1000)] == [50.0, 50.005, 51.0, 55.0]
    assert pacer.due_count(49.0) == 0
    assert pacer.due_count(50.0) == 1  # message 0 is due at the start
    assert pacer.due_count(50.0049) == 1
    assert pacer.due_count(50.005) == 2
    # due_count agrees with intended_time even where floating point rounds (0.29 * 100 < 29)
    slow = FixedRatePacer(100, clock=clock, sleep=clock.sleep)
    for index in range(1, 400):
        assert slow.due_count(slow.intended_time(index)) == index + 1


def test_wait_until_due_sleeps_to_the_intended_time_and_rate_zero_has_no_schedule() -> None:
    clock = FakeClock()
    pacer = FixedRatePacer(10, clock=clock, sleep=clock.sleep)
    pacer.restart()
    pacer.wait_until_due(7)
    assert clock.now == pytest.approx(1000.7)
    clock.sleeps = 0
    pacer.wait_until_due(3)  # already late: no sleep
    assert clock.sleeps == 0
    stop = threading.Event()
    stop.set()
    pacer.wait_until_due(1000, stop.is_set)  # a stop request ends the wait
    assert clock.now == pytest.approx(1000.7)
    unpaced = FixedRatePacer(0, clock=clock, sleep=clock.sleep)
    assert unpaced.intended_time(12345) == clock.now
    unpaced.wait_until_due(10**9)
    assert clock.now == pytest.approx(1000.7)


@pytest.mark.parametrize("rate", [-1, float("nan"), float("inf")])
def test_bad_rates_are_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="rate"):
        FixedRatePacer(rate)


# -- produce loop -----------------------------------------------------------------------------------------------


def test_a_stall_is_charged_to_every_message_it_delayed() -> None:
    """Coordinated omission: at 100 msg/s a 1 s stall on message 10 delays messages 11..109 too; each is charged
    from its intended time, so about half a second of messages see >= 455 ms, not just the stalled one."""
    clock = FakeClock()
    calls: list[int] = []
    producers = [FakeProducer(clock, calls, stall_at=10, stall_s=1.0)]
    recorder = ListRecorder()
    run = make_run(clock, 100, producers, recorder, num_messages=300)
    assert run.run(threading.Event()) == 300
    values = recorder.values
    assert len(values) == 300
    assert values[:10] == [0] * 10
    assert values[10] == pytest.approx(1_000_000, abs=2)  # the stalled send itself
    assert values[11] == pytest.approx(990_000, abs=2)  # intended at 0.11 s, sent at 1.10 s
    assert values[64] == pytest.approx(460_000, abs=2)
    assert sum(1 for value in values if value >= 455_000) == 55  # messages 10..64
    assert all(value <= 1 for value in values[110:])  # back on schedule
    assert run.wait_for_receipts(1.0, clock.sleep) == 0


def test_rate_zero_measures_from_the_call_and_messages_rotate_over_producers() -> None:
    clock = FakeClock()
    calls: list[int] = []
    producers = [FakeProducer(clock, calls, send_cost_s=0.002) for _ in range(3)]
    recorder = ListRecorder()
    run = make_run(clock, 0, producers, recorder, num_messages=10)
    assert run.run(threading.Event()) == 10
    assert recorder.values == [2000] * 10
    assert [len(p.payloads) for p in producers] == [4, 3, 3]


def test_the_duration_stops_a_paced_run_and_failures_are_counted() -> None:
    clock = FakeClock()
    recorder = LatencyRecorder()
    pacer = FixedRatePacer(100, clock=clock, sleep=clock.sleep)
    pacer.restart()

    class Failing:
        def send_async(self, payload: bytes, callback: Any) -> None:
            callback("ProducerBlockedQuotaExceededError", None)

    run = ProduceRun([Failing()], b"", pacer, recorder, lambda result: result is None, duration_s=2.0)
    assert run.run(threading.Event()) == 200  # messages 0..199 are due before the 2 s deadline
    interval = recorder.take_interval(0, 2)
    assert (interval.messages, interval.failures) == (0, 200)
    assert recorder.first_error == "ProducerBlockedQuotaExceededError"


def test_a_produce_run_needs_a_producer() -> None:
    with pytest.raises(ValueError, match="at least one producer"):
        ProduceRun([], b"", FixedRatePacer(1), LatencyRecorder(), bool)


# -- consume loop -----------------------------------------------------------------------------------------------


def test_consume_records_latency_from_the_publish_timestamp_and_stops_at_the_count() -> None:
    class Message:
        def __init__(self, published_ms: int) -> None:
            self.published_ms = published_ms

        def publish_timestamp(self) -> int:
            return self.published_ms

        def data(self) -> bytes:
            return b"12345"

    class Consumer:
        def __init__(self) -> None:
            self.queue = [Message(1_000), Message(1_004), Message(1_009)]
            self.acked: list[Message] = []

        def receive(self, timeout_millis: int) -> Message:
            if not self.queue:
                raise TimeoutError
            return self.queue.pop(0)

        def acknowledge(self, message: Message) -> None:
            self.acked.append(message)

    consumer = Consumer()
    recorder = ListRecorder()
    run = ConsumeRun([consumer], recorder, lambda exc: isinstance(exc, TimeoutError), num_messages=2,
                     wall_ns=lambda: 1_010_000_000)  # fmt: skip
    run.receive_loop(consumer)
    assert recorder.values == [10_000, 6_000]  # stopped at the count: the third message stays queued
    assert len(consumer.acked) == 2 and run.error is None
    assert end_to_end_us(1_000, 999_000_000) == -1_000  # clock skew: recorded as 0 by the recorder


# -- recorder and HDR log ---------------------------------------------------------------------------------------


def test_recorder_intervals_and_the_hdr_log_round_trip(tmp_path: Path) -> None:
    recorder = LatencyRecorder()
    for value in (100, 200, 300):
        recorder.record(value, 10)
    recorder.record(-5, 10)  # clock skew counts as 0
    first = recorder.take_interval(0.0, 1.0)
    assert (first.messages, first.bytes, first.histogram.get_total_count()) == (4, 40, 4)
    assert first.histogram.get_min_value() == 0
    recorder.record(5_000_000_000_000, 1)  # beyond the trackable range: clamped, not lost
    second = recorder.take_interval(1.0, 2.0)
    assert second.messages == 1 and second.histogram.get_max_value() >= 3_599_000_000
    assert recorder.take_interval(2.0, 3.0).messages == 0
    assert recorder.completed == 5

    path = tmp_path / "run.hlog"
    log = HdrLog.create(str(path))
    log.begin(1_700_000_000.0)
    log.write(first)
    log.write(second)
    log.close()
    text = path.read_text()
    assert "#[StartTime: 1700000000.000000 (seconds since epoch)" in text
    assert "#[Histogram log format version 1.2]" in text
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000_000, 3))
    intervals = []
    while (histogram := reader.get_next_interval_histogram()) is not None:
        intervals.append(histogram)
    reader.close()
    assert [h.get_total_count() for h in intervals] == [4, 1]
    assert intervals[0].get_start_time_stamp() == pytest.approx(1_700_000_000_000)
    assert intervals[1].get_start_time_stamp() == pytest.approx(1_700_000_001_000)


# -- options ----------------------------------------------------------------------------------------------------


def test_topic_names_follow_pulsar_perf() -> None:
    assert topic_names("persistent://public/default/t", 1) == ["persistent://public/default/t"]
    assert topic_names("t", 3) == ["t-0", "t-1", "t-2"]
    with pytest.raises(ValueError):
        topic_names("t", 0)


def test_bad_options_and_urls_are_refused_with_a_reason() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["perf", "produce", "t", "-r", "-5"])
    assert result.exit_code == 2 and "-r" in result.output
    result = runner.invoke(main, ["perf", "consume", "t", "-st", "Sideways"])
    assert result.exit_code == 2 and "Sideways" in result.output
    result = runner.invoke(main, ["perf", "produce", "t", "-u", "http://127.0.0.1:8080"])
    assert result.exit_code == 1 and "pulsar://host:port" in result.output
    result = runner.invoke(main, ["perf", "produce", "t", "--histogram-file", "/nonexistent-dir/x.hlog"])
    assert result.exit_code == 1 and "cannot write the histogram file" in result.output
    with pytest.raises(ValueError, match="bad port"):
        probe_service_url("pulsar://127.0.0.1:http")


def test_reporter_lines_totals_and_log_times_follow_the_run_start(tmp_path: Path) -> None:
    clock = FakeClock(500.0)
    recorder = LatencyRecorder()
    path = tmp_path / "r.hlog"
    lines: list[str] = []

    class Console:
        def print(self, text: str, **_: Any) -> None:
            lines.append(text)

    reporter = Reporter("sent", recorder, Console(), hdr_log=HdrLog.create(str(path)), clock=clock,
                        wall=lambda: 1_800_000_010.0, extra=lambda: " | pending 7")  # fmt: skip
    clock.now = 502.0  # the run started 2 s before "now": the log's base time is wall - 2 s
    reporter.restart(500.0)
    for _ in range(1000):
        recorder.record(2_000, 1024)
    clock.now = 503.0
    reporter.tick()
    recorder.record(9_000, 1024)
    recorder.record_failure("boom")
    clock.now = 503.5
    summary = reporter.stop()
    assert lines[0] == (
        "[   3.0s] 1000 msgs sent |      333.3 msg/s    0.326 MB/s | latency ms p50 2.000 p99 2.000 p99.9 2.000"
        " max 2.000 | pending 7"
    )
    assert lines[1].startswith("[   3.5s] 1001 msgs sent |        2.0 msg/s") and "1 failed" in lines[1]
    assert (summary.messages, summary.failures, summary.elapsed) == (1001, 1, 3.5)
    assert summary.histogram.get_total_count() == 1001
    text = path.read_text()
    assert "#[BaseTime: 1800000008.000000 (seconds since epoch)]" in text
    assert "\n0.000000,3.000000,2.000000,HISTF" in text and "\n3.000000,0.500000,9.000000,HISTF" in text
