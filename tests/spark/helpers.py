"""Shared helpers of the Spark tests: topics on a broker, producing with the official client, reading back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pulsar


def new_topic(prefix: str = "spark") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker, topic: str, partitions: int = 0) -> None:
    """Create ``topic`` (partitioned when ``partitions`` > 0) through the admin REST API."""
    local = topic.split("persistent://", 1)[1]
    path = f"/admin/v2/persistent/{local}" + ("/partitions" if partitions else "")
    body = json.dumps(partitions).encode() if partitions else b""
    request = urllib.request.Request(
        broker.admin_url + path, data=body, method="PUT", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 204)


def client(broker) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def produce(
    broker, topic: str, values: list[bytes], *, batching: bool = True, keys=None, props=None, event_ms=None
):
    """Send ``values`` with the official client (batches of up to 10 when ``batching``); all acknowledged."""
    c = client(broker)
    try:
        producer = c.create_producer(
            topic,
            batching_enabled=batching,
            batching_max_messages=10,
            batching_max_publish_delay_ms=50,
            block_if_queue_full=True,
        )
        results = []
        for i, value in enumerate(values):
            kwargs = {}
            if keys is not None:
                kwargs["partition_key"] = keys[i]
            if props is not None:
                kwargs["properties"] = props[i]
            if event_ms is not None:
                kwargs["event_timestamp"] = event_ms[i]
            producer.send_async(value, lambda result, _id: results.append(result), **kwargs)
        producer.flush()
        assert results.count(pulsar.Result.Ok) == len(values)
    finally:
        c.close()


def options(broker, topic: str, **extra: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.admin_url, "topic": topic, **extra}


def admin_post(broker, path: str, body) -> int:
    request = urllib.request.Request(
        broker.admin_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code
