"""Shared builders of the name server tests."""

from __future__ import annotations

from typing import Any

from quasar.nameserver.messages import (
    BrokerIdentity,
    DataVersion,
    parse_register_broker,
    register_broker_request,
)


def identity(
    name: str = "broker-a", broker_id: int = 0, port: int = 10911, cluster: str = "c1"
) -> BrokerIdentity:
    """A broker identity on 127.0.0.1:``port`` with an HA address on ``port + 1``."""
    return BrokerIdentity(
        cluster_name=cluster,
        broker_name=name,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{port}",
        service_url=f"pulsar://127.0.0.1:{port}",
        web_service_url=f"http://127.0.0.1:{port + 1000}",
        ha_server_addr=f"127.0.0.1:{port + 1}",
        listeners={"internal": {"pulsar": f"pulsar://10.0.0.1:{port}"}},
    )


def topic_config(partition_count: int = 0, partitions: tuple[int, ...] = ()) -> dict[str, Any]:
    queues = max(1, len(partitions))
    return {
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicSysFlag": 0,
        "order": False,
        "partitionCount": partition_count,
        "partitions": list(partitions),
    }


def registration(who: BrokerIdentity, topics: dict[str, dict[str, Any]], version: DataVersion, **kwargs: Any):
    """A parsed REGISTER_BROKER, through the real encoder and parser."""
    return parse_register_broker(register_broker_request(1, who, topics, version, **kwargs))
