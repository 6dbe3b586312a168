"""The RocketMQ endpoint through raw stubs (``rocketmq.grpc_protocol``), as a hostile or broken client would
call it: routes, the Telemetry settings exchange, Heartbeat / NotifyClientTermination, and bad requests, each
answered with the proxy's status code in a normal response (never a bare gRPC error)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin, metadata

pytestmark = pytest.mark.interop


def _pb() -> tuple[Any, Any]:
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    return definition_pb2, service_pb2


def _send_request(topic: str = "T", body: bytes = b"x", **system: Any) -> Any:
    d, s = _pb()
    message = d.Message(topic=d.Resource(name=topic), body=body)
    message.system_properties.message_id = system.pop("message_id", "0102FC0000000142960B18A1FE00000001")
    message.system_properties.body_encoding = d.Encoding.IDENTITY
    for key, value in system.pop("props", {}).items():
        message.user_properties[key] = value
    message.system_properties.keys.extend(system.pop("keys", []))
    for name, value in system.items():
        setattr(message.system_properties, name, value)
    return s.SendMessageRequest(messages=[message])


def test_query_route_lists_partitions_as_queues(
    rmq_broker: BrokerProcess, rmq_endpoint: str, stub: Any
) -> None:
    d, s = _pb()
    status, _ = admin(rmq_broker, "PUT", "/admin/v2/persistent/public/default/routed/partitions", 3)
    assert status in (200, 204)
    host, port = rmq_endpoint.rsplit(":", 1)
    requested = d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[d.Address(host=host, port=1)])
    answer = stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="routed"), endpoints=requested), metadata=metadata()
    )
    assert answer.status.code == d.Code.OK
    assert [q.id for q in answer.message_queues] == [0, 1, 2]
    queue0 = answer.message_queues[0]
    assert queue0.permission == d.Permission.READ_WRITE and queue0.topic.name == "routed"
    assert queue0.broker.name == "standalone" and queue0.broker.id == 0
    assert queue0.broker.endpoints.scheme == d.AddressScheme.IPv4
    assert [(a.host, a.port) for a in queue0.broker.endpoints.addresses] == [(host, int(port))]  # ours
    assert set(queue0.accept_message_types) == {  # no message.type: all four (rmqtx)
        d.MessageType.NORMAL,
        d.MessageType.FIFO,
        d.MessageType.DELAY,
        d.MessageType.TRANSACTION,
    }
    single = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="plain-topic")), metadata=metadata())
    assert [q.id for q in single.message_queues] == [0]  # a non-partitioned topic is one queue
    missing = stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="t", resource_namespace="no-such-ns")), metadata=metadata()
    )
    assert missing.status.code == d.Code.TOPIC_NOT_FOUND and not missing.message_queues
    assignment = stub.QueryAssignment(
        s.QueryAssignmentRequest(topic=d.Resource(name="routed"), group=d.Resource(name="g1")),
        metadata=metadata(),
    )
    assert assignment.status.code == d.Code.OK
    assert [a.message_queue.id for a in assignment.assignments] == [-1]  # "any queue" of the broker
    bad_group = stub.QueryAssignment(
        s.QueryAssignmentRequest(topic=d.Resource(name="routed"), group=d.Resource(name="bad group")),
        metadata=metadata(),
    )
    assert bad_group.status.code == d.Code.ILLEGAL_CONSUMER_GROUP


class _Telemetry:
    """A Telemetry stream driven from the test thread: ``send(command)``, ``reply()``, ``close()``."""

    def __init__(self, stub: Any, client_id: str) -> None:
        self._out: queue.Queue[Any] = queue.Queue()
        self._call = stub.Telemetry(iter(self._out.get, None), metadata=metadata(client_id))
        self._replies: queue.Queue[Any] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for reply in self._call:
                self._replies.put(reply)
        except grpc.RpcError:
            pass

    def send(self, command: Any) -> None:
        self._out.put(command)

    def reply(self) -> Any:
        return self._replies.get(timeout=10)

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._reader.join(10)


@pytest.fixture
def telemetry(stub: Any) -> Iterator[Any]:
    opened: list[_Telemetry] = []

    def open_stream(client_id: str) -> _Telemetry:
        stream = _Telemetry(stub, client_id)
        opened.append(stream)
        return stream

    yield open_stream
    for stream in opened:
        stream.close()


def test_settings_exchange_heartbeat_and_termination(stub: Any, telemetry: Any) -> None:
    d, s = _pb()
    client_id = "host@1@1@producer"
    early = stub.Heartbeat(
        s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=metadata(client_id)
    )
    assert early.status.code == d.Code.UNRECOGNIZED_CLIENT_TYPE  # no settings yet, as the proxy
    stream = telemetry(client_id)
    stream.send(
        s.TelemetryCommand(
            settings=d.Settings(
                client_type=d.ClientType.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="T")])
            )
        )
    )
    reply = stream.reply()
    assert reply.status.code == d.Code.OK
    settings = reply.settings
    assert settings.publishing.max_body_size == 4 * 1024 * 1024 and settings.publishing.validate_message_type
    assert settings.backoff_policy.max_attempts == 3
    assert settings.backoff_policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert settings.request_timeout.seconds == 3 and not settings.metric.on
    ok = stub.Heartbeat(s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=metadata(client_id))
    assert ok.status.code == d.Code.OK
    bye = stub.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=metadata(client_id))
    assert bye.status.code == d.Code.OK
    gone = stub.Heartbeat(s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=metadata(client_id))
    assert gone.status.code == d.Code.UNRECOGNIZED_CLIENT_TYPE  # its settings were dropped


def test_consumer_settings_and_bad_settings(telemetry: Any) -> None:
    d, s = _pb()
    stream = telemetry("host@1@2@consumer")
    subscription = d.Subscription(
        group=d.Resource(name="g1"),
        subscriptions=[
            d.SubscriptionEntry(topic=d.Resource(name="T"), expression=d.FilterExpression(expression="*"))
        ],
    )
    stream.send(
        s.TelemetryCommand(
            settings=d.Settings(client_type=d.ClientType.SIMPLE_CONSUMER, subscription=subscription)
        )
    )
    reply = stream.reply()
    assert reply.status.code == d.Code.OK
    assert reply.settings.subscription.receive_batch_size == 32
    assert reply.settings.subscription.long_polling_timeout.seconds == 20
    assert not reply.settings.subscription.fifo
    assert reply.settings.backoff_policy.max_attempts == 17
    assert reply.settings.backoff_policy.customized_backoff.next[0].seconds == 1
    assert reply.settings.subscription.group.name == "g1"  # the client's own settings are kept
    stream.send(s.TelemetryCommand(settings=d.Settings(client_type=d.ClientType.PRODUCER)))
    refused = stream.reply()
    assert refused.status.code == d.Code.BAD_REQUEST and not refused.HasField("settings")
    stream.send(s.TelemetryCommand(settings=d.Settings()))
    assert stream.reply().status.code == d.Code.UNRECOGNIZED_CLIENT_TYPE
    bad_group = subscription.__deepcopy__()
    bad_group.group.name = "CID_RMQ_SYS_x"
    stream.send(
        s.TelemetryCommand(
            settings=d.Settings(client_type=d.ClientType.PUSH_CONSUMER, subscription=bad_group)
        )
    )
    assert stream.reply().status.code == d.Code.ILLEGAL_CONSUMER_GROUP


def test_telemetry_without_client_id_is_answered_with_a_status(stub: Any) -> None:
    d, s = _pb()
    call = stub.Telemetry(iter([s.TelemetryCommand()]), metadata=metadata(""))
    replies = list(call)
    assert [r.status.code for r in replies] == [d.Code.CLIENT_ID_REQUIRED]


@pytest.mark.parametrize(
    ("request_fields", "code"),
    [
        ({"topic": "bad topic"}, "ILLEGAL_TOPIC"),
        ({"topic": "x" * 128}, "ILLEGAL_TOPIC"),
        ({"body": b""}, "MESSAGE_BODY_EMPTY"),
        ({"body": b"x" * (4 * 1024 * 1024 + 1)}, "MESSAGE_BODY_TOO_LARGE"),
        ({"props": {"KEYS": "k"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        ({"props": {"DELAY": "3"}}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        ({"tag": "a||b"}, "ILLEGAL_MESSAGE_TAG"),
        ({"message_group": "g" * 70}, "ILLEGAL_MESSAGE_GROUP"),
        ({"message_id": ""}, "ILLEGAL_MESSAGE_ID"),
        ({"message_type": 4, "message_group": "g"}, "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),  # TRANSACTION
    ],
)
def test_bad_sends_get_their_codes(stub: Any, request_fields: dict[str, Any], code: str) -> None:
    d, _ = _pb()
    answer = stub.SendMessage(_send_request(**request_fields), metadata=metadata())
    assert answer.status.code == getattr(d.Code, code), answer.status.message
    assert answer.status.message


def test_requests_without_client_id_or_messages(stub: Any) -> None:
    d, s = _pb()
    no_id = stub.SendMessage(_send_request(), metadata=metadata(""))
    assert no_id.status.code == d.Code.CLIENT_ID_REQUIRED
    route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=metadata(""))
    assert route.status.code == d.Code.CLIENT_ID_REQUIRED
    empty = stub.SendMessage(s.SendMessageRequest(), metadata=metadata())
    assert empty.status.code == d.Code.MESSAGE_CORRUPTED
    mixed = _send_request("A")
    mixed.messages.append(_send_request("B").messages[0])
    assert stub.SendMessage(mixed, metadata=metadata()).status.code == d.Code.MESSAGE_CORRUPTED
    unknown_ns = _send_request()
    unknown_ns.messages[0].topic.resource_namespace = "nope"
    assert stub.SendMessage(unknown_ns, metadata=metadata()).status.code == d.Code.TOPIC_NOT_FOUND


def test_a_good_raw_send_answers_offset_and_ids(stub: Any) -> None:
    d, _ = _pb()
    request = _send_request("raw-send", tag="t", keys=["a"])
    first = stub.SendMessage(request, metadata=metadata("raw@1"))
    second = stub.SendMessage(request, metadata=metadata("raw@1"))
    assert first.status.code == d.Code.OK and len(first.entries) == 1
    entry = first.entries[0]
    assert (
        entry.status.code == d.Code.OK
        and entry.message_id == request.messages[0].system_properties.message_id
    )
    assert entry.transaction_id == entry.message_id
    assert (entry.offset, second.entries[0].offset) == (0, 1)


def test_rpcs_of_other_groups_answer_not_implemented(stub: Any) -> None:
    d, s = _pb()
    receive = list(
        stub.ReceiveMessage(
            s.ReceiveMessageRequest(
                group=d.Resource(name="g"), message_queue=d.MessageQueue(topic=d.Resource(name="T"))
            ),
            metadata=metadata(),
        )
    )
    # ReceiveMessage is rmqconsume's now: a request without a batch size answers one BAD_REQUEST status
    assert [r.status.code for r in receive] == [d.Code.BAD_REQUEST] and receive[0].status.message
    end = stub.EndTransaction(s.EndTransactionRequest(topic=d.Resource(name="T")), metadata=metadata())
    assert end.status.code == d.Code.INVALID_TRANSACTION_ID  # rmqtx serves it: a blank id


def test_the_broker_survives_a_burst_of_garbage(stub: Any, rmq_endpoint: str) -> None:
    """Undecodable request bytes (answered BAD_REQUEST) and made-up client ids, and the endpoint still
    answers."""
    d, s = _pb()
    channel = grpc.insecure_channel(rmq_endpoint)
    try:
        raw = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            response_deserializer=s.SendMessageResponse.FromString,
        )
        answer = raw(b"\xff\xff\xff garbage", metadata=metadata(), timeout=5)
        assert answer.status.code == d.Code.BAD_REQUEST
    finally:
        channel.close()
    deadline = time.monotonic() + 10
    for i in range(200):
        assert time.monotonic() < deadline
        stub.Heartbeat(s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=metadata(f"junk-{i}"))
    answer = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=metadata())
    assert answer.status.code == d.Code.OK


def test_closing_the_telemetry_stream_drops_the_clients_producers(
    rmq_broker: BrokerProcess, stub: Any, telemetry: Any
) -> None:
    d, s = _pb()
    client_id = "host@1@3@streaming"
    stream = telemetry(client_id)
    stream.send(
        s.TelemetryCommand(settings=d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing()))
    )
    assert stream.reply().status.code == d.Code.OK
    assert (
        stub.SendMessage(_send_request("stream-close"), metadata=metadata(client_id)).status.code == d.Code.OK
    )
    path = "/admin/v2/persistent/public/default/stream-close/stats"
    assert [p["producerName"] for p in admin(rmq_broker, "GET", path)[1]["publishers"]] == [
        f"rocketmq-{client_id}"
    ]
    stream.close()
    for _ in range(100):
        if not admin(rmq_broker, "GET", path)[1]["publishers"]:
            break
        time.sleep(0.05)
    assert admin(rmq_broker, "GET", path)[1]["publishers"] == []


def test_a_request_of_several_messages_answers_per_entry(stub: Any) -> None:
    d, _ = _pb()
    request = _send_request("multi", message_id="0102FC0000000142960B18A1FE000000A1")
    bad = _send_request("multi", message_id="0102FC0000000142960B18A1FE000000A2", tag="a|b").messages[0]
    request.messages.append(bad)
    answer = stub.SendMessage(request, metadata=metadata())
    assert answer.status.code == d.Code.MULTIPLE_RESULTS
    assert [e.status.code for e in answer.entries] == [d.Code.OK, d.Code.ILLEGAL_MESSAGE_TAG]
    assert answer.entries[0].message_id == "0102FC0000000142960B18A1FE000000A1"
