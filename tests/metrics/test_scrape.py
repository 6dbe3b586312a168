"""``GET /metrics`` of a real broker process after a known workload through the official ``pulsar`` client,
parsed with prometheus_client's parser: counters moved by exactly the workload, backlog = published - acked,
producer/consumer/subscription counts, latency histograms holding every entry, the store's gauges sane, rates
that agree with ``{topic}/stats``; and, with ``expose_topic_level_metrics_in_prometheus = false``, the same
numbers summed per namespace with no topic label (Pulsar's NamespaceStatsAggregator)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from quasar.broker.topic_stats import LATENCY_BUCKET_SUFFIXES
from quasar.testing.broker_process import BrokerProcess

N, SIZE, ACKED = 20, 200, 8
Samples = dict[str, list[tuple[dict[str, str], float]]]


def _broker(root: Path, settings: str) -> Iterator[BrokerProcess]:
    config = root / "broker.toml"
    config.write_text(settings)
    broker = BrokerProcess(root / "data", extra_args=("--config", str(config)))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory.mktemp("metrics"), "stats_update_frequency_in_secs = 1.0\n")


@pytest.fixture(scope="module")
def ns_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(
        tmp_path_factory.mktemp("metrics-ns"),
        "stats_update_frequency_in_secs = 1.0\nexpose_topic_level_metrics_in_prometheus = false\n",
    )


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


def scrape(broker: BrokerProcess) -> Samples:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels are exactly ``labels`` (plus ``cluster``)."""
    found = [
        v for ls, v in samples.get(name, []) if {k: x for k, x in ls.items() if k != "cluster"} == labels
    ]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def stats(broker: BrokerProcess, topic: str) -> dict:
    path = topic.replace("://", "/")
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/{path}/stats", timeout=10) as resp:
        return json.loads(resp.read())


def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def publish_and_consume(client: pulsar.Client, topic: str, subscription: str, n: int, acked: int) -> None:
    """``n`` messages of SIZE bytes (each with a key, so the index holds them) through one producer; one
    consumer of ``subscription`` receives and acknowledges ``acked`` of them and stays connected."""
    consumer = client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(bytes([i % 256]) * SIZE, partition_key=f"key-{i}")
    for _ in range(acked):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))


def test_counters_gauges_and_histograms_after_a_known_workload(broker: BrokerProcess, client) -> None:
    topic = f"persistent://public/default/metrics-{uuid.uuid4().hex[:8]}"
    publish_and_consume(client, topic, "sub", N, ACKED)
    t = {"namespace": "public/default", "topic": topic}
    sub = {**t, "subscription": "sub"}
    # acknowledgements travel asynchronously: wait for the backlog to show them
    until(lambda: value(scrape(broker), "pulsar_subscription_back_log", **sub) == N - ACKED)
    until(lambda: value(scrape(broker), "quasar_store_index_entries") >= N)  # the reput thread indexes keys
    samples = scrape(broker)
    topic_stats = stats(broker, topic)

    assert value(samples, "pulsar_in_messages_total", **t) == N == topic_stats["msgInCounter"]
    in_bytes = value(samples, "pulsar_in_bytes_total", **t)
    assert in_bytes == topic_stats["bytesInCounter"] and in_bytes >= N * SIZE  # entry bytes: metadata too
    out_messages = value(samples, "pulsar_out_messages_total", **t)
    assert ACKED <= out_messages <= N and out_messages == topic_stats["msgOutCounter"]
    assert value(samples, "pulsar_out_messages_total", **sub) == out_messages
    assert value(samples, "pulsar_out_bytes_total", **sub) == value(samples, "pulsar_out_bytes_total", **t)
    assert value(samples, "pulsar_out_bytes_total", **t) >= out_messages * SIZE
    assert value(samples, "pulsar_msg_backlog", **t) == N - ACKED
    assert topic_stats["subscriptions"]["sub"]["msgBacklog"] == N - ACKED
    assert value(samples, "pulsar_producers_count", **t) == 1
    assert value(samples, "pulsar_consumers_count", **t) == 1
    assert value(samples, "pulsar_subscriptions_count", **t) == 1
    assert value(samples, "pulsar_subscription_consumers_count", **sub) == 1
    assert value(samples, "pulsar_topics_count", namespace="public/default") >= 1
    storage_size = value(samples, "pulsar_storage_size", **t)
    assert storage_size == in_bytes

    for prefix, at_least in (
        ("pulsar_storage_write_latency", N),
        ("quasar_publish_latency", N),
        ("quasar_dispatch_latency", out_messages),
    ):
        count = value(samples, f"{prefix}_count", **t)
        buckets = [value(samples, f"{prefix}_{suffix}", **t) for suffix in LATENCY_BUCKET_SUFFIXES]
        assert count >= at_least and sum(buckets) == count, prefix
        assert value(samples, f"{prefix}_sum", **t) >= 0

    top = value(samples, "quasar_store_commit_log_max_offset_bytes")
    assert top >= storage_size  # every entry is one commit log record, with its header
    assert value(samples, "quasar_store_commit_log_size_bytes") <= top
    assert 0 <= value(samples, "quasar_store_flush_lag_bytes") <= top
    assert 0 <= value(samples, "quasar_store_reput_lag_bytes") <= top
    assert 0 < value(samples, "quasar_store_disk_used_ratio") <= 1
    assert value(samples, "quasar_store_writable") == 1 and value(samples, "quasar_store_disk_full") == 0
    assert value(samples, "quasar_store_flush_latency_count") >= 1  # SYNC_FLUSH: group commits ran
    assert value(samples, "quasar_event_loop_lag_count") >= 1
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_open_fds") > 0


def test_rates_move_while_messages_flow_and_agree_with_stats(broker: BrokerProcess, client) -> None:
    """Rates are per stats period (1 s here): while a producer and a consumer run, the topic's and the
    subscription's rates turn positive in both ``/metrics`` and ``{topic}/stats``."""
    topic = f"persistent://public/default/rates-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "live")
    producer = client.create_producer(topic, batching_enabled=False)
    stop = threading.Event()

    def flow() -> None:
        for _ in range(400):  # bounded: at most 400 messages, ~20 s
            if stop.is_set():
                return
            producer.send(b"r" * SIZE)
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            time.sleep(0.05)

    worker = threading.Thread(target=flow, daemon=True)
    worker.start()
    t = {"namespace": "public/default", "topic": topic}
    try:

        def flowing() -> bool:
            samples = scrape(broker)
            return all(
                value(samples, name, **labels) > 0
                for name, labels in (
                    ("pulsar_rate_in", t),
                    ("pulsar_throughput_in", t),
                    ("pulsar_rate_out", t),
                    ("pulsar_throughput_out", t),
                    ("pulsar_subscription_msg_rate_out", {**t, "subscription": "live"}),
                )
            )

        until(flowing, timeout_s=15)
        until(lambda: stats(broker, topic)["msgRateIn"] > 0 and stats(broker, topic)["msgThroughputOut"] > 0)
    finally:
        stop.set()
        worker.join(timeout=15)


def test_namespace_aggregation_when_topic_level_metrics_are_off(ns_broker: BrokerProcess) -> None:
    namespace = "public/default"
    client = pulsar.Client(ns_broker.service_url, operation_timeout_seconds=10)
    try:
        first, second = (f"persistent://{namespace}/agg-{i}-{uuid.uuid4().hex[:6]}" for i in (1, 2))
        publish_and_consume(client, first, "a", 5, 2)
        publish_and_consume(client, second, "b", 7, 3)
        ns = {"namespace": namespace}
        until(lambda: value(scrape(ns_broker), "pulsar_msg_backlog", **ns) == (5 - 2) + (7 - 3))
        samples = scrape(ns_broker)
    finally:
        client.close()
    assert value(samples, "pulsar_topics_count", **ns) == 2
    assert value(samples, "pulsar_in_messages_total", **ns) == 12
    assert value(samples, "pulsar_producers_count", **ns) == 2
    assert value(samples, "pulsar_consumers_count", **ns) == 2
    assert value(samples, "pulsar_subscriptions_count", **ns) == 2
    assert value(samples, "pulsar_storage_write_latency_count", **ns) >= 12
    assert value(samples, "pulsar_in_bytes_total", **ns) == value(samples, "pulsar_storage_size", **ns)
    assert not any(name.startswith("pulsar_subscription_") for name in samples)
    for name, entries in samples.items():
        if name.startswith("pulsar_"):
            assert all("topic" not in labels and "subscription" not in labels for labels, _ in entries), name


def test_each_partition_is_a_topic_and_partitioned_stats_sum_them(broker: BrokerProcess, client) -> None:
    name = f"parted-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/persistent/public/default/{name}/partitions",
        data=b"2",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 204
    topic = f"persistent://public/default/{name}"
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(6):
        producer.send(b"p" * SIZE, partition_key=f"k{i}")
    producer.close()
    samples = scrape(broker)
    per_partition = {
        labels["topic"]: v
        for labels, v in samples["pulsar_in_messages_total"]
        if labels["topic"].startswith(topic + "-partition-")
    }
    assert set(per_partition) == {f"{topic}-partition-0", f"{topic}-partition-1"}
    assert sum(per_partition.values()) == 6
    with urllib.request.urlopen(
        f"{broker.admin_url}/admin/v2/persistent/public/default/{name}/partitioned-stats", timeout=10
    ) as resp:
        assert json.loads(resp.read())["msgInCounter"] == 6
