"""Client benchmark: Quasar's own client against the official ``pulsar-client``, same broker, alternating.

For each workload (message size x partition count x batching; default 100 B and 1 KiB, 1 and 4 partitions,
batching on and off (``off``: one message per send, one entry per message), ``block_if_queue_full`` on, default
``max_pending_messages`` 1000, no compression) every client in turn
publishes ``--messages`` messages to a fresh topic (``send_async`` then ``flush``) and consumes them back
(Exclusive subscription created with initial position Earliest before publishing; ``receive`` + one
``acknowledge`` per message). The clients run in the order official, quasar-async, quasar-sync, repeated
``--rounds`` times, and the best round of each is reported (highest msg/s, lowest CPU per message, each
column on its own):

| Column          | Meaning                                                                    |
|-----------------|----------------------------------------------------------------------------|
| client          | ``official`` (pulsar-client, C++ core), ``quasar-async`` (``AsyncClient``), |
|                 | ``quasar-sync`` (the blocking ``quasar.client.Client`` facade)             |
| publish msg/s   | messages / (flush returned - first send_async call)                        |
| consume msg/s   | messages / (last acknowledge - first receive call)                         |
| ratio           | this client's msg/s / the official client's msg/s (publish / consume)      |
| CPU µs/msg      | CPU time of the benchmark process (every thread: the official client's C++ |
|                 | threads, our event loop thread) per message, publish / consume             |
| CPU ratio       | this client's CPU per message / the official client's (publish / consume)  |

Unless ``--service-url`` is given, a ``quasar standalone`` subprocess is started in a temporary directory.
Profile with ``--profile DIR``: each quasar-async run is wrapped in pyinstrument and its text report written to
``DIR``. Numbers are for comparison only; tests never assert them.

Usage: ``python benchmarks/clients.py [--messages N] [--sizes 100,1024] [--partitions 1,4] [--batching on,off]
[--clients official,quasar-async,quasar-sync] [--rounds 2]``
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import click
import pulsar
from rich.console import Console
from rich.table import Table

import quasar.client as qc
from quasar.testing.broker_process import BrokerProcess

Result = tuple[float, float, float, float]  # (publish msg/s, consume msg/s, publish / consume CPU µs per msg)


def _cpu_per_message(cpu_start: float, count: int) -> float:
    return (time.process_time() - cpu_start) * 1e6 / count


def _topic(admin_url: str, partitions: int) -> str:
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:10]}"
    if partitions > 1:
        request = urllib.request.Request(
            f"{admin_url}/admin/v2/persistent/{topic.split('://', 1)[1]}/partitions",
            data=json.dumps(partitions).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()
    return topic


def _run_blocking(client, earliest, topic: str, count: int, payload: bytes, batching: bool) -> Result:
    """The same workload for any client with the official blocking API (``pulsar.Client`` or our facade):
    subscribe from ``earliest``, publish ``count`` x ``payload`` (batched or not), then receive and ack them all.
    Returns (publish msg/s, consume msg/s, publish CPU µs/msg, consume CPU µs/msg); closes ``client``."""
    try:
        consumer = client.subscribe(topic, "bench", initial_position=earliest)
        producer = client.create_producer(topic, batching_enabled=batching, block_if_queue_full=True)
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
        publish = count / (time.perf_counter() - start)
        publish_cpu = _cpu_per_message(cpu, count)
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(count):
            consumer.acknowledge(consumer.receive(30_000))
        consume = count / (time.perf_counter() - start)
        consume_cpu = _cpu_per_message(cpu, count)
        producer.close()
        consumer.close()
        return publish, consume, publish_cpu, consume_cpu
    finally:
        client.close()


def run_official(url: str, topic: str, count: int, payload: bytes, batching: bool) -> Result:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return _run_blocking(client, pulsar.InitialPosition.Earliest, topic, count, payload, batching)


def run_quasar_sync(url: str, topic: str, count: int, payload: bytes, batching: bool) -> Result:
    return _run_blocking(qc.Client(url), qc.InitialPosition.Earliest, topic, count, payload, batching)


async def _quasar_async(url: str, topic: str, count: int, payload: bytes, batching: bool) -> Result:
    async with qc.AsyncClient(url) as client:
        consumer = await client.subscribe(topic, "bench", initial_position=qc.InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=batching, block_if_queue_full=True)
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(count):
            await producer.send_async(payload)
        await producer.flush()
        publish = count / (time.perf_counter() - start)
        publish_cpu = _cpu_per_message(cpu, count)
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(count):
            message = await consumer.receive(30_000)
            await consumer.acknowledge(message)
        consume = count / (time.perf_counter() - start)
        consume_cpu = _cpu_per_message(cpu, count)
        await producer.close()
        await consumer.close()
        return publish, consume, publish_cpu, consume_cpu


def run_quasar_async(
    url: str, topic: str, count: int, payload: bytes, batching: bool, profile: Path | None = None
) -> Result:
    if profile is None:
        return asyncio.run(_quasar_async(url, topic, count, payload, batching))
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="enabled")
    with profiler:
        result = asyncio.run(_quasar_async(url, topic, count, payload, batching))
    profile.mkdir(parents=True, exist_ok=True)
    kind = "batched" if batching else "single"
    (profile / f"quasar-async-{len(payload)}B-{kind}-{topic[-10:]}.txt").write_text(
        profiler.output_text(show_all=False)
    )
    return result


def _best(old: Result, new: Result) -> Result:
    return (max(old[0], new[0]), max(old[1], new[1]), min(old[2], new[2]), min(old[3], new[3]))


@click.command()
@click.option("--messages", default=20_000, show_default=True, help="Messages per run.")
@click.option("--sizes", default="100,1024", show_default=True, help="Payload sizes in bytes.")
@click.option("--partitions", default="1,4", show_default=True, help="Partition counts.")
@click.option(
    "--batching",
    default="on,off",
    show_default=True,
    help="Batching modes: on (batched), off (one message per send).",
)
@click.option(
    "--clients",
    default="official,quasar-async,quasar-sync",
    show_default=True,
    help="Clients to run (official is always run: it is the base of the ratios).",
)
@click.option("--rounds", default=2, show_default=True, help="Alternating rounds per workload (best kept).")
@click.option("--service-url", default=None, help="Use a running broker (also needs --admin-url).")
@click.option("--admin-url", default=None, help="Admin URL of the running broker.")
@click.option(
    "--profile", type=click.Path(path_type=Path), default=None, help="Write pyinstrument reports here."
)
def main(
    messages: int,
    sizes: str,
    partitions: str,
    batching: str,
    clients: str,
    rounds: int,
    service_url: str | None,
    admin_url: str | None,
    profile: Path | None,
) -> None:
    """Publish and consume the same workload with each client; print msg/s and the ratio to the official one."""
    console = Console(width=160)
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        if service_url is None:
            broker = BrokerProcess(Path(tmp) / "data").start()
            service_url, admin_url = broker.service_url, broker.admin_url
        assert service_url is not None and admin_url is not None
        runners: dict[str, Callable[[str, str, int, bytes, bool], Result]] = {
            "official": run_official,
            "quasar-async": lambda u, t, n, p, b: run_quasar_async(u, t, n, p, b, profile),
            "quasar-sync": run_quasar_sync,
        }
        wanted = {"official", *clients.split(",")}
        runners = {name: run for name, run in runners.items() if name in wanted}
        table = Table(title=f"{messages} messages per run, best of {rounds} alternating rounds")
        for column in (
            "size B",
            "partitions",
            "batching",
            "client",
            "publish msg/s",
            "consume msg/s",
            "ratio pub / cons",
            "CPU µs/msg pub / cons",
            "CPU ratio pub / cons",
        ):
            table.add_column(column, justify="right")
        try:
            workloads = [
                (int(size), int(count), mode.strip() == "on")
                for mode in batching.split(",")
                for size in sizes.split(",")
                for count in partitions.split(",")
            ]
            for size, count, batched in workloads:
                best: dict[str, Result] = {}
                for _ in range(rounds):
                    for name, run in runners.items():
                        result = run(service_url, _topic(admin_url, count), messages, b"x" * size, batched)
                        old = best.get(name)
                        best[name] = result if old is None else _best(old, result)
                base = best["official"]
                for name, (pub, cons, pub_cpu, cons_cpu) in best.items():
                    table.add_row(
                        str(size),
                        str(count),
                        "on" if batched else "off",
                        name,
                        f"{pub:,.0f}",
                        f"{cons:,.0f}",
                        f"{pub / base[0]:.2f} / {cons / base[1]:.2f}",
                        f"{pub_cpu:.1f} / {cons_cpu:.1f}",
                        f"{pub_cpu / base[2]:.2f} / {cons_cpu / base[3]:.2f}",
                    )
        finally:
            if broker is not None:
                broker.stop()
    console.print(table)


if __name__ == "__main__":
    main()
