"""ClientCnx.data_received: frames cut by the compiled fast path (SEND_RECEIPT, MESSAGE) and by the FrameDecoder
(everything else) reach their handlers in stream order, whatever the chunks the socket delivers them in; a
malformed frame closes the connection as the decoder says; frames are written once per loop turn."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.client.client_cnx import ClientCnx
from quasar.protocol import commands, pb
from quasar.protocol.frame import encode_headers_and_payload

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.calls = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.calls += 1
        self.written.append(bytes(data))

    def writelines(self, list_of_data: list[bytes]) -> None:
        self.calls += 1
        self.written.extend(bytes(d) for d in list_of_data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class _Producer:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None:
        self.log.append(("receipt", sequence_id, ledger_id, entry_id))

    def on_send_error(self, frame: Any) -> None:
        self.log.append(("send_error", frame.command.send_error.sequence_id))

    def on_connection_closed(self, cnx: Any) -> None:
        self.log.append(("producer_closed",))


class _Consumer:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def on_message(self, frame: Any) -> None:  # the decoder's path: same facts as the fast path's
        cmd = frame.command.message
        self.log.append(("message", cmd.message_id.entryId, bytes(frame.headers_and_payload)[-3:]))

    def on_message_parts(self, ledger_id: int, entry_id: int, *rest: Any) -> None:
        self.log.append(("message", entry_id, rest[3][-3:]))

    def on_connection_closed(self, cnx: Any) -> None:
        self.log.append(("consumer_closed",))

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.log.append(("active", is_active))


def _message(entry_id: int, ack_set: bool) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
    span = encode_headers_and_payload(md, b"abc")
    parts = commands.new_message(2, 1, entry_id, -1, span, ack_set=[5] if ack_set else None)
    return b"".join(bytes(p) for p in parts)  # an ack_set goes through the decoder


FRAMES = st.one_of(
    st.integers(0, 50).map(lambda i: commands.new_send_receipt(1, i, 9, i)),
    st.tuples(st.integers(0, 50), st.booleans()).map(lambda t: _message(*t)),
    st.integers(0, 50).map(lambda i: commands.new_send_error(1, i, 0, "no")),
    st.just(commands.new_ping()),
    st.just(commands.new_active_consumer_change(2, True)),
)


async def _feed(stream: bytes, cuts: list[int]) -> tuple[list[Any], list[bytes], int]:
    log: list[Any] = []
    cnx = ClientCnx(
        ("h", 1), next_request_id=iter(range(9)).__next__, operation_timeout=1, keep_alive_interval=30
    )
    transport = _Transport()
    cnx.connection_made(transport)  # writes CONNECT; no CONNECTED needed to read frames
    transport.written.clear()
    transport.calls = 0
    cnx.register_producer(1, _Producer(log))
    cnx.register_consumer(2, _Consumer(log))
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        cnx.data_received(stream[start:cut])
        start = max(start, cut)
    await asyncio.sleep(0)  # the PONGs go out at the next loop turn, in one writelines
    return log, transport.written, transport.calls


@SETTINGS
@given(st.lists(FRAMES, max_size=8), st.data())
def test_handlers_see_the_stream_in_order_whatever_the_chunks(
    frames: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    whole = asyncio.run(_feed(stream, []))
    chunked = asyncio.run(_feed(stream, cuts))
    assert chunked[:2] == whole[:2]
    pings = frames.count(commands.new_ping())
    assert whole[1] == [commands.new_pong()] * pings
    assert whole[2] == (1 if pings else 0)  # every PONG of the turn in one call
    assert (
        len([e for e in whole[0] if e[0] in ("receipt", "message", "send_error", "active")])
        == len(frames) - pings
    )


def test_a_malformed_frame_closes_the_connection_and_nothing_after_it_is_read() -> None:
    good = commands.new_send_receipt(1, 1, 9, 1)
    bad = b"\x00\x00\x00\x02\x00\x00"  # totalSize 2: too small to hold commandSize
    log, _, _ = asyncio.run(_feed(good + bad + good, [3]))
    assert log[0] == ("receipt", 1, 9, 1)
    assert [e for e in log if e[0] == "receipt"] == [("receipt", 1, 9, 1)]
