"""Pull by offset through the raw RocketMQ stubs against a real broker process (reference rocketmq-grpc.md
§10): QueryOffset, PullMessage (order, next_offset, long polling, tag filters), GetOffset / UpdateOffset (the
subscription's mark-delete position, across a restart) and bad requests. Messages are written by the official
``pulsar-client`` with a ``TAGS`` property (so the broker's tag hash on write is exercised for Pulsar
producers too) and by a RocketMQ SendMessage with a tag."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from tests.rocketmq.conftest import admin, metadata

pytestmark = pytest.mark.interop

TIMEOUT = 15


def _pb() -> tuple[Any, Any]:
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    return definition_pb2, service_pb2


def _topic() -> str:
    return f"pull-{uuid.uuid4().hex[:10]}"


def _publish(client: Any, topic: str, bodies: list[str], tags: list[str | None] | None = None) -> None:
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
    try:
        for i, body in enumerate(bodies):
            tag = tags[i] if tags is not None else None
            producer.send(body.encode(), properties={"TAGS": tag} if tag else None)
    finally:
        producer.close()


def _queue(topic: str, queue_id: int = 0) -> Any:
    definition, _ = _pb()
    return definition.MessageQueue(topic=definition.Resource(name=topic), id=queue_id)


def _group(name: str = "pull-group") -> Any:
    definition, _ = _pb()
    return definition.Resource(name=name)


def _query(stub: Any, topic: str, policy: int, timestamp_ms: int | None = None, queue_id: int = 0) -> Any:
    _, service = _pb()
    request = service.QueryOffsetRequest(message_queue=_queue(topic, queue_id), query_offset_policy=policy)
    if timestamp_ms is not None:
        request.timestamp.FromMilliseconds(timestamp_ms)
    return stub.QueryOffset(request, metadata=metadata(), timeout=TIMEOUT)


def _pull(
    stub: Any,
    topic: str,
    offset: int,
    batch: int = 32,
    expression: str = "*",
    filter_type: int = 1,
    polling_s: float | None = None,
    queue_id: int = 0,
    client_id: str | None = None,
) -> tuple[Any, list[Any], int | None]:
    """(status, messages, next_offset) of one PullMessage."""
    definition, service = _pb()
    request = service.PullMessageRequest(
        group=_group(),
        message_queue=_queue(topic, queue_id),
        offset=offset,
        batch_size=batch,
        filter_expression=definition.FilterExpression(type=filter_type, expression=expression),
    )
    if polling_s is not None:
        request.long_polling_timeout.FromMilliseconds(int(polling_s * 1000))
    status, messages, next_offset = None, [], None
    for response in stub.PullMessage(
        request, metadata=metadata(client_id), timeout=TIMEOUT + (polling_s or 0)
    ):
        kind = response.WhichOneof("content")
        if kind == "status":
            status = response.status
        elif kind == "message":
            messages.append(response.message)
        elif kind == "next_offset":
            next_offset = response.next_offset
    return status, messages, next_offset


def _bodies(messages: list[Any]) -> list[str]:
    return [m.body.decode() for m in messages]


def test_pull_from_the_beginning_in_order_with_next_offset(stub, pulsar_client):
    definition, _ = _pb()
    topic = _topic()
    _publish(pulsar_client, topic, [f"m{i}" for i in range(5)])
    assert _query(stub, topic, definition.QueryOffsetPolicy.BEGINNING).offset == 0
    end = _query(stub, topic, definition.QueryOffsetPolicy.END)
    assert end.status.code == definition.Code.OK and end.offset == 5
    status, messages, next_offset = _pull(stub, topic, 0, batch=3)
    assert status.code == definition.Code.OK
    assert _bodies(messages) == ["m0", "m1", "m2"]
    assert [m.system_properties.queue_offset for m in messages] == [0, 1, 2]
    assert next_offset == 3
    message = messages[0]
    assert message.topic.name == topic and message.system_properties.queue_id == 0
    assert message.system_properties.body_digest.checksum  # through the read mapping
    status, messages, next_offset = _pull(stub, topic, next_offset)
    assert _bodies(messages) == ["m3", "m4"] and next_offset == 5


def test_pull_at_the_end_long_polls_until_a_message_arrives(stub, pulsar_client):
    definition, _ = _pb()
    topic = _topic()
    _publish(pulsar_client, topic, ["first"])
    status, messages, next_offset = _pull(stub, topic, 1, polling_s=0.2)  # nothing new: waits, then answers
    assert status.code == definition.Code.MESSAGE_NOT_FOUND and messages == [] and next_offset == 1
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(_pull(stub, topic, 1, polling_s=12)), daemon=True)
    waiter.start()
    time.sleep(0.5)  # let the pull reach the hold
    _publish(pulsar_client, topic, ["second"])
    waiter.join(TIMEOUT + 12)
    assert not waiter.is_alive()
    status, messages, next_offset = result[0]
    # at the timeout a pull answers without reading again: getting the message means the arrival woke it
    assert status.code == definition.Code.OK and _bodies(messages) == ["second"] and next_offset == 2


def test_tag_filters_on_the_consume_queue_then_the_tag(stub, pulsar_client):
    definition, _ = _pb()
    topic = _topic()
    tags = ["TagA", "TagB", None, "TagA", "Aa", "BB", "TagB", "TagB"]  # "Aa" and "BB" share a hash code
    _publish(pulsar_client, topic, [f"m{i}" for i in range(len(tags))], tags)
    status, messages, next_offset = _pull(stub, topic, 0, expression="TagA")
    assert _bodies(messages) == ["m0", "m3"]
    assert [m.system_properties.tag for m in messages] == ["TagA", "TagA"]
    assert next_offset == 8  # past the TagB tail: it is not scanned again
    _, messages, _ = _pull(stub, topic, 0, expression=" TagA || TagB ")
    assert _bodies(messages) == ["m0", "m1", "m3", "m6", "m7"]
    _, messages, _ = _pull(stub, topic, 0, expression="BB")
    assert _bodies(messages) == ["m5"]  # "Aa" passes the hash step and is dropped by the tag check
    _, messages, _ = _pull(stub, topic, 0, expression="*")
    assert len(messages) == 8
    status, messages, next_offset = _pull(stub, topic, 7, expression="TagA", polling_s=0.2)
    assert status.code == definition.Code.MESSAGE_NOT_FOUND and messages == [] and next_offset == 8
    status, _, _ = _pull(stub, topic, 0, expression="a > 1", filter_type=definition.FilterType.SQL)
    assert status.code == definition.Code.ILLEGAL_FILTER_EXPRESSION
    assert "SQL92 filtering is not supported" in status.message


def test_rocketmq_sends_are_filtered_by_tag(stub):
    definition, service = _pb()
    topic = _topic()
    for i, tag in enumerate(["TagX", "TagY", "TagX"]):
        message = definition.Message(
            topic=definition.Resource(name=topic),
            body=f"r{i}".encode(),
            system_properties=definition.SystemProperties(
                tag=tag,
                message_id=f"01{uuid.uuid4().hex[:32].upper()}",
                message_type=definition.MessageType.NORMAL,
                body_encoding=definition.Encoding.IDENTITY,
            ),
        )
        response = stub.SendMessage(
            service.SendMessageRequest(messages=[message]), metadata=metadata(), timeout=TIMEOUT
        )
        assert response.status.code == definition.Code.OK, response.status.message
    _, messages, next_offset = _pull(stub, topic, 0, expression="TagX")
    assert _bodies(messages) == ["r0", "r2"] and next_offset == 3


def test_query_offset_by_timestamp(stub, pulsar_client):
    definition, _ = _pb()
    topic = _topic()
    _publish(pulsar_client, topic, ["a0", "a1", "a2"])
    time.sleep(0.05)  # the next entries get a later store time (ms)
    _publish(pulsar_client, topic, ["b0", "b1"])
    _, messages, _ = _pull(stub, topic, 0)
    stored = [m.system_properties.store_timestamp.ToMilliseconds() for m in messages]
    assert stored[3] > stored[2]
    by_time = _query(stub, topic, definition.QueryOffsetPolicy.TIMESTAMP, stored[2] + 1)
    assert by_time.status.code == definition.Code.OK and by_time.offset == 3
    assert _query(stub, topic, definition.QueryOffsetPolicy.TIMESTAMP, stored[0]).offset == 0
    assert _query(stub, topic, definition.QueryOffsetPolicy.TIMESTAMP, 0).offset == 0
    assert _query(stub, topic, definition.QueryOffsetPolicy.TIMESTAMP, stored[4] + 60_000).offset == 5
    no_time = _query(stub, topic, definition.QueryOffsetPolicy.TIMESTAMP)
    assert no_time.status.code == definition.Code.BAD_REQUEST


def test_partitions_are_queues(rmq_broker, stub, pulsar_client):
    definition, _ = _pb()
    topic = _topic()
    status, _ = admin(rmq_broker, "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 2)
    assert status in (200, 204)
    _publish(pulsar_client, f"{topic}-partition-1", ["p1-0", "p1-1"])
    assert _query(stub, topic, definition.QueryOffsetPolicy.END, queue_id=1).offset == 2
    assert _query(stub, topic, definition.QueryOffsetPolicy.END, queue_id=0).offset == 0
    _, messages, _ = _pull(stub, topic, 0, queue_id=1)
    assert _bodies(messages) == ["p1-0", "p1-1"]
    assert [m.system_properties.queue_id for m in messages] == [1, 1]
    status, _, _ = _pull(stub, topic, 0, queue_id=2)
    assert status.code == definition.Code.TOPIC_NOT_FOUND


def test_bad_requests_get_a_status(stub, pulsar_client):
    definition, service = _pb()
    topic = _topic()
    _publish(pulsar_client, topic, ["x0", "x1"])
    status, _, _ = _pull(stub, topic, 3)
    assert status.code == definition.Code.ILLEGAL_OFFSET and "[0, 2]" in status.message
    status, _, _ = _pull(stub, topic, -1)
    assert status.code == definition.Code.ILLEGAL_OFFSET
    status, _, _ = _pull(stub, topic, 0, batch=0)
    assert status.code == definition.Code.BAD_REQUEST
    status, _, _ = _pull(stub, topic, 0, polling_s=-1)
    assert status.code == definition.Code.ILLEGAL_POLLING_TIME
    assert _query(stub, topic, 7).status.code == definition.Code.BAD_REQUEST  # no such policy
    status, _, _ = _pull(stub, topic, 0, queue_id=1)  # not partitioned: queue 0 only
    assert status.code == definition.Code.TOPIC_NOT_FOUND
    status, _, _ = _pull(stub, "never-written-" + uuid.uuid4().hex[:6], 0)
    assert status.code == definition.Code.TOPIC_NOT_FOUND
    status, _, _ = _pull(stub, topic, 0, client_id="")
    assert status.code == definition.Code.CLIENT_ID_REQUIRED
    response = stub.PullMessage(
        service.PullMessageRequest(group=_group("bad group!"), message_queue=_queue(topic), batch_size=1),
        metadata=metadata(),
        timeout=TIMEOUT,
    )
    assert next(iter(response)).status.code == definition.Code.ILLEGAL_CONSUMER_GROUP
    got = stub.GetOffset(
        service.GetOffsetRequest(group=_group("no-such-group"), message_queue=_queue(topic)),
        metadata=metadata(),
        timeout=TIMEOUT,
    )
    assert got.status.code == definition.Code.OFFSET_NOT_FOUND
    updated = stub.UpdateOffset(
        service.UpdateOffsetRequest(group=_group("g"), message_queue=_queue(topic), offset=9),
        metadata=metadata(),
        timeout=TIMEOUT,
    )
    assert updated.status.code == definition.Code.ILLEGAL_OFFSET


def _get_offset(stub: Any, topic: str, group: str) -> Any:
    _, service = _pb()
    return stub.GetOffset(
        service.GetOffsetRequest(group=_group(group), message_queue=_queue(topic)),
        metadata=metadata(),
        timeout=TIMEOUT,
    )


def _update_offset(stub: Any, topic: str, group: str, offset: int) -> Any:
    _, service = _pb()
    return stub.UpdateOffset(
        service.UpdateOffsetRequest(group=_group(group), message_queue=_queue(topic), offset=offset),
        metadata=metadata(),
        timeout=TIMEOUT,
    )


def test_update_offset_is_the_subscription_position_and_survives_restart(rmq_broker, pulsar_client):
    """Runs last in the module: it restarts the shared broker."""
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub

    definition, _ = _pb()
    topic, group = _topic(), "offsets-group"
    _publish(pulsar_client, topic, [f"o{i}" for i in range(6)])
    with grpc.insecure_channel(rmq_broker.rocketmq_address) as channel:
        stub = MessagingServiceStub(channel)
        assert _update_offset(stub, topic, group, 4).status.code == definition.Code.OK
        assert _get_offset(stub, topic, group).offset == 4
        # the same progress as a Pulsar subscription: its consumer starts after the mark-delete position
        consumer = pulsar_client.subscribe(f"persistent://public/default/{topic}", group)
        try:
            assert consumer.receive(timeout_millis=TIMEOUT * 1000).data() == b"o4"
        finally:
            consumer.close()
        assert _update_offset(stub, topic, group, 2).status.code == definition.Code.OK  # backwards
        assert _get_offset(stub, topic, group).offset == 2
    rmq_broker.restart(kill=True)  # SIGKILL: the offset was persisted before UpdateOffset answered
    with grpc.insecure_channel(rmq_broker.rocketmq_address) as channel:
        got = _get_offset(MessagingServiceStub(channel), topic, group)
        assert got.status.code == definition.Code.OK and got.offset == 2
