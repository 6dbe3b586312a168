"""``quasar perf produce``: publish at a fixed rate (or as fast as possible) and measure publish latency, as
``pulsar-perf produce`` does.

Every producer of the run shares one client. One sender thread paces all of them with a
:class:`~quasar.cli.perf_pacing.FixedRatePacer` and sends message ``i`` through producer ``i % producers`` with
``send_async``. A message's latency runs from its *intended* send time (``start + i / rate``) to the receipt's
callback, so a stalled broker or a full pending queue is charged to every message it delayed (coordinated
omission). Callbacks run on the client's thread and record into a locked
:class:`~quasar.cli.perf_stats.LatencyRecorder`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Console

from quasar.cli.perf_clients import COMPRESSIONS, ProducerSettings
from quasar.cli.perf_options import common_options, open_client, open_hdr_log, topic_names
from quasar.cli.perf_pacing import FixedRatePacer
from quasar.cli.perf_stats import HdrLog, LatencyRecorder, Reporter

__all__ = ["ProduceRun", "produce"]

#: Most messages sent in one burst before the sender checks its stop conditions again.
BURST = 1000
#: Seconds the run waits for outstanding receipts after the last send.
DRAIN_TIMEOUT_S = 30.0


class ProduceRun:
    """The sending loop, apart from click and the clients.

    Args:
        producers: objects with ``send_async(payload, callback)``; ``callback(result, message_id)`` is called
            once per message, on any thread.
        payload: the bytes every message carries.
        pacer: the schedule (its ``start_time`` is the run's start; call ``pacer.restart()`` first).
        recorder: where latencies (us from the intended send time to the callback) and failures go.
        is_ok: whether a callback's ``result`` means success.
        num_messages: stop after this many sends; 0 = no limit.
        duration_s: stop sending this many seconds after the start; 0 = no limit.

    Raises:
        ValueError: no producers.
    """

    def __init__(
        self,
        producers: Sequence[Any],
        payload: bytes,
        pacer: FixedRatePacer,
        recorder: LatencyRecorder,
        is_ok: Callable[[Any], bool],
        *,
        num_messages: int = 0,
        duration_s: float = 0.0,
    ) -> None:
        if not producers:
            raise ValueError("a produce run needs at least one producer")
        self.producers = list(producers)
        self.payload = payload
        self.pacer = pacer
        self.recorder = recorder
        self.is_ok = is_ok
        self.num_messages = num_messages
        self.duration_s = duration_s
        self.sent = 0  # send_async calls made

    def _callback(self, intended: float) -> Callable[[Any, Any], None]:
        clock, recorder, size, is_ok = self.pacer.clock, self.recorder, len(self.payload), self.is_ok

        def done(result: Any, _message_id: Any) -> None:
            if is_ok(result):
                recorder.record(round((clock() - intended) * 1_000_000), size)
            else:
                recorder.record_failure(result)

        return done

    def run(self, stop: threading.Event) -> int:
        """Send until the count or duration is reached or ``stop`` is set; returns the number of sends."""
        pacer, clock, producers, payload = self.pacer, self.pacer.clock, self.producers, self.payload
        count = len(producers)
        limit = self.num_messages or math.inf
        deadline = pacer.start_time + self.duration_s if self.duration_s > 0 else math.inf
        index = self.sent
        while index < limit and not stop.is_set():
            now = clock()
            if now >= deadline:
                break
            due = min(pacer.due_count(now), limit, index + BURST)
            if index >= due:
                pacer.wait_until_due(index, stop.is_set)
                continue
            while index < due:
                producers[index % count].send_async(payload, self._callback(pacer.intended_time(index)))
                index += 1
                self.sent = index
        return index

    def wait_for_receipts(self, timeout_s: float, sleep: Callable[[float], None] = time.sleep) -> int:
        """Wait (at most ``timeout_s`` clock seconds) until every sent message has its callback; returns how
        many are still outstanding."""
        clock = self.pacer.clock
        end = clock() + timeout_s
        while self.recorder.completed < self.sent and clock() < end:
            sleep(0.01)
        return self.sent - self.recorder.completed


@click.command("produce")
@common_options
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=100,
    show_default=True,
    help="Publish rate in msg/s over all producers; 0 = as fast as possible.",
)
@click.option(
    "-s",
    "--size",
    type=click.IntRange(0, 64 * 1024 * 1024),
    default=1024,
    show_default=True,
    help="Message payload size in bytes.",
)
@click.option(
    "-n",
    "--num-producers",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Number of producers per topic.",
)
@click.option(
    "-b",
    "--batch-time-window",
    type=click.FloatRange(min=0),
    default=1,
    show_default=True,
    help="Batch messages for this many ms; 0 disables batching.",
)
@click.option(
    "-bm",
    "--batch-max-messages",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Most messages in one batch.",
)
@click.option(
    "-z",
    "--compression",
    type=click.Choice(COMPRESSIONS, case_sensitive=False),
    default="NONE",
    show_default=True,
    help="Compression of messages (batches).",
)
@click.option(
    "-o",
    "--max-outstanding",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Most messages awaiting a receipt per producer; the sender blocks beyond it.",
)
def produce(
    topic: str, service_url: str, num_topics: int, test_duration: float, num_messages: int, client_kind: str,
    auth_token: str | None, histogram_file: str | None, rate: float, size: int, num_producers: int,
    batch_time_window: float, batch_max_messages: int, compression: str, max_outstanding: int,
) -> None:  # fmt: skip
    """Publish to TOPIC and report publish latency (like pulsar-perf produce).

    Prints a progress line every second (msg/s, MB/s, p50/p99/p99.9/max latency in ms) and a summary at the end;
    latency runs from each message's intended send time (start + i / rate) to its receipt. Stops after
    --num-messages or --test-duration (or Ctrl-C). Exits 1 when the broker is unreachable or a send failed.
    """
    console = Console(highlight=False, soft_wrap=True)
    topics = topic_names(topic, num_topics)
    settings = ProducerSettings(
        batch_time_ms=math.ceil(batch_time_window) if batch_time_window else 0,
        batch_max_messages=batch_max_messages,
        compression=compression.upper(),
        max_pending=max_outstanding,
    )
    hdr_log = open_hdr_log(histogram_file)
    client = open_client(client_kind, service_url, auth_token)
    try:
        try:
            producers = [
                client.create_producer(name, settings) for name in topics for _ in range(num_producers)
            ]
        except Exception as exc:  # noqa: BLE001 - the official client has its own exception types
            raise click.ClickException(f"cannot create producers on {service_url}: {exc}") from None
        console.print(
            f"Producing to {len(topics)} topic(s) with {len(producers)} producer(s) through the {client_kind} "
            f"client: rate {'max' if rate == 0 else f'{rate:g} msg/s'}, {size} bytes, batching "
            f"{f'{settings.batch_time_ms} ms / {batch_max_messages} msgs' if settings.batch_time_ms else 'off'}, "
            f"compression {settings.compression}"
        )
        summary, outstanding, recorder = _run(
            console, producers, client.is_ok, size, rate, num_messages, test_duration, hdr_log
        )
    finally:
        client.close()
        if hdr_log is not None:
            hdr_log.close()
    if outstanding:
        raise click.ClickException(f"{outstanding} messages got no receipt within {DRAIN_TIMEOUT_S:g} s")
    if summary.failures:
        raise click.ClickException(f"{summary.failures} sends failed; first error: {recorder.first_error}")


def _run(
    console: Console,
    producers: list[Any],
    is_ok: Callable[[Any], bool],
    size: int,
    rate: float,
    num_messages: int,
    duration: float,
    hdr_log: HdrLog | None,
) -> tuple[Any, int, LatencyRecorder]:
    recorder = LatencyRecorder()
    pacer = FixedRatePacer(rate)
    run = ProduceRun(
        producers, os.urandom(size), pacer, recorder, is_ok, num_messages=num_messages, duration_s=duration
    )
    reporter = Reporter(
        "sent", recorder, console, hdr_log=hdr_log,
        extra=lambda: f" | pending {max(0, run.sent - recorder.completed)}",
    )  # fmt: skip
    stop = threading.Event()
    reporter.restart(pacer.restart())
    reporter.run_in_background()
    outstanding = 0
    try:
        run.run(stop)
        outstanding = run.wait_for_receipts(DRAIN_TIMEOUT_S)
    except KeyboardInterrupt:
        stop.set()
        outstanding = run.wait_for_receipts(DRAIN_TIMEOUT_S)
    finally:
        summary = reporter.stop()
    reporter.print_summary("Aggregated produce stats", summary, "Messages sent")
    return summary, outstanding, recorder
