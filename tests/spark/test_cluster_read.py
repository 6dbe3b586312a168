"""The Spark connector reads a partitioned topic whose partitions live on three broker groups, through one
broker's URLs (issue 14): every message once, from every group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from quasar.testing.etcd import etcd_available
from tests.cluster.test_brokers import LocalCluster, create_partitioned, owner_groups

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not etcd_available(), reason="etcd is not installed (apt-get install etcd-server)"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path / "cluster", nameservers=1)
    try:
        yield made.start()
    finally:
        made.stop()


def test_batch_read_of_a_topic_spread_over_three_brokers(spark, cluster: LocalCluster):
    topic = create_partitioned(cluster, 6)
    assert set(owner_groups(cluster, topic, 6).values()) == {"broker-a", "broker-b", "broker-c"}
    client = cluster.client("broker-a")
    try:
        producer = client.create_producer(
            topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
        )
        for i in range(600):
            producer.send_async(f"v{i}".encode(), None)
        producer.flush()
    finally:
        client.close()
    first = cluster.brokers["broker-a"]
    rows = (
        spark.read.format("quasar")
        .options(**{"service.url": str(first.service_url), "admin.url": str(first.admin_url), "topic": topic})
        .load()
        .select("value", "partition")
        .collect()
    )
    assert sorted(row.value for row in rows) == sorted(f"v{i}".encode() for i in range(600))
    assert {row.partition for row in rows} == set(range(6))
