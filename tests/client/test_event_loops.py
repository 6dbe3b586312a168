"""quasar.client on asyncio's default loop and on uvloop (the conftest runs every async test on both), and a
failed handshake reported with its cause rather than as a timeout.

Before the fix a connection under uvloop never completed: ``ClientCnx.connection_made`` asserted
``isinstance(transport, asyncio.Transport)``, uvloop's ``TCPTransport`` is no subclass of it, the loop only
logged the AssertionError, and the caller got "connecting ... timed out" after the connection timeout.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import quasar.client as qc
from quasar.client.client_cnx import ClientCnx
from quasar.client.errors import ConnectError
from quasar.client.sync_loop import LoopThread
from tests.interop.helpers import topic_name

uvloop = pytest.importorskip("uvloop")


def _loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if isinstance(loop, uvloop.Loop) else "asyncio"


async def test_each_async_test_runs_on_the_loop_its_id_names(request):
    assert f"[{_loop_kind(asyncio.get_running_loop())}]" in request.node.name


async def test_connect_produce_consume_ack_and_read_against_a_real_broker(broker):
    topic = topic_name("loops")
    async with qc.AsyncClient(broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "s", initial_position=qc.InitialPosition.Earliest)
        plain = await client.create_producer(topic, batching_enabled=False)
        batched = await client.create_producer(topic, batching_enabled=True, batching_max_messages=3)
        sent = [await plain.send(b"p%d" % i) for i in range(3)]
        futures = [await batched.send_async(b"b%d" % i) for i in range(3)]
        await batched.flush()
        sent += [await f for f in futures]
        assert len(set(sent)) == 6

        received = []
        for _ in range(6):
            message = await consumer.receive(10_000)
            received.append((message.data(), message.message_id()))
            await consumer.acknowledge(message)
        assert [data for data, _ in received] == [b"p0", b"p1", b"p2", b"b0", b"b1", b"b2"]
        assert [mid for _, mid in received] == sent

        reader = await client.create_reader(topic, qc.EARLIEST)
        assert [(await reader.read_next(10_000)).data() for _ in range(6)] == [d for d, _ in received]
        await reader.close()


def test_the_blocking_facade_runs_its_loop_thread_on_the_parametrized_loop(broker, facade_loop):
    topic = topic_name("facade-loops")
    client = qc.Client(broker.service_url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, "s", initial_position=qc.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        done = threading.Event()
        seen: list[tuple[object, str]] = []

        def on_receipt(error: object, _message_id: object) -> None:  # runs on the facade's loop thread
            seen.append((error, _loop_kind(asyncio.get_running_loop())))
            done.set()

        producer.send_async(b"x", on_receipt)
        producer.flush()
        assert done.wait(10)
        assert seen == [(None, facade_loop)]
        message = consumer.receive(10_000)
        assert message.data() == b"x"
        consumer.acknowledge(message)
    finally:
        client.close()


def test_the_blocking_facade_takes_uvloop_by_default():
    runner = LoopThread()
    try:
        assert isinstance(runner.loop, uvloop.Loop)
    finally:
        runner.stop()


# ------------------------------------------------------------------------------- failed handshakes --


class _ClosableOnly(asyncio.BaseTransport):
    """A transport the connection cannot write to (no ``write``)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _FailingWrite(_ClosableOnly):
    def write(self, data: bytes) -> None:
        raise OSError(32, "Broken pipe")

    def writelines(self, list_of_data: list[bytes]) -> None:
        raise OSError(32, "Broken pipe")

    def is_closing(self) -> bool:
        return self.closed


def _new_cnx() -> ClientCnx:
    return ClientCnx(("127.0.0.1", 1), next_request_id=iter(range(9)).__next__, operation_timeout=1,
                     keep_alive_interval=30)  # fmt: skip


async def test_a_transport_that_cannot_write_fails_the_handshake_with_that_cause():
    cnx, transport = _new_cnx(), _ClosableOnly()
    cnx.connection_made(transport)
    with pytest.raises(ConnectError, match=r"_ClosableOnly lacks write\(\)"):
        await cnx.wait_connected()
    assert transport.closed


async def test_a_failing_first_write_fails_the_handshake_with_that_cause():
    cnx, transport = _new_cnx(), _FailingWrite()
    cnx.connection_made(transport)
    with pytest.raises(ConnectError, match="Broken pipe") as info:
        await cnx.wait_connected()
    assert isinstance(info.value.__cause__, OSError) and transport.closed


async def _connect(port: int, connection_timeout: float) -> ClientCnx:
    return await ClientCnx.connect(
        ("127.0.0.1", port), next_request_id=iter(range(9)).__next__, operation_timeout=1,
        keep_alive_interval=30, connection_timeout=connection_timeout,
    )  # fmt: skip


async def test_a_broker_hanging_up_during_the_handshake_is_reported_as_such_not_as_a_timeout():
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectError, match=f"handshake with 127.0.0.1:{port} failed") as info:
            await asyncio.wait_for(_connect(port, connection_timeout=60), 30)
        assert "timed out" not in str(info.value)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_handshake_timeout_says_so_and_closes_the_socket():
    eof = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass  # swallow CONNECT, never answer
        eof.set()  # the client closed its side
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(
            ConnectError, match=r"timed out after 0.2 s \(the CONNECT -> CONNECTED handshake\)"
        ):
            await _connect(port, connection_timeout=0.2)
        await asyncio.wait_for(eof.wait(), 10)
    finally:
        server.close()
        await server.wait_closed()
