"""Lookup answers the official client treats as final (reference/security.md §7), against a real broker."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.interop.helpers import new_client

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("action", ["produce", "subscribe"])
def test_a_topic_in_a_missing_namespace_fails_at_once_with_topic_not_found(broker, action):
    """Pulsar answers PARTITIONED_METADATA and LOOKUP of such a topic with TopicNotFound, which the client does
    not retry; a retriable MetadataError made it spin until its operation timeout (15 s here)."""
    client = new_client(broker)
    topic = "persistent://public/no-such-namespace/t"
    try:
        started = time.monotonic()
        with pytest.raises(pulsar.TopicNotFound):
            if action == "produce":
                client.create_producer(topic)
            else:
                client.subscribe(topic, "s")
        assert time.monotonic() - started < 10
    finally:
        client.close()


def test_listener_names_on_a_broker_without_advertised_listeners(broker):
    """Pulsar gives a broker without ``advertisedListeners`` one listener named ``internal``
    (``internalListenerName``): a client naming it gets in; any other name is refused (LOOKUP fails until the
    client's operation timeout, as against Pulsar)."""
    internal = pulsar.Client(broker.service_url, listener_name="internal", operation_timeout_seconds=5)
    try:
        producer = internal.create_producer("persistent://public/default/listeners")
        producer.send(b"through the internal listener")
    finally:
        internal.close()
    unknown = pulsar.Client(broker.service_url, listener_name="nope", operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            unknown.create_producer("persistent://public/default/listeners")
    finally:
        unknown.close()
