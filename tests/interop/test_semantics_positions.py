"""Positions and reading: readers, receiver queue size 0, subscription deletion (force)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest

from tests.interop.helpers import new_client, topic_name

pytestmark = pytest.mark.interop


def read_all(reader, timeout_ms: int = 800) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(reader.read_next(timeout_millis=timeout_ms).data())
        except pulsar.Timeout:
            return out


def test_reader_start_positions(broker):
    topic = topic_name("pos")
    client = new_client(broker)
    try:
        empty = client.create_reader(topic, pulsar.MessageId.earliest)
        assert not empty.has_message_available()
        producer = client.create_producer(topic)
        ids = [producer.send(f"{i}".encode()) for i in range(6)]
        assert read_all(empty) == [f"{i}".encode() for i in range(6)]
        exclusive = client.create_reader(topic, ids[2])
        assert read_all(exclusive) == [b"3", b"4", b"5"]
        inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
        assert read_all(inclusive) == [b"2", b"3", b"4", b"5"]
        latest = client.create_reader(topic, pulsar.MessageId.latest)
        assert not latest.has_message_available()
        producer.send(b"new")
        assert read_all(latest) == [b"new"]
        last_inclusive = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
        # the C++ client seeks a Latest + inclusive reader to the last message in hasMessageAvailable, using
        # GET_LAST_MESSAGE_ID's last id and the cursor's mark-delete position
        assert last_inclusive.has_message_available()
        assert read_all(last_inclusive) == [b"new"]  # latest + inclusive: the last message
        assert not last_inclusive.has_message_available()
        # readers leave no subscription behind
        local = topic.split("://", 1)[1]
        for reader in (empty, exclusive, inclusive, latest, last_inclusive):
            reader.close()
        with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/{local}/subscriptions") as r:
            assert json.loads(r.read()) == []
    finally:
        client.close()


@pytest.mark.timeout(60)  # receive() of a zero-queue consumer takes no timeout in the C++ client
def test_receiver_queue_size_zero_gets_one_message_per_receive(broker):
    topic = topic_name("pos")
    local = topic.split("://", 1)[1]
    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic, "zero", receiver_queue_size=0, initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"{i}".encode())
        for i in range(3):
            msg = consumer.receive()
            assert msg.data() == f"{i}".encode()
            consumer.acknowledge(msg)
        with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/{local}/stats") as r:
            sub = json.loads(r.read())["subscriptions"]["zero"]
        assert sub["msgBacklog"] >= 7
        assert sub["consumers"][0]["msgOutCounter"] == 3  # nothing prefetched: one permit per receive
    finally:
        client.close()


def test_delete_subscription_needs_force_with_consumers(broker):
    topic = topic_name("pos")
    local = topic.split("://", 1)[1]
    client = new_client(broker)
    try:
        client.subscribe(topic, "busy")
        url = f"{broker.admin_url}/admin/v2/persistent/{local}/subscription/busy"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10)
        assert refused.value.code == 412
        refused.value.close()
        with urllib.request.urlopen(urllib.request.Request(url + "?force=true", method="DELETE")) as r:
            assert r.status == 204
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(
                urllib.request.Request(url.replace("/busy", "/nope"), method="DELETE"), timeout=10
            )
        assert missing.value.code == 404
        missing.value.close()
    finally:
        client.close()
