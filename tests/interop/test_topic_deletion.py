"""Deleting topics over the admin REST API (Pulsar ``pulsar-admin topics delete [-f]`` and
``delete-partitioned-topic``) against a real broker, checked through the official client: a topic created
again under the same name starts empty, also after a restart; connected clients refuse a plain delete and are
disconnected by a forced one; partitioned topics go with their metadata and schema."""

from __future__ import annotations

import pulsar
import pytest

from tests.interop.helpers import admin, create_partitioned, new_client, topic_name

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def _drain(client: pulsar.Client, topic: str, subscription: str) -> list[bytes]:
    """Every message a new subscription from the earliest position reads, until 1 s of silence."""
    consumer = client.subscribe(
        topic, subscription, initial_position=pulsar.InitialPosition.Earliest
    )
    received = []
    try:
        for _ in range(1000):  # bounded
            try:
                message = consumer.receive(1000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            received.append(message.data())
    finally:
        consumer.close()
    return received


def test_a_deleted_topic_comes_back_empty_and_stays_so_after_a_restart(broker):
    topic = topic_name("deleted")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "sub")
        for i in range(5):
            producer.send(b"old-%d" % i)
        # connected clients: a plain delete is refused (Pulsar's TopicBusyException, 412), nothing is lost
        status, body = admin(broker, "DELETE", _path(topic))
        assert status == 412 and "active producers/subscriptions" in body["reason"]
        assert consumer.receive(10_000).data() == b"old-0"
        producer.close()
        consumer.close()

        assert admin(broker, "DELETE", _path(topic))[0] == 204
        assert topic not in admin(broker, "GET", "/admin/v2/persistent/public/default")[1]
        assert admin(broker, "GET", _path(topic) + "/stats")[0] == 404
        assert admin(broker, "DELETE", _path(topic))[0] == 404

        # the same name again: a new, empty topic; the old subscription is gone too
        producer = client.create_producer(topic)
        producer.send(b"new-0")
        producer.close()
        assert _drain(client, topic, "fresh") == [b"new-0"]
        status, stats = admin(broker, "GET", _path(topic) + "/stats")
        assert status == 200 and "sub" not in stats["subscriptions"]
    finally:
        client.close()

    broker.restart()
    client = new_client(broker)
    try:
        assert _drain(client, topic, "after-restart") == [b"new-0"]
    finally:
        client.close()


def test_force_delete_disconnects_the_clients_which_go_on_with_a_new_topic(broker):
    topic = topic_name("forced")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, send_timeout_millis=30_000)
        consumer = client.subscribe(topic, "sub")
        for i in range(3):
            producer.send(b"old-%d" % i)
        assert admin(broker, "DELETE", _path(topic) + "?force=true")[0] == 204
        # the producer reconnects and its next message goes to the topic created afresh
        producer.send(b"after")
        assert _drain(client, topic, "fresh") == [b"after"]
        producer.close()
        consumer.close()
    finally:
        client.close()


def test_delete_partitioned_topic_with_its_partitions_metadata_and_schema(broker):
    topic = topic_name("parted")
    create_partitioned(broker, topic, 3)
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, schema=pulsar.schema.StringSchema())
        for i in range(9):
            producer.send(f"m{i}", partition_key=str(i))
        producer.close()
        assert admin(broker, "GET", f"/admin/v2/schemas/{topic.split('://')[1]}/schema")[0] == 200

        status, body = admin(broker, "DELETE", _path(topic))  # the base name needs /partitions
        assert status == 409, body
        assert admin(broker, "DELETE", _path(topic) + "/partitions")[0] == 204
        assert admin(broker, "GET", "/admin/v2/persistent/public/default/partitioned")[1].count(topic) == 0
        listed = admin(broker, "GET", "/admin/v2/persistent/public/default")[1]
        assert not [name for name in listed if name.startswith(topic + "-partition-")]
        assert admin(broker, "GET", f"/admin/v2/schemas/{topic.split('://')[1]}/schema")[0] == 404
        assert admin(broker, "DELETE", _path(topic) + "/partitions")[0] == 404

        # created again, as a non-partitioned topic this time: empty
        producer = client.create_producer(topic)
        producer.send(b"alone")
        producer.close()
        assert _drain(client, topic, "s") == [b"alone"]
    finally:
        client.close()


def test_delete_answers_404_for_unknown_topics_and_namespaces(broker):
    assert admin(broker, "DELETE", _path(topic_name("never")))[0] == 404
    assert admin(broker, "DELETE", "/admin/v2/persistent/public/no-such-ns/t")[0] == 404
    assert admin(broker, "DELETE", _path(topic_name("never")) + "/partitions")[0] == 404
