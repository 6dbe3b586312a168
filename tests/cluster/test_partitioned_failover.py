"""A partitioned topic spread over two replicated broker groups, read by the official client, while one group's
master is SIGKILLed: its slave is elected, the client's partition producers and consumers follow it through
lookup, and every receipted message is consumed (nothing lost, the failed-over partitions flow again).

Real etcd, name server and broker processes (``quasar cluster up --brokers 2 --slaves 1``, SYNC_MASTER).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.cluster.conftest import ClusterFactory, needs_etcd
from tests.cluster.test_cluster_up import http_json, wait_until

PARTITIONS = 4
TOPIC = "persistent://public/default/failover-orders"


def _owner_url(admin_url: str, partition: int) -> str:
    """The broker service URL that HTTP lookup names as the owner of one partition."""
    _, answer = http_json(
        f"{admin_url}/lookup/v2/topic/persistent/public/default/failover-orders-partition-{partition}"
    )
    return str(answer["brokerUrl"])


@needs_etcd
@pytest.mark.slow
def test_partitioned_consumer_follows_the_failed_over_group(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=2, nameservers=1, slaves=1)
    master_a, master_b = cluster.broker("broker-a"), cluster.broker("broker-b")
    admin = master_b["webServiceUrl"]
    request = urllib.request.Request(
        f"{admin}/admin/v2/persistent/public/default/failover-orders/partitions",
        data=str(PARTITIONS).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    owners = {p: _owner_url(admin, p) for p in range(PARTITIONS)}
    on_a = {p for p, url in owners.items() if url == master_a["serviceUrl"]}
    assert on_a and len(on_a) < PARTITIONS, f"placement must use both groups: {owners}"

    hosts = ",".join(url.split("://")[1] for url in (master_a["serviceUrl"], master_b["serviceUrl"]))
    client = pulsar.Client(f"pulsar://{hosts}", operation_timeout_seconds=60, logger=_quiet_logger())
    try:
        consumer = client.subscribe(TOPIC, "orders", receiver_queue_size=20)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
        )
        receipted: set[int] = set()
        seen: dict[int, int] = {}  # value -> partition it was consumed from
        lock, done = threading.Lock(), threading.Event()

        def consume() -> None:
            while not done.is_set():
                try:
                    message = consumer.receive(500)
                except pulsar.Timeout:
                    continue
                partition = int(message.topic_name().rsplit("-", 1)[1])
                with lock:
                    seen[int(message.data())] = partition
                consumer.acknowledge(message)

        def send(values: range) -> None:
            for value in values:

                def on_receipt(result: Any, _message_id: Any, value: int = value) -> None:
                    if result == pulsar.Result.Ok:
                        with lock:
                            receipted.add(value)

                producer.send_async(str(value).encode(), on_receipt, partition_key=f"k{value}")

        reader = threading.Thread(target=consume, name="consume", daemon=True)
        reader.start()
        send(range(0, 200))
        wait_until(lambda: len(receipted) == 200, timeout_s=30, what="200 receipts before the kill")
        wait_until(lambda: len(seen) >= 200, timeout_s=30, what="200 messages consumed before the kill")

        os.kill(master_a["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        send(range(200, 600))
        wait_until(
            lambda: len(receipted) == 600, timeout_s=120, what="every send receipted after the failover"
        )
        wait_until(lambda: receipted <= seen.keys(), timeout_s=60, what="every receipted message consumed")
        done.set()
        reader.join(5)
        with lock:
            after_kill = [partition for value, partition in seen.items() if value >= 200]
        assert on_a & set(after_kill), "the failed-over group's partitions must flow again"
        assert receipted <= seen.keys()
        assert time.monotonic() - killed_at < 180
        producer.close()
        consumer.close()
    finally:
        client.close()


def _quiet_logger() -> Any:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
