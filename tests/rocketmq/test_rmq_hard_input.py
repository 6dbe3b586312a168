"""Hostile input on the RocketMQ endpoint (issue 18 "Bad input", docs/rocketmq-limits.md), through raw gRPC against one
real broker process: garbage protobuf bytes on every RPC, oversized metadata, Telemetry streams that never send
settings, a thousand idle long polls per connection (while a Pulsar producer keeps its round trip), a flood
of client ids, a client making 10,000 calls then vanishing, and out-of-range numbers and names. Each answer
carries a Status, or the call ends with a gRPC status; the broker keeps serving and holds nothing afterwards
(``GET /admin/v2/broker-stats/rocketmq``).

The module's broker runs with a 3 s channel expiry and at most 300 clients so the bounds show quickly."""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin, metadata

pytestmark = pytest.mark.interop

pulsar = pytest.importorskip("pulsar")
grpc = pytest.importorskip("grpc")

EXPIRY_S = 3.0
MAX_CLIENTS = 300
SERVICE = "/apache.rocketmq.v2.MessagingService/"


@pytest.fixture(scope="module")
def rmq_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("rmq-hard")
    config = directory / "broker.toml"
    config.write_text(
        f"rocketmq_channel_expired_timeout = {int(EXPIRY_S * 1000)}\nrocketmq_max_clients = {MAX_CLIENTS}\n"
    )
    process = BrokerProcess(directory / "data", rocketmq_port=0, extra_args=("--config", str(config)))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _pb() -> tuple[Any, Any]:
    from rocketmq.grpc_protocol import definition_pb2, service_pb2

    return definition_pb2, service_pb2


def _stats(broker: BrokerProcess) -> dict[str, int]:
    status, body = admin(broker, "GET", "/admin/v2/broker-stats/rocketmq")
    assert status == 200
    return body


def _wait_stats(broker: BrokerProcess, deadline_s: float, **expected: int) -> dict[str, int]:
    """Poll the endpoint's stats until every ``expected`` value holds (bounded in time)."""
    end = time.monotonic() + deadline_s
    while True:
        stats = _stats(broker)
        if all(stats[key] == value for key, value in expected.items()) or time.monotonic() > end:
            return stats
        time.sleep(0.2)


def _route(stub: Any, client_id: str | None = None) -> Any:
    d, s = _pb()
    request = s.QueryRouteRequest(topic=d.Resource(name="alive"))
    return stub.QueryRoute(request, metadata=metadata(client_id), timeout=10)


def _assert_serving(stub: Any, broker: BrokerProcess) -> None:
    """The broker still answers a RocketMQ call and a Pulsar producer round trip."""
    d, _ = _pb()
    assert _route(stub).status.code == d.Code.OK
    _pulsar_round_trip(broker)


def _pulsar_round_trip(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        topic = f"persistent://public/default/alive-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"still here")
        assert consumer.receive(timeout_millis=10_000).data() == b"still here"
    finally:
        client.close()


GARBAGE = (
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint key that never ends
    b"\x0a\xff\xff\xff\xff\x0f",  # a length-delimited field longer than the message
    b"\x07",  # wire type 7 does not exist
)


def test_garbage_bytes_on_every_rpc_answer_bad_request(rmq_endpoint, stub, rmq_broker):
    from quasar.broker.rocketmq.stubs import SERVICE as DESCRIPTOR

    d, s = _pb()
    channel = grpc.insecure_channel(rmq_endpoint)
    try:
        for method in DESCRIPTOR.methods:
            path = SERVICE + method.name
            parse = getattr(s, method.output_type.name).FromString
            for garbage in GARBAGE:
                if method.client_streaming:
                    call = channel.stream_stream(path, response_deserializer=parse)
                    answers = list(call(iter([garbage]), metadata=metadata(), timeout=10))
                elif method.server_streaming:
                    call = channel.unary_stream(path, response_deserializer=parse)
                    answers = list(call(garbage, metadata=metadata(), timeout=10))
                else:
                    answers = [
                        channel.unary_unary(path, response_deserializer=parse)(
                            garbage, metadata=metadata(), timeout=10
                        )
                    ]
                assert [a.status.code for a in answers] == [d.Code.BAD_REQUEST], (method.name, answers)
                assert f"malformed {method.input_type.name}" in answers[0].status.message
    finally:
        channel.close()
    _assert_serving(stub, rmq_broker)


def test_oversized_metadata_is_refused_with_a_status(rmq_endpoint, stub, rmq_broker):
    d, s = _pb()
    long_id = "c" * 2048
    answer = _route(stub, long_id)
    assert answer.status.code == d.Code.BAD_REQUEST and "x-mq-client-id" in answer.status.message
    request = s.QueryRouteRequest(topic=d.Resource(name="alive"))
    for extra in (
        [("x-mq-client-id", "c" * 100_000)],  # past gRPC's metadata limit
        [("authorization", "Bearer " + "a" * 100_000)],
        [(f"x-junk-{i}", "v" * 64) for i in range(2000)],
    ):
        with pytest.raises(grpc.RpcError) as raised:
            stub.QueryRoute(request, metadata=metadata() + extra, timeout=10)
        assert raised.value.code() in {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL}
    _assert_serving(stub, rmq_broker)


async def _telemetry_silently(endpoint: str, client_id: str, hold_s: float) -> Any:
    """Open a Telemetry stream that sends nothing; the call's final status code (None if still open)."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        call = channel.stream_stream(SERVICE + "Telemetry")(metadata=metadata(client_id), timeout=hold_s)
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return await call.code()


def test_telemetry_without_settings_is_closed_after_the_channel_expiry(rmq_endpoint, rmq_broker):
    async def scenario() -> list[Any]:
        started = time.monotonic()
        codes = await asyncio.gather(
            *(_telemetry_silently(rmq_endpoint, f"silent-{i}-{uuid.uuid4().hex[:6]}", 20) for i in range(20))
        )
        assert time.monotonic() - started < 15  # closed by the broker, not by the test's deadline
        return codes

    codes = asyncio.run(scenario())
    assert codes == [grpc.StatusCode.FAILED_PRECONDITION] * 20
    stats = _wait_stats(rmq_broker, 5, clients=0, telemetryStreams=0)
    assert stats["clients"] == 0 and stats["telemetryStreams"] == 0


def test_one_client_id_holds_at_most_four_telemetry_streams(rmq_endpoint, rmq_broker):
    d, s = _pb()
    client_id = f"many-{uuid.uuid4().hex[:6]}"
    settings = s.TelemetryCommand(
        settings=d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
    )

    async def scenario() -> tuple[list[Any], dict[str, int], dict[str, int]]:
        async with grpc.aio.insecure_channel(rmq_endpoint) as channel:
            method = channel.stream_stream(
                SERVICE + "Telemetry", s.TelemetryCommand.SerializeToString, s.TelemetryCommand.FromString
            )
            streams = []
            for _ in range(6):
                stream = method(metadata=metadata(client_id), timeout=20)
                await stream.write(settings)
                assert (await stream.read()).status.code == d.Code.OK
                streams.append(stream)
            for oldest in streams[:2]:  # ended by the broker: EOF, gRPC OK
                assert await asyncio.wait_for(oldest.read(), 10) is grpc.aio.EOF
                assert await oldest.code() == grpc.StatusCode.OK
            held = await asyncio.to_thread(_stats, rmq_broker)
            for stream in streams[2:]:
                await stream.done_writing()
            codes = [await asyncio.wait_for(stream.code(), 10) for stream in streams[2:]]
            after = await asyncio.to_thread(_wait_stats, rmq_broker, 5, clients=0, telemetryStreams=0)
            return codes, held, after

    codes, held, after = asyncio.run(scenario())
    assert codes == [grpc.StatusCode.OK] * 4
    assert held["telemetryStreams"] == 4 and held["clients"] == 1
    assert after["telemetryStreams"] == 0 and after["clients"] == 0  # the last stream took the client along


async def _statuses(call: Any) -> list[int]:
    codes = []
    try:
        async for response in call:
            if response.WhichOneof("content") == "status":
                codes.append(response.status.code)
    except grpc.aio.AioRpcError as exc:
        codes.append(-exc.code().value[0])
    return codes


def test_a_thousand_idle_long_polls_per_connection_are_bounded_and_pulsar_keeps_serving(
    rmq_endpoint, rmq_broker
):
    d, s = _pb()
    topic, group = f"idle-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    status, _ = admin(
        rmq_broker,
        "PUT",
        f"/admin/v2/persistent/public/default/{topic}/subscription/{group}",
        {"ledgerId": -1, "entryId": -1},
    )
    assert status in (204, 409)
    receive = s.ReceiveMessageRequest(
        group=d.Resource(name=group),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=-1),
        batch_size=1,
        auto_renew=True,
    )
    receive.long_polling_timeout.FromSeconds(8)
    pull = s.PullMessageRequest(
        group=d.Resource(name=group),
        message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=0),
        offset=0,
        batch_size=1,
        filter_expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
    )
    pull.long_polling_timeout.FromSeconds(8)
    client_id = f"poller-{uuid.uuid4().hex[:6]}"

    async def scenario() -> tuple[list[list[int]], list[list[int]], dict[str, int]]:
        async with grpc.aio.insecure_channel(rmq_endpoint) as channel:
            receive_method = channel.unary_stream(
                SERVICE + "ReceiveMessage",
                s.ReceiveMessageRequest.SerializeToString,
                s.ReceiveMessageResponse.FromString,
            )
            pull_method = channel.unary_stream(
                SERVICE + "PullMessage",
                s.PullMessageRequest.SerializeToString,
                s.PullMessageResponse.FromString,
            )
            receives = [
                asyncio.ensure_future(
                    _statuses(receive_method(receive, metadata=metadata(client_id), timeout=30))
                )
                for _ in range(1000)
            ]
            pulls = [
                asyncio.ensure_future(_statuses(pull_method(pull, metadata=metadata(client_id), timeout=30)))
                for _ in range(1000)
            ]
            waiting = await asyncio.to_thread(
                _wait_stats, rmq_broker, 6, receivesWaiting=256, pullsWaiting=256
            )
            await asyncio.to_thread(_pulsar_round_trip, rmq_broker)  # while the polls wait
            return await asyncio.gather(*receives), await asyncio.gather(*pulls), waiting

    receive_codes, pull_codes, waiting = asyncio.run(scenario())
    too_many, none = d.Code.TOO_MANY_REQUESTS, d.Code.MESSAGE_NOT_FOUND
    assert waiting["receivesWaiting"] == 256 and waiting["pullsWaiting"] == 256
    for codes in (receive_codes, pull_codes):
        counts = collections.Counter(tuple(c) for c in codes)
        assert counts[(none,)] == 256, counts  # the ones that waited
        # the rest were refused at once; under load gRPC itself may cancel a few that it had not yet handed to
        # the servicer (a gRPC status all the same)
        cancelled = -grpc.StatusCode.CANCELLED.value[0]
        assert counts[(too_many,)] + counts[(cancelled,)] == 1000 - 256 and counts[(too_many,)] > 0, counts
    stats = _wait_stats(rmq_broker, 5, receivesWaiting=0, pullsWaiting=0)
    assert stats["receivesWaiting"] == 0 and stats["pullsWaiting"] == 0


def test_a_flood_of_client_ids_is_bounded_then_expires(rmq_endpoint, stub, rmq_broker):
    d, s = _pb()
    request = s.QueryRouteRequest(topic=d.Resource(name="alive"))

    async def flood() -> list[int]:
        async with grpc.aio.insecure_channel(rmq_endpoint) as channel:
            method = channel.unary_unary(
                SERVICE + "QueryRoute", s.QueryRouteRequest.SerializeToString, s.QueryRouteResponse.FromString
            )
            answers = await asyncio.gather(
                *(
                    method(request, metadata=metadata(f"flood-{i}"), timeout=10)
                    for i in range(2 * MAX_CLIENTS)
                )
            )
            return [answer.status.code for answer in answers]

    codes = asyncio.run(flood())
    assert set(codes) <= {d.Code.OK, d.Code.TOO_MANY_REQUESTS}
    assert codes.count(d.Code.TOO_MANY_REQUESTS) >= MAX_CLIENTS // 2  # bounded (some may have expired)
    assert _stats(rmq_broker)["clients"] <= MAX_CLIENTS
    stats = _wait_stats(rmq_broker, EXPIRY_S + 5, clients=0)
    assert stats["clients"] == 0  # the idle ones expired
    assert _route(stub).status.code == d.Code.OK  # and new clients are welcome again


def test_a_client_making_ten_thousand_calls_then_vanishing_leaves_nothing(rmq_endpoint, rmq_broker):
    d, s = _pb()
    topics = [f"vanish-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    client_id = f"vanish-{uuid.uuid4().hex[:6]}"
    settings = s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.ClientType.PRODUCER,
            publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
        )
    )

    def send_request(i: int) -> Any:
        message = d.Message(topic=d.Resource(name=topics[i % len(topics)]), body=b"x")
        message.system_properties.message_id = f"0102FC0000000142960B18A1FE{i:08X}"
        message.system_properties.body_encoding = d.Encoding.IDENTITY
        return s.SendMessageRequest(messages=[message])

    async def scenario() -> tuple[dict[str, int], list[int]]:
        channel = grpc.aio.insecure_channel(rmq_endpoint)
        telemetry = channel.stream_stream(
            SERVICE + "Telemetry", s.TelemetryCommand.SerializeToString, s.TelemetryCommand.FromString
        )(metadata=metadata(client_id), timeout=60)
        await telemetry.write(settings)
        assert (await telemetry.read()).status.code == d.Code.OK
        heartbeat = channel.unary_unary(
            SERVICE + "Heartbeat", s.HeartbeatRequest.SerializeToString, s.HeartbeatResponse.FromString
        )
        send = channel.unary_unary(
            SERVICE + "SendMessage", s.SendMessageRequest.SerializeToString, s.SendMessageResponse.FromString
        )
        codes: list[int] = []
        for start in range(0, 10_000, 500):
            calls = [
                send(send_request(i), metadata=metadata(client_id), timeout=30)
                if i % 50 == 0
                else heartbeat(s.HeartbeatRequest(), metadata=metadata(client_id), timeout=30)
                for i in range(start, start + 500)
            ]
            codes.extend(answer.status.code for answer in await asyncio.gather(*calls))
        during = await asyncio.to_thread(_stats, rmq_broker)
        await channel.close(None)  # vanish: no NotifyClientTermination, the stream just drops
        return during, codes

    during, codes = asyncio.run(scenario())
    assert codes == [d.Code.OK] * 10_000
    assert during["clients"] >= 1 and during["producers"] >= len(topics)
    stats = _wait_stats(rmq_broker, EXPIRY_S + 5, clients=0, producers=0, telemetryStreams=0)
    assert stats["clients"] == 0 and stats["producers"] == 0 and stats["telemetryStreams"] == 0
    for topic in topics:  # the broker-side producers are gone from the Pulsar topics too
        status, topic_stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
        assert status == 200 and topic_stats["publishers"] == []


def _codes_of(call: Any) -> list[int]:
    out = []
    for response in call:
        if response.WhichOneof("content") == "status":
            out.append(response.status.code)
    return out


def test_out_of_range_numbers_and_names_get_a_status(stub, rmq_broker):
    d, s = _pb()
    topic, group = f"range-{uuid.uuid4().hex[:8]}", "range-group"
    md = metadata()
    internal = {d.Code.INTERNAL_ERROR, d.Code.INTERNAL_SERVER_ERROR}

    def receive(**fields: Any) -> Any:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name=fields.pop("group", group)),
            message_queue=d.MessageQueue(topic=d.Resource(name=fields.pop("topic", topic)), id=-1),
            batch_size=fields.pop("batch_size", 1),
        )
        for name, millis in fields.items():
            getattr(request, name).FromMilliseconds(millis)
        return _codes_of(stub.ReceiveMessage(request, metadata=md, timeout=20))

    assert receive(batch_size=-5, invisible_duration=30_000) == [d.Code.BAD_REQUEST]
    assert receive(invisible_duration=-1) == [d.Code.ILLEGAL_INVISIBLE_TIME]
    assert receive(invisible_duration=2**62) == [d.Code.ILLEGAL_INVISIBLE_TIME]
    assert receive(topic="bad\x00topic", invisible_duration=30_000) == [d.Code.ILLEGAL_TOPIC]
    assert receive(topic="主题", invisible_duration=30_000) == [d.Code.ILLEGAL_TOPIC]
    assert receive(group="g\x00", invisible_duration=30_000) == [d.Code.ILLEGAL_CONSUMER_GROUP]

    def pull(offset: int, batch: int, polling_ms: int | None = None) -> list[int]:
        request = s.PullMessageRequest(
            group=d.Resource(name=group),
            message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=0),
            offset=offset,
            batch_size=batch,
            filter_expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
        )
        if polling_ms is not None:
            request.long_polling_timeout.FromMilliseconds(polling_ms)
        return _codes_of(stub.PullMessage(request, metadata=md, timeout=20))

    for offset, batch, polling in ((-1, 1, None), (2**63 - 1, 1, None), (0, 2**31 - 1, None), (0, 1, -5000)):
        codes = pull(offset, batch, polling)
        assert len(codes) == 1 and codes[0] not in internal, (offset, batch, polling, codes)
    queue = d.MessageQueue(topic=d.Resource(name=topic), id=2**31 - 1)
    update = stub.UpdateOffset(
        s.UpdateOffsetRequest(group=d.Resource(name=group), message_queue=queue, offset=-7),
        metadata=md,
        timeout=10,
    )
    assert update.status.code not in internal | {d.Code.OK}
    change = stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            receipt_handle="\x00" * 10,
            message_id="m",
        ),
        metadata=md,
        timeout=10,
    )
    assert change.status.code not in internal | {d.Code.OK}
    half = d.Message(topic=d.Resource(name=topic), body=b"x")
    half.system_properties.message_id = "0102FC0000000142960B18A1FE00000099"
    half.system_properties.body_encoding = d.Encoding.IDENTITY
    half.system_properties.message_type = d.MessageType.TRANSACTION
    half.system_properties.orphaned_transaction_recovery_duration.seconds = 3601
    sent = stub.SendMessage(s.SendMessageRequest(messages=[half]), metadata=md, timeout=10)
    assert sent.status.code == d.Code.BAD_REQUEST and "3600" in sent.status.message
    route = stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="\u202e" * 300)), metadata=md, timeout=10
    )
    assert route.status.code == d.Code.ILLEGAL_TOPIC
    _assert_serving(stub, rmq_broker)
