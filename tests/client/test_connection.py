"""Connection layer against a tiny in-process fake broker: handshake, request futures failed on connection
loss, lookup redirects, keep-alive, and send receipts out of order forcing a reconnect + resend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from quasar.client import AsyncClient
from quasar.client.client_cnx import ClientCnx
from quasar.client.config import ClientConfig
from quasar.client.connection_pool import ConnectionPool, LookupService, parse_service_url
from quasar.client.errors import ConnectError, ConnectionClosedError, LookupError_, OperationTimeoutError
from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, commands, encode_command, pb

Handler = Callable[["FakeBroker", asyncio.StreamWriter, object], None]


class FakeBroker:
    """Answers CONNECT; every other frame goes to ``handler`` (which may write answers)."""

    def __init__(self, handler: Handler | None = None, *, answer_ping: bool = True) -> None:
        self.handler = handler
        self.answer_ping = answer_ping
        self.frames: list[object] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    self.frames.append(frame)
                    if frame.type == CommandType.CONNECT:
                        writer.write(commands.new_connected("fake", 20, 5 * 1024 * 1024))
                    elif frame.type == CommandType.PING:
                        if self.answer_ping:
                            writer.write(commands.new_pong())
                    elif self.handler is not None:
                        self.handler(self, writer, frame)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def types(self) -> list[int]:
        return [f.type for f in self.frames]

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


async def connect(broker: FakeBroker, **kwargs: float) -> ClientCnx:
    return await ClientCnx.connect(
        ("127.0.0.1", broker.port),
        next_request_id=iter(range(1000)).__next__,
        operation_timeout=kwargs.get("operation_timeout", 5),
        keep_alive_interval=kwargs.get("keep_alive_interval", 30),
        connection_timeout=5,
    )


def test_parse_service_url():
    assert parse_service_url("pulsar://h:1234") == ("h", 1234)
    assert parse_service_url("pulsar://h") == ("h", 6650)
    assert parse_service_url("pulsar://a:1,b:2/") == ("a", 1)
    with pytest.raises(ValueError, match="pulsar://"):
        parse_service_url("http://h:1")
    with pytest.raises(ValueError, match="port"):
        parse_service_url("pulsar://h:x")
    with pytest.raises(TypeError, match="service_url"):
        parse_service_url(5)  # type: ignore[arg-type]


async def test_pending_requests_fail_when_the_connection_dies():
    broker = await FakeBroker(lambda b, w, f: w.close()).start()  # any request: hang up
    cnx = await connect(broker)
    assert cnx.protocol_version == 20 and cnx.max_message_size == 5 * 1024 * 1024
    with pytest.raises(ConnectionClosedError):
        await cnx.request(commands.new_partitioned_metadata("persistent://a/b/c", 7), 7)
    await cnx.wait_closed()
    with pytest.raises(ConnectionClosedError):
        await cnx.request(commands.new_partitioned_metadata("persistent://a/b/c", 8), 8)
    await broker.close()


async def test_request_times_out_and_errors_carry_the_server_error_code():
    def handler(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
        if frame.type == CommandType.PARTITIONED_METADATA:  # type: ignore[attr-defined]
            request_id = frame.command.partitionMetadata.request_id  # type: ignore[attr-defined]
            if request_id == 1:
                writer.write(commands.new_partitioned_metadata_error(request_id, 11, "no such topic"))
        # other requests: never answered

    broker = await FakeBroker(handler).start()
    cnx = await connect(broker, operation_timeout=0.2)
    from quasar.client.errors import BrokerResponseError

    with pytest.raises(BrokerResponseError) as info:
        await cnx.request(commands.new_partitioned_metadata("persistent://a/b/c", 1), 1)
    assert info.value.code == 11 and not info.value.retryable
    with pytest.raises(OperationTimeoutError):
        await cnx.request(commands.new_partitioned_metadata("persistent://a/b/c", 2), 2)
    cnx.close()
    await broker.close()


async def test_lookup_follows_redirects_and_gives_up_after_the_limit():
    final = await FakeBroker().start()

    def redirecting(target: str) -> Handler:
        def handler(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
            body = frame.command.lookupTopic  # type: ignore[attr-defined]
            cmd = pb.BaseCommand(type=CommandType.LOOKUP_RESPONSE)
            response = cmd.lookupTopicResponse
            response.request_id = body.request_id
            if body.authoritative:
                response.response = 1  # Connect
                response.brokerServiceUrl = final.url
            else:
                response.response = 0  # Redirect
                response.brokerServiceUrl = target
                response.authoritative = True
            writer.write(encode_command(cmd))

        return handler

    second = await FakeBroker().start()
    second.handler = redirecting(second.url)
    first = await FakeBroker(redirecting(second.url)).start()
    pool = ConnectionPool(ClientConfig(operation_timeout_seconds=2))
    lookup = LookupService(pool, ("127.0.0.1", first.port))
    assert await lookup.lookup("persistent://a/b/c") == ("127.0.0.1", final.port)
    assert second.types() == [CommandType.CONNECT, CommandType.LOOKUP]  # asked again, authoritative

    loop_broker = await FakeBroker().start()

    def loop_forever(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
        cmd = pb.BaseCommand(type=CommandType.LOOKUP_RESPONSE)
        cmd.lookupTopicResponse.request_id = frame.command.lookupTopic.request_id  # type: ignore[attr-defined]
        cmd.lookupTopicResponse.response = 0
        cmd.lookupTopicResponse.brokerServiceUrl = loop_broker.url
        writer.write(encode_command(cmd))

    loop_broker.handler = loop_forever
    limited = ConnectionPool(ClientConfig(operation_timeout_seconds=2, max_lookup_redirects=3))
    with pytest.raises(LookupError_, match="redirects"):
        await LookupService(limited, ("127.0.0.1", loop_broker.port)).lookup("persistent://a/b/c")
    assert loop_broker.types().count(CommandType.LOOKUP) == 4
    await pool.aclose()
    await limited.aclose()
    for broker in (first, second, final, loop_broker):
        await broker.close()


async def test_unanswered_ping_closes_the_connection():
    broker = await FakeBroker(answer_ping=False).start()
    cnx = await connect(broker, keep_alive_interval=0.05)
    await asyncio.wait_for(cnx.wait_closed(), 5)
    assert broker.types().count(CommandType.PING) == 1
    # an answered PING keeps it open: at least two keep-alive rounds pass (bounded: 100 polls of 50 ms); the
    # interval leaves the fake broker's PONG far more time than it needs on a loaded machine
    answered = await FakeBroker().start()
    cnx2 = await connect(answered, keep_alive_interval=0.5)
    try:
        for _ in range(100):
            if answered.types().count(CommandType.PING) >= 2:
                break
            await asyncio.sleep(0.05)
        assert answered.types().count(CommandType.PING) >= 2
        assert not cnx2.is_closed
    finally:
        cnx2.close()
        await broker.close()
        await answered.close()


async def test_connect_error_on_refused_port():
    broker = await FakeBroker().start()
    port = broker.port
    await broker.close()
    with pytest.raises(ConnectError):
        await ClientCnx.connect(
            ("127.0.0.1", port), next_request_id=iter(range(9)).__next__, operation_timeout=1,
            keep_alive_interval=30, connection_timeout=1,
        )  # fmt: skip


def _standard(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> bool:
    """Answer metadata/lookup/producer; return True when handled."""
    cmd = frame.command  # type: ignore[attr-defined]
    if frame.type == CommandType.PARTITIONED_METADATA:  # type: ignore[attr-defined]
        writer.write(commands.new_partitioned_metadata_response(cmd.partitionMetadata.request_id, 0))
    elif frame.type == CommandType.LOOKUP:  # type: ignore[attr-defined]
        writer.write(commands.new_lookup_response(cmd.lookupTopic.request_id, broker.url))
    elif frame.type == CommandType.PRODUCER:  # type: ignore[attr-defined]
        writer.write(commands.new_producer_success(cmd.producer.request_id, "fake-0", -1))
    elif frame.type == CommandType.CLOSE_PRODUCER:  # type: ignore[attr-defined]
        writer.write(commands.new_success(cmd.close_producer.request_id))
    else:
        return False
    return True


async def test_receipts_in_order_resolve_sends_and_a_receipt_ahead_forces_reconnect_and_resend():
    sends: list[tuple[int, int]] = []  # (connection number, sequence id)

    def handler(broker: FakeBroker, writer: asyncio.StreamWriter, frame: object) -> None:
        if _standard(broker, writer, frame):
            return
        if frame.type == CommandType.SEND:  # type: ignore[attr-defined]
            seq = frame.command.send.sequence_id  # type: ignore[attr-defined]
            sends.append((broker.connections, seq))
            if broker.connections == 1 and seq == 1:
                writer.write(commands.new_send_receipt(0, 2, 9, 2))  # receipt ahead of the head (1): bad
            elif broker.connections > 1 or seq == 0:
                writer.write(commands.new_send_receipt(0, seq, 9, seq))

    broker = await FakeBroker(handler).start()
    async with AsyncClient(broker.url, operation_timeout_seconds=5, initial_backoff_interval_ms=10) as client:
        producer = await client.create_producer("t")
        first = await producer.send(b"a")
        assert (first.ledger_id, first.entry_id) == (9, 0)
        futures = [await producer.send_async(b"b"), await producer.send_async(b"c")]
        ids = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert [(i.ledger_id, i.entry_id) for i in ids] == [(9, 1), (9, 2)]
        # the first connection saw 0, 1, 2; after the reconnect 1 and 2 were resent, in order
        assert [s for c, s in sends if c == 1] == [0, 1, 2]
        assert [s for c, s in sends if c == 2] == [1, 2]
        assert producer.last_sequence_id == 2
    await broker.close()
