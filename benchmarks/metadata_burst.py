"""Metadata burst: does creating many topics and subscriptions stall publishing on another topic?

Issue 12's measurement, as a busy application would meet it: ``--workers`` processes (default 3) create
``--topics`` topics (default 100), each with a producer and ``--subs-per-topic`` durable subscriptions (default
3, so 300), through the official ``pulsar-client``; meanwhile one producer (batching off) publishes 100 B
messages on its own topic at a fixed ``--rate`` (default 200 msg/s). A message's latency is counted from the
moment it was *due* on the fixed schedule, so a stalled broker shows up both as a lower achieved rate and as
late sends (coordinated omission included).

Printed, for the window while the workers ran: achieved msg/s of the paced producer (receipts in the
window), p50 / p99 / max latency (ms, due time -> receipt), the time the workers needed, and creates/s.
Numbers are for before/after comparisons in one sitting, never asserted by tests.

Usage: ``python benchmarks/metadata_burst.py [--topics 100] [--subs-per-topic 3] [--workers 3] [--rate 200]``
"""

from __future__ import annotations

import multiprocessing
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import click
import pulsar
from rich.console import Console
from rich.table import Table

from quasar.testing.broker_process import BrokerProcess


def _create(service_url: str, prefix: str, worker: int, topics: int, subs_per_topic: int) -> None:
    """One worker process: ``topics`` topics, each with a producer and ``subs_per_topic`` subscriptions."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        for t in range(topics):
            topic = f"persistent://public/default/{prefix}-w{worker}-t{t}"
            producer = client.create_producer(topic)
            consumers = [client.subscribe(topic, f"sub-{k}") for k in range(subs_per_topic)]
            for consumer in consumers:
                consumer.close()
            producer.close()
    finally:
        client.close()


class _Paced:
    """A producer sending on a fixed schedule in its own thread; latencies from due time to receipt (ns)."""

    def __init__(self, client: pulsar.Client, topic: str, rate: float) -> None:
        self._producer = client.create_producer(topic, batching_enabled=False)
        self._interval_ns = int(1e9 / rate)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.records: list[tuple[int, int]] = []  # (due ns, receipt ns)
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        payload = b"x" * 100
        due = time.perf_counter_ns()
        while not self._stop.is_set():
            now = time.perf_counter_ns()
            if now < due:
                time.sleep((due - now) / 1e9)
                continue
            self._producer.send_async(payload, self._callback(due))
            due += self._interval_ns

    def _callback(self, due: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            now = time.perf_counter_ns()
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.records.append((due, now))
                else:
                    self.failed += 1

        return done

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._producer.flush()
        self._producer.close()


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    rank = max(1, min(len(values), round(q / 100 * len(values) + 0.5)))
    return values[rank - 1]


@click.command()
@click.option("--topics", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--subs-per-topic", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1), default=200.0, show_default=True, help="Paced msg/s.")
@click.option("--service-url", default=None, help="Use this broker instead of starting one.")
def main(topics: int, subs_per_topic: int, workers: int, rate: float, service_url: str | None) -> None:
    """Create topics and subscriptions from several processes while a paced producer publishes."""
    console = Console(width=120)
    prefix = f"burst-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="quasar-burst-") as tmp:
        broker = None
        if service_url is None:
            broker = BrokerProcess(Path(tmp) / "data").start()
            service_url = str(broker.service_url)
        client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            paced = _Paced(client, f"persistent://public/default/{prefix}-paced", rate)
            paced.start()
            time.sleep(1.0)  # a quiet second first
            context = multiprocessing.get_context("spawn")
            per_worker = [topics // workers + (1 if w < topics % workers else 0) for w in range(workers)]
            procs = [
                context.Process(target=_create, args=(service_url, prefix, w, n, subs_per_topic))
                for w, n in enumerate(per_worker)
            ]
            start = time.perf_counter_ns()
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join(timeout=600)
                if proc.is_alive():
                    proc.kill()
            end = time.perf_counter_ns()
            failed_workers = [proc.exitcode for proc in procs if proc.exitcode != 0]
            if failed_workers:
                console.print(f"[red]workers failed with exit codes {failed_workers}[/red]")
            time.sleep(0.5)
            paced.stop()
        finally:
            client.close()
            if broker is not None:
                broker.stop()
    window = [(due, got) for due, got in paced.records if start <= due <= end]
    latencies = sorted((got - due) / 1e6 for due, got in window)
    received = sum(1 for _due, got in paced.records if start <= got <= end)
    seconds = (end - start) / 1e9
    table = Table(title=f"{topics} topics x {subs_per_topic} subscriptions from {workers} processes")
    for column in ("burst s", "creates/s", "paced msg/s", "p50 ms", "p99 ms", "max ms", "failed"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{seconds:.1f}",
        f"{topics * (1 + subs_per_topic) / seconds:,.0f}",
        f"{received / seconds:,.0f} of {rate:,.0f}",
        f"{_percentile(latencies, 50):.1f}",
        f"{_percentile(latencies, 99):.1f}",
        f"{latencies[-1] if latencies else 0:.1f}",
        str(paced.failed),
    )
    console.print(table)


if __name__ == "__main__":
    main()
