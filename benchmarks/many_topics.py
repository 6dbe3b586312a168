"""Many topics on one broker (issue 21): what a near-empty topic costs, and whether publishing stays fast when
spread over many topics.

Starts ``quasar standalone`` on free ports over a temporary data directory (removed afterwards), then:

1. creates ``--topics`` topics, each with one durable subscription (Exclusive, closed again) and one 100-byte
   message (a producer per topic, closed again), ``--concurrency`` topics at a time over one connection of
   Quasar's asyncio client; prints the creation rate (topics/s over the whole phase);
2. with every client closed: broker RSS, open file descriptors (``/proc/PID/fd``), and the disk used under
   the data directory (allocated blocks) beyond the messages' bytes, per topic;
3. stops the broker (SIGTERM) and starts it again: time to the readiness line and RSS then;
4. publish rate, one message per send with up to ``--window`` sends outstanding in total: spread round-robin
   over ``--active`` topics (one producer each, batching off) and on one topic, in the same sitting (spread
   first). Each run first sends one message per topic (reported for the spread run: each topic's first
   publish since the restart loaded it, which starts a new ledger), then ``--messages`` messages, the rate
   compared.

With ``--profile FILE`` the creation and each publish round are recorded with ``py-spy record -F -f raw`` into
``FILE.create``, ``FILE.spread-first``, ``FILE.spread-steady``, ``FILE.one-first`` and ``FILE.one-steady``
(summarize them with ``benchmarks/pyspy_summary.py``).

Numbers are for comparison only, never asserted by tests. Usage:
``python benchmarks/many_topics.py [--topics 10000] [--active 10000] [--messages 20000]``
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import click

# run as a script: benchmarks/ is on sys.path
from pyspy_record import start_profile, stop_profile
from rich.console import Console
from rich.table import Table

from quasar.client import AsyncClient
from quasar.testing.broker_process import BrokerProcess

TOPIC_PREFIX = "persistent://public/default/many-"
BODY = b"m" * 100


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (all threads; ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def disk_used(path: Path) -> int:
    """Bytes of disk allocated under ``path`` (st_blocks, like ``du``)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


async def bounded(count: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> None:
    """Run ``job(i)`` for i in range(count), at most ``concurrency`` at a time."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(count):
        queue.put_nowait(index)

    async def worker() -> None:
        while not queue.empty():
            await job(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))


async def create_topics(service_url: str, count: int, concurrency: int) -> float:
    """Phase 1; returns topics/s."""
    async with AsyncClient(service_url, operation_timeout_seconds=120) as client:

        async def one(index: int) -> None:
            topic = f"{TOPIC_PREFIX}{index}"
            consumer = await client.subscribe(topic, "sub")
            await consumer.close()
            producer = await client.create_producer(topic, batching_enabled=False)
            await producer.send(BODY)
            await producer.close()

        started = time.perf_counter()
        await bounded(count, concurrency, one)
        return count / (time.perf_counter() - started)


async def _send_round(producers: Sequence[Any], messages: int, window: int) -> float:
    """``messages`` sends round-robin over ``producers``, at most ``window`` outstanding; returns messages/s."""
    semaphore = asyncio.Semaphore(window)
    pending: set[asyncio.Future[Any]] = set()

    def done(f: asyncio.Future[Any]) -> None:
        pending.discard(f)
        semaphore.release()

    started = time.perf_counter()
    for index in range(messages):
        await semaphore.acquire()
        future = await producers[index % len(producers)].send_async(BODY)
        pending.add(future)
        future.add_done_callback(done)
    await asyncio.gather(*list(pending))
    return messages / (time.perf_counter() - started)


async def publish_rate(
    service_url: str,
    topics: Sequence[str],
    messages: int,
    window: int,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> tuple[float, float]:
    """Phase 4: ``(first, steady)`` messages/s, one message per send, ``window`` sends outstanding,
    round-robin over ``topics``: ``first`` is one message per topic (after a restart: each topic's first
    publish since it was loaded, which starts a new ledger, as in Pulsar), ``steady`` the ``messages`` sends
    after it. ``on_phase("first" | "steady" | "end")`` is called at the boundaries (profiling)."""
    async with AsyncClient(service_url, operation_timeout_seconds=120) as client:
        producers: list[Any] = []

        async def open_one(index: int) -> None:
            producers.append(
                await client.create_producer(
                    topics[index], batching_enabled=False, max_pending_messages=max(1000, window)
                )
            )

        await bounded(len(topics), 64, open_one)
        on_phase("first")
        first = await _send_round(producers, len(producers), window)
        on_phase("steady")
        steady = await _send_round(producers, messages, window)
        on_phase("end")
        await bounded(len(producers), 64, lambda i: producers[i].close())
        return first, steady


@click.command()
@click.option("--topics", "topic_count", default=10_000, show_default=True, help="Topics to create.")
@click.option("--active", default=10_000, show_default=True, help="Topics the spread publish goes over.")
@click.option("--messages", default=20_000, show_default=True, help="Messages per publish-rate run.")
@click.option("--window", default=1_000, show_default=True, help="Sends outstanding at most.")
@click.option("--concurrency", default=64, show_default=True, help="Topics created at a time.")
@click.option("--keep", is_flag=True, help="Keep the data directory (its path is printed).")
@click.option("--profile", type=click.Path(path_type=Path), default=None, help="py-spy raw output file.")
def main(
    topic_count: int,
    active: int,
    messages: int,
    window: int,
    concurrency: int,
    keep: bool,
    profile: Path | None,
) -> None:
    console = Console()
    base = Path(tempfile.mkdtemp(prefix="quasar-many-topics-"))
    data_dir = base / "data"
    broker = BrokerProcess(data_dir, startup_timeout_s=300)
    rows: list[tuple[str, str]] = []
    try:
        broker.start()
        assert broker.service_url is not None and broker.pid is not None
        started_fds = open_fds(broker.pid)
        rows.append(("topics", f"{topic_count:,}"))
        rows.append(("open fds, empty broker", f"{started_fds}"))
        spy = start_profile(profile, "create", broker.pid)
        rate = asyncio.run(create_topics(broker.service_url, topic_count, concurrency))
        stop_profile(spy)
        rows.append(("create + subscribe + 1 msg", f"{rate:,.0f} topics/s"))
        time.sleep(1.5)  # a consume queue flush round
        pid = broker.pid
        assert pid is not None
        rss = rss_mb(pid)
        fds = open_fds(pid)
        used = disk_used(data_dir)
        rows.append(("broker RSS", f"{rss:,.0f} MiB"))
        rows.append(("open fds", f"{fds:,}"))
        beyond = used - topic_count * len(BODY)
        rows.append(("disk used", f"{used / 2**20:,.1f} MiB ({beyond / topic_count / 1024:,.1f} KiB/topic)"))
        broker.stop(timeout_s=120)
        started = time.perf_counter()
        broker.start()
        ready = time.perf_counter() - started
        assert broker.pid is not None and broker.service_url is not None
        rows.append(("ready after restart", f"{ready:.2f} s"))
        rows.append(("RSS after restart", f"{rss_mb(broker.pid):,.0f} MiB"))
        rows.append(("open fds after restart", f"{open_fds(broker.pid):,}"))
        spread_topics = [f"{TOPIC_PREFIX}{i}" for i in range(min(active, topic_count))]
        spies: list[Any] = [None]
        cpu_at: dict[str, float] = {}

        def phase(label: str) -> Callable[[str], None]:
            def switch(name: str) -> None:
                stop_profile(spies[0])
                cpu_at[f"{label}-{name}"] = cpu_s(pid)
                spies[0] = start_profile(profile, f"{label}-{name}", pid) if name != "end" else None

            return switch

        pid = broker.pid
        first, spread = asyncio.run(
            publish_rate(broker.service_url, spread_topics, messages, window, phase("spread"))
        )
        one = asyncio.run(
            publish_rate(broker.service_url, [f"{TOPIC_PREFIX}0"], messages, window, phase("one"))
        )[1]

        def us_per_message(label: str, start: str, end: str, count: int) -> str:
            return f"{(cpu_at[f'{label}-{end}'] - cpu_at[f'{label}-{start}']) * 1e6 / count:,.0f} us broker CPU/msg"

        rows.append(
            (
                f"publish over {len(spread_topics):,} topics, first message each",
                f"{first:,.0f} msg/s, {us_per_message('spread', 'first', 'steady', len(spread_topics))}",
            )
        )
        rows.append(
            (
                f"publish over {len(spread_topics):,} topics, then",
                f"{spread:,.0f} msg/s, {us_per_message('spread', 'steady', 'end', messages)}",
            )
        )
        rows.append(
            (
                "publish on one topic",
                f"{one:,.0f} msg/s ({spread / one:.0%} spread/one), {us_per_message('one', 'steady', 'end', messages)}",
            )
        )
        rows.append(("open fds at the end", f"{open_fds(broker.pid):,}"))
        rows.append(("RSS at the end", f"{rss_mb(broker.pid):,.0f} MiB"))
    finally:
        broker.stop(timeout_s=120)
        if keep:
            console.print(f"data kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    table = Table(title="many topics, one broker")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


if __name__ == "__main__":
    main()
