"""Topic termination (Pulsar ``pulsar-admin topics terminate``) with the official client against a real broker:
the REST answer is the last message id, producers fail for good with TopicTerminated, consumers that acked
everything get REACHED_END_OF_TOPIC, and the mark survives a restart."""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from quasar.protocol import CommandType, SubType
from quasar.protocol.enums import InitialPosition
from quasar.protocol.requests import new_ack, new_flow, new_subscribe
from tests.interop.helpers import admin, new_client
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def test_terminate_answers_the_last_message_and_fences_producers_for_good(broker):
    topic = f"persistent://public/default/term-{uuid.uuid4().hex[:10]}"
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=20_000)
        receipts = [producer.send(b"m%d" % i) for i in range(3)]
        status, body = admin(broker, "POST", _path(topic) + "/terminate")
        assert status == 200, body
        last = receipts[-1]
        assert (body["ledgerId"], body["entryId"]) == (last.ledger_id(), last.entry_id())
        started = time.monotonic()
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"after")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        assert time.monotonic() - started < 15, "TopicTerminated is final, never retried to a timeout"
        reader = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
        assert [reader.receive(5000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
        assert admin(broker, "POST", _path(topic) + "/terminate")[1] == body  # idempotent
    finally:
        client.close()
    broker.restart()
    client = new_client(broker)
    try:
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
    finally:
        client.close()


def test_consumers_that_acked_everything_reach_the_end_of_the_topic(broker):
    topic = f"persistent://public/default/term-{uuid.uuid4().hex[:10]}"
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"m%d" % i) for i in range(2)]
    finally:
        client.close()
    raw = RawConnection(broker.service_url)
    try:
        raw.send(
            new_subscribe(topic, "s", SubType.Exclusive, 1, 1, initial_position=InitialPosition.Earliest)
        )
        raw.expect(CommandType.SUCCESS)
        raw.send(new_flow(1, 10))
        delivered = [raw.expect(CommandType.MESSAGE) for _ in ids]
        assert admin(broker, "POST", _path(topic) + "/terminate")[0] == 200
        raw.send(new_ack(1, [(ids[0].ledger_id(), ids[0].entry_id())], 0))
        with pytest.raises(TimeoutError):  # one message is still unacknowledged: not the end yet
            raw.next_frame(timeout=1.0)
        message_id = delivered[-1].command.message.message_id
        raw.send(new_ack(1, [(message_id.ledgerId, message_id.entryId)], 0))
        end = raw.expect(CommandType.REACHED_END_OF_TOPIC)
        assert end.command.reachedEndOfTopic.consumer_id == 1
        raw.send(new_subscribe(topic, "fresh", SubType.Exclusive, 2, 2))  # Latest: nothing to read
        raw.expect(CommandType.SUCCESS)
        assert raw.expect(CommandType.REACHED_END_OF_TOPIC).command.reachedEndOfTopic.consumer_id == 2
    finally:
        raw.close()


def test_terminating_a_partitioned_topic_goes_partition_by_partition(broker):
    topic = f"persistent://public/default/term-{uuid.uuid4().hex[:10]}"
    assert admin(broker, "PUT", _path(topic) + "/partitions", 2)[0] == 204
    client = new_client(broker)
    try:
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    status, body = admin(broker, "POST", _path(topic) + "/terminate")
    assert status == 405, body
    status, body = admin(broker, "POST", _path(topic) + "/terminate/partitions")
    assert status == 200 and sorted(body) == ["0", "1"], body
    assert {body[i]["partitionIndex"] for i in body} == {0, 1}
    assert (
        admin(broker, "POST", _path(topic.replace("persistent", "non-persistent")) + "/terminate")[0] == 405
    )
