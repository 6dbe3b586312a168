"""``quasar perf consume``: subscribe, acknowledge everything, and measure end-to-end latency, as
``pulsar-perf consume`` does.

Every consumer of the run shares one client; each has a receive thread that records, per message, the time from
its publish timestamp (set by the producing client, milliseconds since the epoch) to its receipt here (wall
clock), then acknowledges it. Producer and consumer clocks must agree (same host, or NTP); the publish
timestamp's 1 ms resolution bounds the precision. A negative latency (clock skew) counts as 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from quasar.cli.perf_clients import SUBSCRIPTION_TYPES, PerfClient
from quasar.cli.perf_options import common_options, open_client, open_hdr_log, topic_names
from quasar.cli.perf_stats import LatencyRecorder, Reporter

__all__ = ["ConsumeRun", "consume", "end_to_end_us"]

#: Milliseconds each receive call waits before the thread checks for a stop.
RECEIVE_TIMEOUT_MS = 100


def end_to_end_us(publish_timestamp_ms: int, now_ns: int) -> int:
    """Latency in microseconds from a publish timestamp (ms since the epoch) to wall-clock ``now_ns``."""
    return now_ns // 1000 - publish_timestamp_ms * 1000


class ConsumeRun:
    """The receive threads of a consume run, apart from click.

    Args:
        consumers: objects with ``receive(timeout_millis=...)`` and ``acknowledge(message)``; messages have
            ``data()`` and ``publish_timestamp()``.
        recorder: where latencies and counts go.
        is_timeout: whether an exception from ``receive`` is a receive timeout (not an error).
        num_messages: stop after this many messages in total; 0 = no limit.
        wall_ns: wall clock in nanoseconds (``time.time_ns``).
    """

    def __init__(
        self,
        consumers: list[Any],
        recorder: LatencyRecorder,
        is_timeout: Callable[[BaseException], bool],
        *,
        num_messages: int = 0,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.consumers = consumers
        self.recorder = recorder
        self.is_timeout = is_timeout
        self.num_messages = num_messages
        self.wall_ns = wall_ns
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._threads: list[threading.Thread] = []

    def receive_loop(self, consumer: Any) -> None:
        """Receive, record and acknowledge until stopped, the count is reached, or receive fails."""
        recorder, limit, wall_ns = self.recorder, self.num_messages, self.wall_ns
        while not self.stop.is_set():
            try:
                message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            except Exception as exc:  # noqa: BLE001 - either client's errors; a timeout is not one
                if self.is_timeout(exc):
                    continue
                if not self.stop.is_set():
                    self.error = exc
                    self.stop.set()
                return
            recorder.record(end_to_end_us(message.publish_timestamp(), wall_ns()), len(message.data()))
            consumer.acknowledge(message)
            if limit and recorder.completed >= limit:
                self.stop.set()

    def start(self) -> None:
        """Start one receive thread per consumer."""
        for number, consumer in enumerate(self.consumers):
            thread = threading.Thread(
                target=self.receive_loop, args=(consumer,), name=f"quasar-perf-consumer-{number}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def join(self) -> None:
        """Stop and wait for every receive thread (each returns within one receive timeout)."""
        self.stop.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()


def _is_timeout(client: PerfClient) -> Callable[[BaseException], bool]:
    if client.kind == "pulsar":
        import pulsar

        return lambda exc: isinstance(exc, pulsar.Timeout)
    from quasar.client import ReceiveTimeoutError

    return lambda exc: isinstance(exc, ReceiveTimeoutError)


@click.command("consume")
@common_options
@click.option(
    "-n",
    "--num-consumers",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Number of consumers per topic.",
)
@click.option(
    "-ss", "--subscriptions", "subscription", default="sub", show_default=True, help="Subscription name."
)
@click.option(
    "-st",
    "--subscription-type",
    type=click.Choice(SUBSCRIPTION_TYPES),
    default="Exclusive",
    show_default=True,
    help="Subscription type.",
)
@click.option(
    "-sp",
    "--subscription-position",
    type=click.Choice(("Latest", "Earliest")),
    default="Latest",
    show_default=True,
    help="Where a new subscription starts.",
)
@click.option(
    "-q",
    "--receiver-queue-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Receiver queue size of each consumer.",
)
def consume(
    topic: str, service_url: str, num_topics: int, test_duration: float, num_messages: int, client_kind: str,
    auth_token: str | None, histogram_file: str | None, num_consumers: int, subscription: str,
    subscription_type: str, subscription_position: str, receiver_queue_size: int,
) -> None:  # fmt: skip
    """Consume from TOPIC and report end-to-end latency (like pulsar-perf consume).

    Prints a progress line every second (msg/s, MB/s, p50/p99/p99.9/max latency in ms from each message's
    publish timestamp) and a summary at the end. Stops after --num-messages or --test-duration (or Ctrl-C).
    Exits 1 when the broker is unreachable or receiving fails.
    """
    console = Console(highlight=False, soft_wrap=True)
    topics = topic_names(topic, num_topics)
    hdr_log = open_hdr_log(histogram_file)
    client = open_client(client_kind, service_url, auth_token)
    try:
        try:
            consumers = [
                client.subscribe(
                    name, subscription, sub_type=subscription_type, earliest=subscription_position == "Earliest",
                    receiver_queue_size=receiver_queue_size,
                )
                for name in topics
                for _ in range(num_consumers)
            ]  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the official client has its own exception types
            raise click.ClickException(f"cannot subscribe on {service_url}: {exc}") from None
        console.print(
            f"Consuming {len(topics)} topic(s) with {len(consumers)} consumer(s) through the {client_kind} client:"
            f" subscription {escape(repr(subscription))} ({subscription_type}, {subscription_position})"
        )
        recorder = LatencyRecorder()
        run = ConsumeRun(consumers, recorder, _is_timeout(client), num_messages=num_messages)
        reporter = Reporter("received", recorder, console, hdr_log=hdr_log)
        reporter.restart(time.monotonic())
        reporter.run_in_background()
        deadline = reporter.start + test_duration if test_duration > 0 else float("inf")
        run.start()
        try:
            while not run.stop.wait(0.05):
                if time.monotonic() >= deadline:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            run.join()
            summary = reporter.stop()
        reporter.print_summary("Aggregated consume stats", summary, "Messages received")
    finally:
        client.close()
        if hdr_log is not None:
            hdr_log.close()
    if run.error is not None:
        raise click.ClickException(f"receive failed: {run.error}")
