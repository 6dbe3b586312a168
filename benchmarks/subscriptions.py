"""Subscription benchmarks: consume-and-ack throughput for Shared and Key_Shared, cursor persistence cost.

Three measurements, one table row each:

| Row                         | What is measured                                                              |
|-----------------------------|-------------------------------------------------------------------------------|
| Shared, 4 consumers         | ``--messages`` messages (batching on) published first, then 4 Shared consumers |
|                             | (one thread each) receive + acknowledge all of them: msg/s over the consume   |
|                             | phase (first receive -> last ack)                                             |
| Key_Shared, 4 x 1,000 keys  | the same with ``--keys`` partition keys (key-based batching) and a Key_Shared |
|                             | subscription; also checks that each key went to exactly one consumer          |
| cursor persist, 10k holes   | in process: a durable cursor over 20,000 entries with every other entry acked |
|                             | (10,000 ack holes); mean ms to snapshot + write its state to the SQLite       |
|                             | metadata store (``--persist-rounds`` rounds), and the stored JSON size        |

The broker is a ``quasar standalone`` subprocess on free ports in a temporary directory (removed
afterwards) unless ``--service-url`` is given. Numbers are for comparison only, never asserted by tests.

Usage: ``python benchmarks/subscriptions.py [--messages N] [--keys K] [--service-url URL]``
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import click
import pulsar
from rich.console import Console
from rich.table import Table

from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.testing.broker_process import BrokerProcess
from quasar.testing.fake_store import FakeMessageStore

CONSUMERS = 4


def _publish(client: pulsar.Client, topic: str, messages: int, keys: int) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=10,
        batching_type=pulsar.BatchingType.KeyBased if keys else pulsar.BatchingType.Default,
        block_if_queue_full=True,
    )
    for i in range(messages):
        if keys:
            producer.send_async(b"x" * 100, None, partition_key=f"key-{i % keys}")
        else:
            producer.send_async(b"x" * 100, None)
    producer.flush()
    producer.close()


def consume_throughput(service_url: str, messages: int, keys: int) -> tuple[float, bool]:
    """(msg/s of the consume phase, whether every key stayed on one consumer)."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-subs-{uuid.uuid4().hex[:8]}"
    sub_type = pulsar.ConsumerType.KeyShared if keys else pulsar.ConsumerType.Shared
    try:
        consumers = [
            client.subscribe(
                topic,
                "bench",
                consumer_type=sub_type,
                consumer_name=f"c{i}",
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for i in range(CONSUMERS)
        ]
        _publish(client, topic, messages, keys)
        received = [0] * CONSUMERS
        owners: dict[str, set[int]] = defaultdict(set)
        lock = threading.Lock()
        stamps: list[float] = []

        def run(index: int) -> None:
            consumer = consumers[index]
            while True:
                with lock:
                    if sum(received) >= messages:
                        return
                try:
                    msg = consumer.receive(timeout_millis=2000)
                except pulsar.Timeout:
                    with lock:
                        if sum(received) >= messages:
                            return
                    continue
                consumer.acknowledge(msg)
                with lock:
                    if not stamps:
                        stamps.append(time.perf_counter())
                    received[index] += 1
                    if keys:
                        owners[msg.partition_key()].add(index)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(CONSUMERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - stamps[0]
        return messages / elapsed, all(len(v) == 1 for v in owners.values())
    finally:
        client.close()


async def _persist_cost(rounds: int, directory: Path) -> tuple[float, int]:
    metadata = await SqliteMetadataStore.open(directory / "metadata.db")
    factory = ManagedLedgerFactory(FakeMessageStore(), metadata, ManagedLedgerConfig())
    await factory.start()
    try:
        ledger = await factory.open("persistent://public/default/persist-bench")
        positions = [await ledger.add_entry(b"e") for _ in range(20_000)]
        cursor = await ledger.open_cursor("holes", "earliest")
        cursor.delete(positions[1::2])  # 10,000 holes
        started = time.perf_counter()
        for _ in range(rounds):
            # what flush() does when the state changed: snapshot it and write it to the metadata store
            await cursor.ledger.persist_cursor(cursor.snapshot())
        elapsed = time.perf_counter() - started
        size = len(json.dumps(cursor.snapshot().to_json()))
        return elapsed / rounds * 1000, size
    finally:
        await factory.close()
        await metadata.close()


@click.command()
@click.option("--messages", default=20_000, show_default=True, help="Messages per throughput run.")
@click.option("--keys", default=1000, show_default=True, help="Distinct keys for Key_Shared.")
@click.option("--persist-rounds", default=50, show_default=True, help="Cursor state writes to time.")
@click.option("--service-url", default=None, help="Use a running broker instead of starting one.")
def main(messages: int, keys: int, persist_rounds: int, service_url: str | None) -> None:
    console = Console()
    table = Table(title="Quasar subscriptions")
    table.add_column("benchmark")
    table.add_column("result", justify="right")
    table.add_column("note")
    with tempfile.TemporaryDirectory(prefix="quasar-bench-subs-") as tmp:
        broker = None
        if service_url is None:
            broker = BrokerProcess(Path(tmp) / "data", port=0, admin_port=0).start()
            service_url = broker.service_url
        try:
            rate, _ = consume_throughput(service_url, messages, 0)
            table.add_row(
                f"Shared, {CONSUMERS} consumers", f"{rate:,.0f} msg/s", f"{messages:,} msgs of 100 B"
            )
            rate, sticky = consume_throughput(service_url, messages, keys)
            table.add_row(
                f"Key_Shared, {CONSUMERS} x {keys:,} keys",
                f"{rate:,.0f} msg/s",
                "each key on one consumer" if sticky else "KEY MOVED BETWEEN CONSUMERS",
            )
        finally:
            if broker is not None:
                broker.stop()
        ms, size = asyncio.run(_persist_cost(persist_rounds, Path(tmp)))
        table.add_row("cursor persist, 10k holes", f"{ms:,.2f} ms/write", f"{size / 1024:,.0f} KiB JSON")
    console.print(table)


if __name__ == "__main__":
    main()
