"""Chunked messages of the official client pass the broker's size check (Pulsar exempts chunks from it)."""

from __future__ import annotations

import uuid

import pulsar
import pytest

pytestmark = pytest.mark.interop


def test_official_chunked_message_round_trip(broker_factory, tmp_path):
    config = tmp_path / "small.toml"
    config.write_text("max_message_size = 10240\n")
    broker = broker_factory(extra_args=("--config", str(config)))
    client = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        topic = f"persistent://public/default/chunks-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        big = bytes(range(256)) * 200  # 51,200 bytes: six chunks of at most 10 KiB
        producer.send(big, properties={"n": "1"})
        message = consumer.receive(timeout_millis=10_000)
        assert message.data() == big and message.properties() == {"n": "1"}
        consumer.acknowledge(message)
    finally:
        client.close()
