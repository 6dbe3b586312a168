"""(d) The broker's command dispatch: a ServerCnx on an in-memory broker service, fed arbitrary frames after a
valid CONNECT.

The service is the real ``BrokerService`` on the in-memory stores of the tests (``FakeMessageStore``,
``MemoryMetadataStore``, a ``ManagedLedgerFactory``), rebuilt every ``RESTART_EVERY`` inputs so topics the
inputs create do not pile up. Each input is one connection: CONNECT, then the input, then a few event-loop
turns (owned tasks: topic loads, publishes, dispatch), then ``connection_lost``.

Input: the first byte picks the mode. Even: the rest is records ``[u16 commandSize][u16 restSize][command]
[rest]``, each sent as one frame with correct length prefixes (so mutations reach protobuf and the handlers).
Odd: the rest is a raw byte stream, delivered in reads of ``first byte`` bytes.

A finding is: an exception escaping ``data_received`` or ``connection_lost``; an error logged (the
connection's last-resort boundary, "unexpected error" or "connection task failed"); an exception reported to
the event loop; a connection closed without a logged reason; a closed connection that still holds producers,
consumers or tasks, or still counts in the connection set; a topic left with a producer or consumer of a closed
connection. Every ``CHECK_EVERY`` inputs a NEW connection must still work (CONNECT, LOOKUP, PING answered).

Run: ``python fuzz/fuzz_server_cnx.py --runs 1000000`` (README.md).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import sys
from pathlib import Path
from typing import Any

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["quasar.protocol", "quasar.broker.server_cnx", "quasar.broker.cnx"]):
    from quasar.broker.server_cnx import ServerCnx
    from quasar.protocol import NEED_DATA, CommandType, FrameDecoder
    from quasar.protocol.frame import FRAME_HEADER

import _harness
import _seeds

from quasar.broker.broker_service import BrokerService
from quasar.broker.config import BrokerConfig
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata.memory import MemoryMetadataStore
from quasar.protocol import commands, requests
from quasar.testing.fake_store import FakeMessageStore

RESTART_EVERY = 5000
CHECK_EVERY = 100
LOOP_TURNS = 12
MAX_TURNS = 100
_RECORD = struct.Struct(">HH")


class Transport:
    """What ServerCnx uses of an asyncio transport; keeps the output bytes."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.out += data

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self.out += part

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Records(logging.Handler):
    """Log records of the broker during one input."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Broker:
    """The in-memory broker service and the loop it runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _loop, context: self.loop_errors.append(context))
        self.config = BrokerConfig(keep_alive_interval_s=30)
        self.connections: set[ServerCnx] = set()
        self.service: BrokerService | None = None
        self.inputs = 0

    async def _start(self) -> None:
        self.metadata = MemoryMetadataStore()
        self.factory = ManagedLedgerFactory(
            FakeMessageStore(), self.metadata, ManagedLedgerConfig(cursor_persist_interval_ms=10_000)
        )
        self.service = BrokerService(self.factory, self.metadata)
        await self.factory.start()
        await self.service.bootstrap()
        self.service.broker_service_url = "pulsar://127.0.0.1:6650"

    async def _stop(self) -> None:
        if self.service is not None:
            await self.service.close()
            await self.factory.close()
            await self.metadata.close()
            self.service = None

    def ensure(self) -> BrokerService:
        if self.service is None or self.inputs % RESTART_EVERY == 0:
            self.loop.run_until_complete(self._stop())
            self.loop.run_until_complete(self._start())
        self.inputs += 1
        assert self.service is not None
        return self.service


async def turns(count: int = LOOP_TURNS) -> None:
    """Let the loop run ``count`` turns (call_soon output, dispatch rounds)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def until_idle(cnx: ServerCnx) -> None:
    """Let the loop run until the connection's owned tasks (topic loads for PRODUCER, SUBSCRIBE) are done, at
    most ``MAX_TURNS`` turns, then a few more (so a SEND after a PRODUCER reaches a ready producer)."""
    for _ in range(MAX_TURNS):
        if not cnx._tasks:
            break
        await asyncio.sleep(0)
    await turns(3)


BROKER = Broker()
RECORDS = Records()
_broker_log = logging.getLogger("quasar")
_broker_log.addHandler(RECORDS)
_broker_log.setLevel(logging.WARNING)
_broker_log.propagate = False


def _frames_of(data: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos + _RECORD.size <= len(data):
        command_size, rest_size = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        command, rest = (
            data[pos : pos + command_size],
            data[pos + command_size : pos + command_size + rest_size],
        )
        pos += command_size + rest_size
        out.append(FRAME_HEADER.pack(4 + len(command) + len(rest), len(command)) + command + rest)
    return out


def _reply_types(transport: Transport) -> list[int]:
    decoder = FrameDecoder()
    decoder.receive_data(bytes(transport.out))
    transport.out.clear()
    types = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        types.append(frame.type)
    return types


def _open(service: BrokerService) -> tuple[ServerCnx, Transport]:
    cnx = ServerCnx(service, BROKER.config, BROKER.connections)
    transport = Transport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(_seeds.connect())
    if _reply_types(transport) != [CommandType.CONNECTED]:
        raise AssertionError("CONNECT was not answered CONNECTED")
    return cnx, transport


async def _check_new_connection_works(service: BrokerService) -> None:
    cnx, transport = _open(service)
    cnx.data_received(requests.new_lookup(_seeds.TOPIC, 1) + commands.new_ping())
    await turns()
    replies = _reply_types(transport)
    if transport.closed or sorted(replies) != sorted([CommandType.LOOKUP_RESPONSE, CommandType.PONG]):
        raise AssertionError(f"a new connection after the input is not served: replies {replies}")
    cnx.connection_lost(None)


def _check_after(cnx: ServerCnx, closed_by_broker: bool, service: BrokerService) -> None:
    errors = [r for r in RECORDS.records if r.levelno >= logging.ERROR]
    if errors:
        record = errors[0]
        detail = f": {record.exc_info[1]!r}" if record.exc_info else ""
        raise AssertionError(f"error logged: {record.getMessage()}{detail}")
    if BROKER.loop_errors:
        raise AssertionError(f"exception reported to the event loop: {BROKER.loop_errors[0]}")
    if closed_by_broker and not any(r.getMessage().startswith("closing connection") for r in RECORDS.records):
        raise AssertionError("the connection was closed without a logged reason")
    if cnx in BROKER.connections or cnx._tasks or len(cnx.producers) or len(cnx.consumers):
        raise AssertionError("a closed connection still holds producers, consumers, tasks or its slot")
    for topic in service.topics.values():
        holders = [p for p in getattr(topic, "producers", {}).values() if getattr(p, "cnx", None) is cnx]
        if holders:
            raise AssertionError(f"topic {topic} keeps a producer of a closed connection")


def test(data: bytes) -> None:
    if not data:
        return
    service = BROKER.ensure()
    BROKER.loop.run_until_complete(_one_connection(service, data))


async def _one_connection(service: BrokerService, data: bytes) -> None:
    RECORDS.records.clear()
    BROKER.loop_errors.clear()
    cnx, transport = _open(service)
    if data[0] % 2 == 0:
        chunks = _frames_of(data[1:])
    else:
        step = data[0] + 1
        chunks = [data[i : i + step] for i in range(1, len(data), step)]
    for chunk in chunks:
        if transport.closed:
            break
        cnx.data_received(chunk)
        await until_idle(cnx)
    await turns()
    closed_by_broker = transport.closed
    transport.close()
    cnx.connection_lost(None)
    await turns()
    _check_after(cnx, closed_by_broker, service)
    if BROKER.inputs % CHECK_EVERY == 0:
        await _check_new_connection_works(service)


def _record(frame: bytes) -> bytes:
    command_size = struct.unpack_from(">I", frame, 4)[0]
    command, rest = frame[8 : 8 + command_size], frame[8 + command_size :]
    return _RECORD.pack(len(command), len(rest)) + command + rest


def seeds() -> list[bytes]:
    frames = _seeds.client_frames()
    out = [b"\x00" + _record(frame) for frame in frames]
    out.append(b"\x00" + b"".join(_record(frame) for frame in frames))
    out.append(b"\x07" + b"".join(frames))
    return out


if __name__ == "__main__":
    _harness.run("fuzz_server_cnx", test, (), seeds)
