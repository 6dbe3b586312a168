"""Cluster benchmark: one broker process against two (partitions spread over both), same official-client
workload, one sitting.

For each broker count (default 1, then 2) the script starts etcd and that many ``quasar broker`` processes
(one broker group each, free ports, a temporary directory), creates a partitioned topic (``--partitions``,
default 4) whose partitions are placed over the groups, and runs the official ``pulsar-client`` against the
first broker's service URL (the client looks each partition up and connects to its owner):

- produce: one producer on the partitioned topic, ``send_async`` of ``--messages`` messages of ``--size`` bytes
  (round-robin over partitions, batching on unless ``--no-batching``), until every receipt arrived;
- consume: a Shared subscription made before producing; its consumer connects once every receipt arrived and
  receives + acknowledges the whole backlog.

| Column           | Meaning                                                                                  |
|------------------|------------------------------------------------------------------------------------------|
| brokers          | broker processes (= broker groups) the partitions are spread over                        |
| produce msg/s    | messages / (last receipt - first send_async)                                             |
| consume msg/s    | messages / (last receive - first receive), with one acknowledge per message              |
| client CPU s     | this process's user + system CPU over produce + consume (the official client's threads)  |
| broker CPU s     | user + system CPU of every broker process over produce + consume, summed                 |
| partitions/group | how the partitions were placed                                                           |

The last line prints the ratios 2 brokers / 1 broker. The machine's core count bounds them: with 2 cores the
client and the brokers share the same cores, so a second broker process only helps while one broker's
event loop (one core) is the bottleneck and a core is still idle. Numbers are for comparisons in one sitting
and are never asserted by tests.

Usage: ``python benchmarks/cluster.py [--messages N] [--size B] [--partitions P] [--brokers 1,2]``
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import click
import pulsar
from produce_consume import cpu_seconds
from rich.console import Console
from rich.table import Table

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.etcd import EtcdProcess


@dataclass(frozen=True, slots=True)
class Result:
    brokers: int
    produce_msg_s: float
    consume_msg_s: float
    client_cpu_s: float
    broker_cpu_s: float
    placement: dict[str, int]


def _http(method: str, url: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
        return json.loads(text) if text else None


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system


def run(root: Path, brokers: int, messages: int, size: int, partitions: int, batching: bool) -> Result:
    etcd = EtcdProcess(root / "etcd").start()
    started: list[BrokerProcess] = []
    try:
        for index in range(brokers):
            group = f"broker-{chr(ord('a') + index)}"
            started.append(
                BrokerProcess(
                    root / group,
                    subcommand="broker",
                    extra_args=(
                        "--broker-name",
                        group,
                        "--metadata-store",
                        etcd.url,
                        "--log-level",
                        "WARNING",
                    ),
                ).start()
            )
        first = started[0]
        time.sleep(1.0)  # let every broker see the others' registrations before placing partitions
        topic = "persistent://public/default/bench"
        _http("PUT", f"{first.admin_url}/admin/v2/persistent/public/default/bench/partitions", partitions)
        by_url = {str(b.service_url): f"broker-{chr(ord('a') + i)}" for i, b in enumerate(started)}
        placement: Counter[str] = Counter()
        for i in range(partitions):
            answer = _http(
                "GET", f"{first.admin_url}/lookup/v2/topic/persistent/public/default/bench-partition-{i}"
            )
            placement[by_url[answer["brokerUrl"]]] += 1  # type: ignore[index]
        client = pulsar.Client(str(first.service_url), logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            # the subscription exists before producing; its consumer connects after, to read the backlog
            client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared).close()
            producer = client.create_producer(
                topic,
                batching_enabled=batching,
                max_pending_messages=5000,
                block_if_queue_full=True,
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            )
            payload = b"x" * size
            done = threading.Event()
            receipts = [0]

            def on_receipt(_result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                receipts[0] += 1
                if receipts[0] == messages:
                    done.set()

            cpu0, client0 = [cpu_seconds(b.pid) or 0.0 for b in started], _process_cpu()
            t0 = time.perf_counter()
            for _ in range(messages):
                producer.send_async(payload, on_receipt)
            producer.flush()
            done.wait(120)
            produce_s = time.perf_counter() - t0
            consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared,
                                        receiver_queue_size=5000)  # fmt: skip
            received = 0
            first_receive = 0.0
            while received < messages:
                message = consumer.receive(30_000)
                if received == 0:
                    first_receive = time.perf_counter()
                consumer.acknowledge(message)
                received += 1
            consume_s = time.perf_counter() - first_receive
            cpu1, client1 = [cpu_seconds(b.pid) or 0.0 for b in started], _process_cpu()
        finally:
            client.close()
        return Result(
            brokers,
            messages / produce_s,
            messages / consume_s,
            client1 - client0,
            sum(cpu1) - sum(cpu0),
            dict(sorted(placement.items())),
        )
    finally:
        for broker in started:
            broker.stop()
        etcd.stop()


@click.command()
@click.option("--messages", default=200_000, show_default=True)
@click.option("--size", default=100, show_default=True, help="Payload bytes.")
@click.option("--partitions", default=4, show_default=True)
@click.option("--brokers", "counts", default="1,2", show_default=True, help="Broker counts to run, in order.")
@click.option("--no-batching", is_flag=True, help="One message per entry.")
def main(messages: int, size: int, partitions: int, counts: str, no_batching: bool) -> None:
    """One broker vs two: produce and consume msg/s, client and broker CPU."""
    console = Console()
    results = []
    for count in (int(c) for c in counts.split(",")):
        with tempfile.TemporaryDirectory(prefix="quasar-cluster-bench-") as root:
            results.append(run(Path(root), count, messages, size, partitions, not no_batching))
    table = Table(title=f"{messages:,} x {size} B, {partitions} partitions, batching {'off' if no_batching else 'on'}"
                        f", {os.cpu_count()} cores")  # fmt: skip
    for column in (
        "brokers",
        "produce msg/s",
        "consume msg/s",
        "client CPU s",
        "broker CPU s",
        "partitions/group",
    ):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(str(r.brokers), f"{r.produce_msg_s:,.0f}", f"{r.consume_msg_s:,.0f}", f"{r.client_cpu_s:.1f}",
                      f"{r.broker_cpu_s:.1f}", " ".join(f"{g}:{n}" for g, n in r.placement.items()))  # fmt: skip
    console.print(table)
    if len(results) >= 2:
        one, two = results[0], results[1]
        console.print(
            f"ratio {two.brokers} / {one.brokers} brokers: produce {two.produce_msg_s / one.produce_msg_s:.2f}x,"
            f" consume {two.consume_msg_s / one.consume_msg_s:.2f}x"
        )


if __name__ == "__main__":
    main()
