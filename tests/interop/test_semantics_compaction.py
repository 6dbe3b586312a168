"""Topic compaction with the official client against a real broker process (Pulsar ``TwoPhaseCompactor`` and
``read_compacted``): latest value per key, empty payloads delete their key, keyless messages are dropped,
batches are compacted message by message; ``is_read_compacted`` readers and consumers see the compacted
part, then what was published after the horizon; normal consumers still see everything; triggered by REST
and by the namespace threshold; the view survives a restart."""

from __future__ import annotations

import time

import pulsar
import pytest

from quasar.protocol import CommandType, SubType
from quasar.protocol.enums import ServerError
from quasar.protocol.requests import new_subscribe
from tests.interop.helpers import admin, create_partitioned, new_client, new_namespace, topic_name
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def _wait_status(broker, topic: str, wanted: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    body: object = None
    while time.monotonic() < deadline:
        status, body = admin(broker, "GET", _path(topic) + "/compaction")
        assert status == 200, body
        assert isinstance(body, dict)
        if body["status"] == wanted:
            return body
        assert body["status"] != "ERROR", body
        time.sleep(0.1)
    raise AssertionError(f"compaction of {topic} never reached {wanted}: {body}")


def _compact(broker, topic: str) -> None:
    status, body = admin(broker, "PUT", _path(topic) + "/compaction")
    assert status == 204, body
    _wait_status(broker, topic, "SUCCESS")


def _drain(receive, limit: int = 100) -> list[pulsar.Message]:
    """Every message ``receive(timeout_ms)`` gives until it times out (at most ``limit``)."""
    out = []
    for _ in range(limit):
        try:
            out.append(receive(1500))
        except pulsar.Timeout:
            break
    return out


def _publish_history(client: pulsar.Client, topic: str) -> dict[str, pulsar.MessageId]:
    """Keys with several values, a delete, a keyless message and one batch; returns the send receipts of
    the messages that must survive, by value."""
    single = client.create_producer(topic, batching_enabled=False)
    ids = {}
    single.send(b"a1", partition_key="k1")
    single.send(b"b1", partition_key="k2")
    ids["a2"] = single.send(b"a2", partition_key="k1")
    single.send(b"c1", partition_key="k3")
    single.send(b"", partition_key="k3")  # deletes k3
    single.send(b"keyless")
    single.send(b"f1", partition_key="k6")
    batched = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=60_000
    )
    sent: dict[str, pulsar.MessageId] = {}

    def track(value: str):
        return lambda result, msg_id: sent.__setitem__(value, msg_id)

    for value, key in (("b2", "k2"), ("d1", "k4"), ("d2", "k4"), ("e1", "k5"), ("", "k6")):
        batched.send_async(value.encode(), track(value or "del-k6"), partition_key=key)
    batched.flush()
    deadline = time.monotonic() + 10
    while len(sent) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len({(m.ledger_id(), m.entry_id()) for m in sent.values()}) == 1, "the five went as one batch"
    ids.update({k: v for k, v in sent.items() if k in ("b2", "d2", "e1")})
    single.close()
    batched.close()
    return ids


LATEST = {"k1": b"a2", "k2": b"b2", "k4": b"d2", "k5": b"e1"}


def _as_dict(messages: list[pulsar.Message]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for msg in messages:
        assert msg.partition_key() not in out, f"key {msg.partition_key()} seen twice"
        out[msg.partition_key()] = msg.data()
    return out


def test_read_compacted_readers_and_consumers_see_the_latest_value_per_key(broker):
    topic = topic_name("compact")
    client = new_client(broker)
    try:
        assert admin(broker, "GET", _path(topic) + "/compaction")[0] == 404  # no such topic yet
        ids = _publish_history(client, topic)
        assert admin(broker, "GET", _path(topic) + "/compaction")[1] == {"status": "NOT_RUN", "lastError": ""}
        _compact(broker, topic)

        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        compacted = []
        for _ in range(10):  # the last message of the topic deletes k6: the last id answered is the view's
            if not reader.has_message_available():
                break
            compacted.append(reader.read_next(5000))
        assert _as_dict(compacted) == LATEST
        assert not reader.has_message_available()
        by_value = {m.data(): m.message_id() for m in compacted}
        a2 = by_value[b"a2"]  # the original message id, not one of the compacted ledger
        assert (a2.ledger_id(), a2.entry_id()) == (ids["a2"].ledger_id(), ids["a2"].entry_id())
        d2 = by_value[b"d2"]
        assert (d2.ledger_id(), d2.entry_id()) == (ids["d2"].ledger_id(), ids["d2"].entry_id())

        consumer = client.subscribe(
            topic,
            "compacted-sub",
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            is_read_compacted=True,
        )
        seen = _drain(consumer.receive)
        assert _as_dict(seen) == LATEST
        for msg in seen:
            consumer.acknowledge(msg)

        everything = client.subscribe(topic, "plain-sub", initial_position=pulsar.InitialPosition.Earliest)
        assert len(_drain(everything.receive)) == 12  # 7 single messages + the batch of 5

        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"a3", partition_key="k1")  # after the horizon
        assert reader.read_next(5000).data() == b"a3"
        after = consumer.receive(5000)
        assert after.data() == b"a3"
        consumer.acknowledge(after)
        assert everything.receive(5000).data() == b"a3"

    finally:
        client.close()
    raw = RawConnection(broker.service_url)  # the official client refuses Shared + read_compacted itself
    try:
        raw.send(new_subscribe(topic, "shared", SubType.Shared, 1, 1, read_compacted=True))
        error = raw.expect(CommandType.ERROR).command.error
        assert error.error == ServerError.NotAllowedError
        assert "failover or exclusive" in error.message
        raw.send(new_subscribe(topic, "exclusive", SubType.Exclusive, 2, 2, read_compacted=True))
        raw.expect(CommandType.SUCCESS)
    finally:
        raw.close()

    broker.restart()  # the view and its horizon come back from the __compaction cursor
    client = new_client(broker)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        assert [(m.partition_key(), m.data()) for m in _drain(reader.read_next)] == [
            ("k1", b"a2"),
            ("k2", b"b2"),
            ("k4", b"d2"),
            ("k5", b"e1"),
            ("k1", b"a3"),
        ]  # the compacted part in original order, then the message after the horizon
        consumer = client.subscribe(
            topic, "compacted-sub", consumer_type=pulsar.ConsumerType.Exclusive, is_read_compacted=True
        )
        assert _drain(consumer.receive) == []  # everything was acknowledged before the restart
        _compact(broker, topic)  # a second generation on top of the first: a3 replaces a2
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        assert _as_dict(_drain(reader.read_next)) == {**LATEST, "k1": b"a3"}
    finally:
        client.close()


def test_the_namespace_threshold_triggers_compaction(broker_factory, tmp_path):
    config = tmp_path / "compaction.toml"
    config.write_text("broker_service_compaction_monitor_interval_in_seconds = 0.5\n")
    broker = broker_factory(extra_args=("--config", str(config)))
    namespace = new_namespace(broker, "compact")
    path = f"/admin/v2/namespaces/{namespace}/compactionThreshold"
    assert admin(broker, "GET", path) == (204, None)  # unset
    assert admin(broker, "PUT", path, -1)[0] == 412
    topic = f"persistent://{namespace}/threshold"
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(b"v%d" % i, partition_key=f"k{i % 2}")
        time.sleep(1.5)  # several monitor rounds with no threshold: nothing happens
        assert admin(broker, "GET", _path(topic) + "/compaction")[1]["status"] == "NOT_RUN"
        assert admin(broker, "PUT", path, 100)[0] == 204
        assert admin(broker, "GET", path) == (200, 100)
        _wait_status(broker, topic, "SUCCESS")
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        assert _as_dict(_drain(reader.read_next)) == {"k0": b"v18", "k1": b"v19"}
        assert admin(broker, "DELETE", path)[0] == 204
        assert admin(broker, "GET", path) == (204, None)
    finally:
        client.close()


def test_a_partitioned_topic_is_compacted_partition_by_partition(broker):
    topic = topic_name("compact-parts")
    create_partitioned(broker, topic, 2)
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"v%d" % i, partition_key=f"k{i % 4}")
        status, body = admin(broker, "PUT", _path(topic) + "/compaction")
        assert status == 204, body
        assert admin(broker, "GET", _path(topic) + "/compaction")[0] == 405  # the status is per partition
        for i in range(2):
            _wait_status(broker, f"{topic}-partition-{i}", "SUCCESS")
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        assert _as_dict(_drain(reader.read_next)) == {"k0": b"v8", "k1": b"v9", "k2": b"v10", "k3": b"v11"}
    finally:
        client.close()
    assert admin(broker, "PUT", _path(topic_name("missing")) + "/compaction")[0] == 404
    assert admin(broker, "PUT", _path(topic_name("np", "non-persistent")) + "/compaction")[0] == 405
