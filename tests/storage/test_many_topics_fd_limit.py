"""2,000 topics on a broker with 256 file descriptors (issue 21): the consume queue files are mapped within a
budget derived from ``RLIMIT_NOFILE`` (16 files at 256), so every topic takes a message and gives it back, and
the broker never runs out of descriptors nor refuses a put for lack of them."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

from quasar.client import AsyncClient, InitialPosition
from quasar.testing.broker_process import BrokerProcess

TOPICS = 2000
FD_LIMIT = 256
CONCURRENCY = 32


def topic(i: int) -> str:
    return f"persistent://public/default/fd-limit-{i}"


def payload(i: int) -> bytes:
    return b"message for topic %05d " % i + b"x" * 60


def limited_python(tmp_path: Path) -> str:
    """A wrapper that runs this interpreter under ``ulimit -n 256`` (soft and hard: the broker raises its soft
    limit to the hard one at start, so a soft-only limit would not hold)."""
    wrapper = tmp_path / "python-fd-limit"
    wrapper.write_text(f'#!/bin/sh\nulimit -n {FD_LIMIT} || exit 97\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


async def _each(count: int, job: object) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            await job(queue.get_nowait())  # type: ignore[operator]

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def _write_then_read(service_url: str, broker_pid: int) -> tuple[dict[int, bytes], int]:
    received: dict[int, bytes] = {}
    most_fds = 0
    async with AsyncClient(service_url, operation_timeout_seconds=60) as client:

        async def write(i: int) -> None:
            producer = await client.create_producer(
                topic(i), batching_enabled=False, send_timeout_millis=60_000
            )
            await producer.send(payload(i))
            await producer.close()

        async def read(i: int) -> None:
            nonlocal most_fds
            consumer = await client.subscribe(topic(i), "reader", initial_position=InitialPosition.Earliest)
            message = await consumer.receive(timeout_millis=30_000)
            received[i] = bytes(message.data())
            await consumer.acknowledge(message)
            await consumer.close()
            if i % 100 == 0:
                most_fds = max(most_fds, len(os.listdir(f"/proc/{broker_pid}/fd")))

        await _each(TOPICS, write)
        await _each(TOPICS, read)
    return received, most_fds


def test_two_thousand_topics_under_a_256_descriptor_limit(tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data", python=limited_python(tmp_path))
    try:
        broker.start()
        assert broker.service_url is not None and broker.pid is not None
        limits = Path(f"/proc/{broker.pid}/limits").read_text()
        assert any(
            line.startswith("Max open files") and f" {FD_LIMIT} " in line for line in limits.splitlines()
        )
        received, most_fds = asyncio.run(_write_then_read(broker.service_url, broker.pid))
        log = broker.stderr_text() + broker.stdout_text()
    finally:
        broker.stop()
    assert received == {i: payload(i) for i in range(TOPICS)}
    assert 0 < most_fds < FD_LIMIT
    assert "too many open files" not in log.lower()
