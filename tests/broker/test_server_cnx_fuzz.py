"""Hypothesis version of fuzz/fuzz_server_cnx.py (bounded): random frames and random commands into a ServerCnx
on an in-memory BrokerService after a valid CONNECT. Nothing escapes, no error is logged, a connection the
broker closes was closed with a logged reason, a malformed frame closes it as a protocol error, and a NEW
connection afterwards is served. Plus the regression the atheris run of fuzz/fuzz_commands.py found."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.broker.broker_service import BrokerService
from quasar.broker.config import BrokerConfig
from quasar.broker.server_cnx import ServerCnx
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata.memory import MemoryMetadataStore
from quasar.protocol import CommandType, MessageId, commands, encode_headers_and_payload, requests
from quasar.protocol.enums import AckType, SubType
from quasar.protocol.frame import FRAME_HEADER
from quasar.protocol.pb import MessageMetadata
from quasar.testing.fake_store import FakeMessageStore
from tests.broker.test_server_cnx import FakeTransport

TOPIC = "persistent://public/default/fuzz"
EARLIEST = 1  # InitialPosition.Earliest


def _metadata(sequence_id: int = 1) -> bytes:
    return MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1).SerializeToString()


def _command_of(frame: bytes) -> bytes:
    return frame[8 : 8 + struct.unpack_from(">I", frame, 4)[0]]


def _rest_of(frame: bytes) -> bytes:
    return frame[8 + struct.unpack_from(">I", frame, 4)[0] :]


SESSION = [  # what a client sends after CONNECT, in order
    requests.new_producer(TOPIC, 1, 1),
    requests.new_send(1, 0, encode_headers_and_payload(_metadata(0), b"m0")),
    requests.new_subscribe(TOPIC, "s", SubType.Shared, 1, 2, initial_position=EARLIEST),
    requests.new_flow(1, 10),
    requests.new_ack(1, [MessageId(0, 0)], AckType.Individual),
    requests.new_lookup(TOPIC, 3),
    requests.new_partitioned_metadata(TOPIC, 4),
    requests.new_seek(1, 5, message_id=MessageId(0, 0)),
    requests.new_get_last_message_id(1, 6),
    requests.new_redeliver_unacknowledged_messages(1),
    requests.new_unsubscribe(1, 7),
    commands.new_ping(),
]


def framed(command: bytes, rest: bytes = b"") -> bytes:
    return FRAME_HEADER.pack(4 + len(command) + len(rest), len(command)) + command + rest


@st.composite
def mutated_command(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A session command with a few bytes flipped, inserted or cut, and its payload (if any)."""
    frame = draw(st.sampled_from(SESSION))
    command = bytearray(_command_of(frame))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(command)))
        if at < len(command) and draw(st.booleans()):
            command[at] ^= draw(st.integers(1, 255))
        else:
            command[at:at] = draw(st.binary(min_size=1, max_size=3))
    return bytes(command), _rest_of(frame)


FRAMES = st.lists(
    st.one_of(
        st.sampled_from(SESSION),
        mutated_command().map(lambda parts: framed(*parts)),
        st.tuples(st.binary(max_size=32), st.binary(max_size=8)).map(lambda parts: framed(*parts)),
    ),
    min_size=1,
    max_size=6,
)
MALFORMED = st.one_of(
    st.binary(min_size=1, max_size=32).map(lambda body: struct.pack(">II", 3, 0) + body),  # totalSize < 4
    st.integers(5, 100).map(lambda size: struct.pack(">II", 4, size)),  # commandSize past the frame
    st.just(framed(b"\xff\xff")),  # an unparsable BaseCommand
    st.just(framed(b"\x08\x01")),  # CONNECT without its sub-message
    st.just(framed(_command_of(commands.new_ping()), b"junk")),  # bytes after a payload-less command
    st.just(  # a SEND carrying broker entry metadata, which only a broker adds
        requests.new_send(
            1, 0, b"\x0e\x02\x00\x00\x00\x02\x08\x01" + encode_headers_and_payload(_metadata(), b"x")
        )
    ),
)


class Broker:
    """A real BrokerService on the in-memory stores, and the log records of its connections."""

    def __init__(self) -> None:
        self.metadata = MemoryMetadataStore()
        self.factory = ManagedLedgerFactory(
            FakeMessageStore(), self.metadata, ManagedLedgerConfig(cursor_persist_interval_ms=10_000)
        )
        self.service = BrokerService(self.factory, self.metadata)
        self.service.broker_service_url = "pulsar://127.0.0.1:6650"
        self.config = BrokerConfig(keep_alive_interval_s=30)
        self.connections: set[ServerCnx] = set()
        self.records: list[logging.LogRecord] = []

    def open(self) -> tuple[ServerCnx, FakeTransport]:
        cnx = ServerCnx(self.service, self.config, self.connections)
        transport = FakeTransport()
        cnx.connection_made(transport)  # type: ignore[arg-type]
        cnx.data_received(requests.new_connect("fuzz"))
        assert [f.type for f in transport.frames()] == [CommandType.CONNECTED]
        return cnx, transport

    async def check_a_new_connection_is_served(self) -> None:
        cnx, transport = self.open()
        cnx.data_received(requests.new_lookup(TOPIC, 99) + commands.new_ping())
        await settle()
        assert not transport.closed
        assert sorted(f.type for f in transport.frames()) == [CommandType.PONG, CommandType.LOOKUP_RESPONSE]
        cnx.connection_lost(None)


async def settle(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def until_idle(cnx: ServerCnx) -> None:
    """Turns until the connection's owned tasks (topic loads of PRODUCER, SUBSCRIBE) are done (at most 100)."""
    for _ in range(100):
        if not cnx._tasks:
            break
        await asyncio.sleep(0)
    await settle(3)


class _Records(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    made = Broker()
    await made.factory.start()
    await made.service.bootstrap()
    handler = _Records(made.records)
    quasar_log = logging.getLogger("quasar")
    quasar_log.addHandler(handler)
    try:
        yield made
    finally:
        quasar_log.removeHandler(handler)
        await made.service.close()
        await made.factory.close()
        await made.metadata.close()


async def _feed(broker: Broker, stream: list[bytes]) -> tuple[bool, list[str]]:
    """One connection: CONNECT, ``stream`` read by read, the loop turns, then the connection is lost.
    Returns (closed by the broker, the reasons logged), after checking nothing was left behind."""
    broker.records.clear()
    cnx, transport = broker.open()
    for chunk in stream:
        cnx.data_received(chunk)
        await until_idle(cnx)
    await settle()
    closed = transport.closed
    transport.close()
    cnx.connection_lost(None)
    await settle()
    errors = [r.getMessage() for r in broker.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert cnx not in broker.connections and not cnx._tasks
    assert len(cnx.producers) == len(cnx.consumers) == 0
    return closed, [r.getMessage() for r in broker.records if r.getMessage().startswith("closing connection")]


fuzzing = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@fuzzing
@given(FRAMES)
async def test_random_frames_never_escape_and_a_close_has_a_logged_reason(
    broker: Broker, frames: list[bytes]
) -> None:
    closed, reasons = await _feed(broker, frames)
    if closed:
        assert reasons, "the broker closed the connection without logging why"
    await broker.check_a_new_connection_is_served()


@fuzzing
@given(st.binary(min_size=1, max_size=200), st.integers(1, 50))
async def test_random_bytes_never_escape(broker: Broker, data: bytes, step: int) -> None:
    closed, reasons = await _feed(broker, [data[at : at + step] for at in range(0, len(data), step)])
    if closed:
        assert reasons
    await broker.check_a_new_connection_is_served()


HARMLESS = [  # well-formed commands that never close a connection
    requests.new_lookup(TOPIC, 3),
    requests.new_partitioned_metadata(TOPIC, 4),
    requests.new_get_topics_of_namespace(5, "public/default"),
    commands.new_ping(),
]


@fuzzing
@given(st.lists(st.sampled_from(HARMLESS), max_size=3), MALFORMED)
async def test_a_malformed_frame_closes_its_connection_as_a_protocol_error(
    broker: Broker, before: list[bytes], malformed: bytes
) -> None:
    closed, reasons = await _feed(broker, [*before, malformed, commands.new_ping()])
    assert closed
    assert len(reasons) == 1 and "protocol error" in reasons[0]
    await broker.check_a_new_connection_is_served()


async def test_a_send_with_a_group_in_its_metadata_closes_the_connection_and_dispatch_goes_on(
    broker: Broker,
) -> None:
    """Found by fuzz/fuzz_commands.py: metadata with a group (minimal: ``0x23 0x24`` after valid fields) was
    stored, then every dispatch of the topic's subscriptions failed. Now the SEND closes its connection with
    the reason, nothing is stored, and the next message is delivered."""
    bad = requests.new_send(1, 0, encode_headers_and_payload(_metadata(0) + b"\x23\x24", b"bad"))
    closed, reasons = await _feed(broker, [requests.new_producer(TOPIC, 1, 1), bad])
    assert closed and len(reasons) == 1 and "SEND with malformed message metadata" in reasons[0]

    cnx, transport = broker.open()
    cnx.data_received(requests.new_producer(TOPIC, 1, 1))
    await until_idle(cnx)
    cnx.data_received(requests.new_send(1, 1, encode_headers_and_payload(_metadata(1), b"good")))
    await settle()
    cnx.data_received(requests.new_subscribe(TOPIC, "s", SubType.Shared, 2, 2, initial_position=EARLIEST))
    await until_idle(cnx)
    cnx.data_received(requests.new_flow(2, 10))
    await settle()
    frames = transport.frames()
    messages = [f for f in frames if f.type == CommandType.MESSAGE]
    assert [bytes(m.headers_and_payload)[-4:] for m in messages] == [b"good"]
    assert not transport.closed and [r for r in broker.records if r.levelno >= logging.ERROR] == []
    cnx.connection_lost(None)
