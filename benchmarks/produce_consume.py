"""Produce/consume benchmark: the official ``pulsar-client`` against a Quasar broker.

For each message size (default 100 B and 1 KiB) the benchmark publishes ``--messages`` messages (default
200,000) with ``send_async`` and batching on to a fresh persistent topic, then consumes and acknowledges them
through an Exclusive subscription that was created (initial position Earliest) before producing. It prints one
table row per size:

| Column         | Meaning                                                                                |
|----------------|----------------------------------------------------------------------------------------|
| produce msg/s  | messages / (last send receipt - first send_async call)                                 |
| produce MB/s   | payload bytes (10^6 B) per second over the same interval                               |
| p50 / p99 ms   | per-message publish latency: send_async call -> its receipt callback (includes batching |
|                | delay, max 10 ms, and queueing behind ``--max-pending`` messages)                      |
| consume msg/s  | messages / (last receive - first receive) including one acknowledge per message        |
| broker RSS MiB | VmRSS of the broker process from /proc/<pid>/status after the size's run               |
| broker µs/msg  | broker CPU (user + system, all threads, from /proc/<pid>/stat) per message, for the    |
|  pub / con     | produce phase and for the consume phase (receive + acknowledge); with --no-batching a  |
|                | message is an entry, so this is the broker's CPU per entry                             |

Unless ``--service-url`` is given, a ``quasar standalone`` subprocess is started on free ports in a temporary
data directory (removed afterwards) and stopped with SIGTERM at the end; with ``--service-url``, RSS is shown
only if ``--broker-pid`` is given. Numbers are for a laptop-style comparison, never asserted by tests.

Usage: ``python benchmarks/produce_consume.py [--messages N] [--sizes 100,1024] [--service-url URL]``
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from array import array
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import click
import pulsar
from rich.console import Console
from rich.table import Table

from quasar.testing.broker_process import BrokerProcess


@dataclass(frozen=True, slots=True)
class SizeResult:
    """Outcome of one message size (times in seconds, latencies in ms, RSS in bytes or None)."""

    size: int
    messages: int
    produce_s: float
    p50_ms: float
    p99_ms: float
    consume_s: float
    failed_sends: int
    rss_bytes: int | None
    produce_cpu_s: float | None = None
    consume_cpu_s: float | None = None


def rss_bytes(pid: int | None) -> int | None:
    """Resident set size of ``pid`` from /proc/<pid>/status (VmRSS, kB), in bytes; None if unavailable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) from /proc/<pid>/stat; None if unavailable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _delta(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list (q in 0..100); 0 for an empty list."""
    if not sorted_values:
        return 0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


class _Receipts:
    """Per-message send timestamps and receipt latencies (ns), filled by the client's I/O thread."""

    def __init__(self, n: int, ok: pulsar.Result) -> None:
        self.sent_ns = array("q", bytes(8 * n))
        self.latency_ns = array("q", bytes(8 * n))
        self.done = 0
        self.failed = 0
        self.last_ns = 0
        self._ok = ok

    def callback(self, i: int, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        now = time.perf_counter_ns()
        self.latency_ns[i] = now - self.sent_ns[i]
        self.last_ns = now
        self.done += 1
        if result != self._ok:
            self.failed += 1


def run_size(
    client: pulsar.Client, size: int, messages: int, max_pending: int, batching: bool, broker_pid: int | None
) -> SizeResult:
    """Produce then consume ``messages`` payloads of ``size`` bytes on a fresh topic."""
    topic = f"persistent://public/default/bench-{size}-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(
        topic,
        "bench",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_publish_delay_ms=10,
        block_if_queue_full=True,
        max_pending_messages=max_pending,
    )
    payload = os.urandom(size)
    receipts = _Receipts(messages, pulsar.Result.Ok)
    sent_ns, send, callback, clock = (
        receipts.sent_ns,
        producer.send_async,
        receipts.callback,
        time.perf_counter_ns,
    )
    cpu_start = cpu_seconds(broker_pid)
    start_ns = clock()
    for i in range(messages):
        sent_ns[i] = clock()
        send(payload, partial(callback, i))
    producer.flush()
    produce_s = (max(receipts.last_ns, start_ns + 1) - start_ns) / 1e9
    cpu_produced = cpu_seconds(broker_pid)
    producer.close()
    latencies = sorted(receipts.latency_ns)

    receive, acknowledge = consumer.receive, consumer.acknowledge
    received = 0
    first = last = time.perf_counter()
    cpu_consume_start = cpu_seconds(broker_pid)
    while received < messages:
        try:
            message = receive(30_000)
        except pulsar.Timeout:
            break
        if received == 0:
            first = time.perf_counter()
        acknowledge(message)
        received += 1
        last = time.perf_counter()
    cpu_consumed = cpu_seconds(broker_pid)
    consumer.unsubscribe()
    consumer.close()
    return SizeResult(
        size=size,
        messages=received,
        produce_s=produce_s,
        p50_ms=percentile(latencies, 50) / 1e6,
        p99_ms=percentile(latencies, 99) / 1e6,
        consume_s=max(last - first, 1e-9),
        failed_sends=receipts.failed,
        rss_bytes=rss_bytes(broker_pid),
        produce_cpu_s=_delta(cpu_start, cpu_produced),
        consume_cpu_s=_delta(cpu_consume_start, cpu_consumed),
    )


def results_table(results: list[SizeResult], title: str) -> Table:
    table = Table(title=title)
    for column in (
        "size B",
        "messages",
        "produce msg/s",
        "produce MB/s",
        "p50 ms",
        "p99 ms",
        "consume msg/s",
        "consume MB/s",
        "broker RSS MiB",
        "broker µs/msg pub / con",
    ):
        table.add_column(column, justify="right")
    for r in results:
        consumed_rate = r.messages / r.consume_s
        table.add_row(
            f"{r.size:,}",
            f"{r.messages:,}" + (f" ({r.failed_sends:,} failed)" if r.failed_sends else ""),
            f"{r.messages / r.produce_s:,.0f}",
            f"{r.messages * r.size / r.produce_s / 1e6:,.1f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{consumed_rate:,.0f}",
            f"{consumed_rate * r.size / 1e6:,.1f}",
            "-" if r.rss_bytes is None else f"{r.rss_bytes / 2**20:,.0f}",
            _per_message(r.produce_cpu_s, r.messages) + " / " + _per_message(r.consume_cpu_s, r.messages),
        )
    return table


def _per_message(cpu_s: float | None, messages: int) -> str:
    return "-" if cpu_s is None or messages == 0 else f"{cpu_s * 1e6 / messages:.1f}"


def _parse_sizes(_ctx: click.Context, _param: click.Parameter, value: str) -> list[int]:
    try:
        sizes = [int(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated byte counts, got {value!r}") from exc
    if not sizes or any(size < 1 for size in sizes):
        raise click.BadParameter(f"sizes must be >= 1, got {value!r}")
    return sizes


@click.command()
@click.option("--messages", type=click.IntRange(min=1), default=200_000, show_default=True, help="Per size.")
@click.option("--sizes", default="100,1024", show_default=True, callback=_parse_sizes, help="Payload bytes.")
@click.option("--service-url", default=None, help="Use this broker instead of starting one.")
@click.option("--broker-pid", type=int, default=None, help="PID of the --service-url broker, for its RSS.")
@click.option(
    "--max-pending",
    type=click.IntRange(min=1),
    default=5_000,
    show_default=True,
    help="Producer max_pending_messages.",
)
@click.option("--batching/--no-batching", default=True, show_default=True)
@click.option(
    "--broker-arg", "broker_args", multiple=True, help="Extra `quasar standalone` argument (repeatable)."
)
def main(
    messages: int,
    sizes: list[int],
    service_url: str | None,
    broker_pid: int | None,
    max_pending: int,
    batching: bool,
    broker_args: tuple[str, ...],
) -> None:
    """Publish and consume N messages per size with the official pulsar-client and print the rates."""
    console = Console()
    if not console.is_terminal:  # a pipe or file: rich would squeeze the 10 columns into 80
        console = Console(width=160)
    # the C++ core's console logger: a Python logger is called back from client threads at interpreter exit
    logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    with tempfile.TemporaryDirectory(prefix="quasar-bench-") as tmp:
        broker = None
        if service_url is None:
            broker = BrokerProcess(Path(tmp) / "data", extra_args=broker_args).start()
            service_url, broker_pid = str(broker.service_url), broker.pid
            console.print(f"started quasar standalone (pid {broker_pid}) at {service_url}, data in {tmp}")
        client = pulsar.Client(service_url, logger=logger)
        results = []
        try:
            for size in sizes:
                with console.status(f"{messages:,} messages of {size:,} B"):
                    results.append(run_size(client, size, messages, max_pending, batching, broker_pid))
        finally:
            client.close()
            if broker is not None:
                broker.stop()
    title = (
        f"pulsar-client -> {service_url} (batching {'on' if batching else 'off'}, max pending {max_pending})"
    )
    console.print(results_table(results, title))


if __name__ == "__main__":
    main()
