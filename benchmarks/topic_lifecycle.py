"""Topic lifecycle on one broker: creation rate over REST and by first use, memory per loaded idle topic,
idle unload and restart.

Rows printed (one sitting, one ``quasar standalone`` on free ports in a temporary directory):

| row                          | what is measured                                                              |
|------------------------------|-------------------------------------------------------------------------------|
| REST create                  | ``--topics`` ``PUT /admin/v2/persistent/public/default/{t}``, ``--concurrency``  |
|                              | requests in flight (aiohttp, keep-alive): topics/s                            |
| first use (official client)  | ``--first-use`` topics: create a producer, send one 100 B message, close it,   |
|                              | ``--concurrency`` threads: topics/s                                           |
| RSS per loaded topic         | broker RSS after the REST topics were created, minus the RSS before, divided   |
|                              | by the topic count (topic + managed ledger objects; no subscription)           |
| RSS after idle unload        | with ``--unload-after S`` > 0 the broker unloads idle topics after S s         |
|                              | (``broker_unload_inactive_topics_*``): the RSS once every topic was unloaded   |
| restart ready / RSS          | SIGTERM, then start again on the same directory: seconds from the start to the |
|                              | readiness line (interpreter start and imports included) and the RSS then       |

With ``--profile FILE`` the REST and first-use phases are recorded with ``py-spy record -F -f raw`` into
``FILE.rest`` and ``FILE.first-use`` (summarize them with ``benchmarks/pyspy_summary.py``). "broker CPU" is the
broker process's user + system time (all threads) per topic, the figure to compare on a busy machine. Numbers
are for comparison only, never asserted by tests.

Usage: ``python benchmarks/topic_lifecycle.py [--topics 5000] [--first-use 1000] [--unload-after 5]``
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import click
import httpx
import pulsar

# run as a script: benchmarks/ is on sys.path
from pyspy_record import start_profile, stop_profile

from quasar.testing.broker_process import BrokerProcess


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _rest_create(admin_url: str, names: list[str], concurrency: int) -> float:
    """Seconds to PUT every topic of ``names``, ``concurrency`` requests at a time (aiohttp's client: httpx
    spent three times the broker's CPU per request here)."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(admin_url, connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                name = queue.get_nowait()
                async with session.put(f"/admin/v2/persistent/public/default/{name}") as response:
                    if response.status != 204:
                        raise click.ClickException(f"PUT {name}: {response.status} {await response.text()}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def _first_use(service_url: str, names: list[str], concurrency: int) -> float:
    """Seconds to create a producer, send one message and close it on each topic of ``names``."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    chunks = [names[i::concurrency] for i in range(concurrency)]
    errors: list[BaseException] = []

    def run(chunk: list[str]) -> None:
        try:
            for name in chunk:
                producer = client.create_producer(
                    f"persistent://public/default/{name}", batching_enabled=False
                )
                producer.send(b"x" * 100)
                producer.close()
        except BaseException as exc:  # noqa: BLE001  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(chunk,)) for chunk in chunks]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    client.close()
    if errors:
        raise click.ClickException(f"first use failed: {errors[0]!r}")
    return elapsed


def _loaded_topics(admin_url: str) -> int:
    response = httpx.get(f"{admin_url}/admin/v2/broker-stats/load-report", timeout=30.0)
    return int(response.json()["numTopics"]) if response.status_code == 200 else -1


@click.command()
@click.option("--topics", default=5000, show_default=True, help="Topics created over REST.")
@click.option("--first-use", default=1000, show_default=True, help="Topics created by a first producer.")
@click.option("--concurrency", default=16, show_default=True, help="Requests / client threads in flight.")
@click.option(
    "--unload-after", default=0.0, show_default=True, help="Idle seconds before unload (0: no row)."
)
@click.option("--profile", type=click.Path(path_type=Path), default=None, help="py-spy raw output file.")
def main(topics: int, first_use: int, concurrency: int, unload_after: float, profile: Path | None) -> None:
    """Measure the topic lifecycle (module docstring)."""
    root = Path(tempfile.mkdtemp(prefix="quasar-lifecycle-"))
    extra: tuple[str, ...] = ("--log-level", "WARNING")
    if unload_after > 0:
        config = root / "broker.toml"
        config.write_text(
            "broker_unload_inactive_topics_enabled = true\n"
            f"broker_unload_inactive_topics_frequency_seconds = {max(unload_after / 4, 0.5)}\n"
            f"broker_unload_inactive_topics_max_inactive_duration_seconds = {unload_after}\n"
        )
        extra += ("--config", str(config))
    broker = BrokerProcess(root / "data", extra_args=extra)
    try:
        broker.start()
        assert broker.pid is not None and broker.admin_url is not None and broker.service_url is not None
        time.sleep(1.0)
        rss_before = _rss_kib(broker.pid)
        spy = start_profile(profile, "rest", broker.pid)
        names = [f"lc-{i}" for i in range(topics)]
        cpu, own = _cpu_s(broker.pid), _cpu_s(os.getpid())
        rest_s = asyncio.run(_rest_create(broker.admin_url, names, concurrency))
        rest_cpu, client_cpu = _cpu_s(broker.pid) - cpu, _cpu_s(os.getpid()) - own
        stop_profile(spy)
        rss_loaded = _rss_kib(broker.pid)
        click.echo(
            f"REST create          {topics} topics in {rest_s:.2f} s: {topics / rest_s:,.0f} topics/s,"
            f" broker CPU {rest_cpu * 1e6 / topics:,.0f} us/topic (client {client_cpu * 1e6 / topics:,.0f})"
        )
        click.echo(f"RSS per loaded topic {(rss_loaded - rss_before) / max(topics, 1):.1f} KiB")
        if first_use:
            used = [f"fu-{i}" for i in range(first_use)]
            spy = start_profile(profile, "first-use", broker.pid)
            cpu, own = _cpu_s(broker.pid), _cpu_s(os.getpid())
            fu_s = _first_use(broker.service_url, used, concurrency)
            fu_cpu, client_cpu = _cpu_s(broker.pid) - cpu, _cpu_s(os.getpid()) - own
            stop_profile(spy)
            click.echo(
                f"first use            {first_use} topics in {fu_s:.2f} s: {first_use / fu_s:,.0f} topics/s,"
                f" broker CPU {fu_cpu * 1e6 / first_use:,.0f} us/topic (client {client_cpu * 1e6 / first_use:,.0f})"
            )
        if unload_after > 0:
            deadline = time.monotonic() + unload_after * 3 + 30
            while time.monotonic() < deadline and _loaded_topics(broker.admin_url) > 0:
                time.sleep(0.5)
            click.echo(
                f"RSS after idle unload {_rss_kib(broker.pid) / 1024:.0f} MiB (was {rss_loaded / 1024:.0f} MiB"
                f" loaded), loaded topics now {_loaded_topics(broker.admin_url)}"
            )
        broker.stop()
        started = time.perf_counter()
        broker.start()  # same directory; the time includes the interpreter start and imports
        assert broker.pid is not None
        ready_s = time.perf_counter() - started
        click.echo(
            f"restart              ready in {ready_s:.2f} s, RSS {_rss_kib(broker.pid) / 1024:.0f} MiB"
        )
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
