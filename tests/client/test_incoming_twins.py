"""The client's receive fast path: the compiled ``_incoming_c`` and its twin ``_incoming_py`` give the same
events for every input, what they decode equals what the protocol's FrameDecoder decodes, and what they refuse
they hand over whole (raw) so the decoder's errors stay its own."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.client import _incoming_py
from quasar.protocol import NEED_DATA, FrameDecoder, commands, parse_headers_and_payload, pb
from quasar.protocol.ack_set import to_int64
from quasar.protocol.errors import ProtocolError
from quasar.protocol.frame import encode_headers_and_payload

_incoming_c = pytest.importorskip("quasar.client._incoming_c", reason="the compiled twin is not built")

TWINS = (_incoming_c, _incoming_py)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=8)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX = 5 * 1024 * 1024


def _outcome(twin: Any, buffer: Any, start: Any = 0, max_frame: Any = MAX) -> Any:
    """Events, or the exception class."""
    try:
        return twin.read_frames(buffer, start, max_frame)
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return "error", type(exc)


def _both(*args: Any) -> Any:
    results = [_outcome(twin, *args) for twin in TWINS]
    assert results[0] == results[1], (args, results)
    return results[0]


@st.composite
def metadata(draw: st.DrawFn) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name=draw(TEXT), sequence_id=draw(U64), publish_time=draw(U64))
    for key, value in draw(st.lists(st.tuples(TEXT, TEXT), max_size=2)):
        md.properties.add(key=key, value=value)
    if draw(st.booleans()):
        md.partition_key = draw(TEXT)
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(0, 100))
    if draw(st.booleans()):
        md.compression = draw(st.sampled_from([0, 1, 2, 3, 4]))
        md.uncompressed_size = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        md.uuid = draw(TEXT)
        md.chunk_id = draw(st.integers(0, 9))
        md.num_chunks_from_msg = draw(st.integers(1, 9))
        md.total_chunk_msg_size = draw(st.integers(0, 999))
    if draw(st.booleans()):
        md.ordering_key = draw(st.binary(max_size=4))
        md.event_time = draw(U64)
    if draw(st.booleans()):
        md.replicate_to.extend(draw(st.lists(TEXT, max_size=2)))
    if draw(st.booleans()):
        md.encryption_algo = "x"  # encrypted: never for the fast path
    return md


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["receipt", "message", "other"]))
    if kind == "receipt":
        highest = draw(st.one_of(st.none(), U64))
        return commands.new_send_receipt(draw(U64), draw(U64), draw(U64), draw(U64), highest)
    if kind == "message":
        md = draw(metadata())
        span = encode_headers_and_payload(md, draw(st.binary(max_size=40)), checksum=draw(st.booleans()))
        ack_set = draw(
            st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=2))
        )
        parts = commands.new_message(
            draw(U64), draw(st.integers(-1, 2**63 - 1)), draw(st.integers(-1, 2**63 - 1)),
            draw(st.integers(-1, 9)), span, redelivery_count=draw(st.integers(0, 2**32 - 1)), ack_set=ack_set,
            consumer_epoch=draw(st.one_of(st.none(), U64)),
        )  # fmt: skip
        return b"".join(bytes(p) for p in parts)
    return draw(st.sampled_from([commands.new_ping(), commands.new_pong(), commands.new_success(3)]))


def _decoder_view(frame: bytes) -> Any:
    """What the FrameDecoder (the slow path) makes of one frame, shaped like a fast-path event."""
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    decoded = decoder.next_frame()
    assert decoded is not NEED_DATA
    if decoded.type == 7:
        body = decoded.command.send_receipt
        mid = body.message_id
        return (7, body.producer_id, body.sequence_id, to_int64(mid.ledgerId), to_int64(mid.entryId))

    body = decoded.command.message
    parsed = parse_headers_and_payload(decoded.headers_and_payload)
    md = parsed.metadata
    batch = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else None
    return (9, body.consumer_id, to_int64(body.message_id.ledgerId), to_int64(body.message_id.entryId),
            body.redelivery_count, decoded.checksum_ok, bytes(parsed.metadata_bytes), bytes(parsed.payload),
            batch, md.num_chunks_from_msg, md.compression, md.uncompressed_size)  # fmt: skip


@SETTINGS
@given(st.lists(frames(), max_size=5), st.binary(max_size=6))
def test_valid_frames_decode_as_the_frame_decoder_does(stream: list[bytes], tail: bytes) -> None:
    data = b"".join(stream)
    events, end = _both(data + tail[:3])
    assert end == len(data) + (len(tail[:3]) if len(tail[:3]) >= 4 else 0) or end == len(data)
    starts = [sum(len(f) for f in stream[:i]) for i in range(len(stream))]
    assert len(events) == len(stream)
    for frame, start, event in zip(stream, starts, events, strict=True):
        if event[0] == 0:
            assert event[1:] == (start, start + len(frame))
        else:
            assert event == _decoder_view(frame)


def test_plain_receipts_and_messages_take_the_fast_path() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=3)
    md.properties.add(key="k", value="v")
    span = encode_headers_and_payload(md, b"payload")
    message = b"".join(bytes(p) for p in commands.new_message(5, 6, 7, -1, span, redelivery_count=2))
    bad_crc = bytearray(message)
    bad_crc[-1] ^= 1
    stream = commands.new_send_receipt(1, 2, 3, 4) + message + bytes(bad_crc) + commands.new_ping()
    events, end = _both(stream)
    assert end == len(stream)
    assert [e[0] for e in events] == [7, 9, 9, 0]
    assert events[0] == (7, 1, 2, 3, 4)
    assert events[1] == (9, 5, 6, 7, 2, True, md.SerializeToString(), b"payload", 3, 0, 0, 0)
    assert events[2][5] is False


@SETTINGS
@given(st.lists(frames(), min_size=1, max_size=3), st.data())
def test_mangled_frames_agree_and_split_at_the_same_place(stream: list[bytes], data: st.DataObject) -> None:
    buffer = bytearray(b"".join(stream))
    for _ in range(data.draw(st.integers(1, 4))):
        buffer[data.draw(st.integers(0, len(buffer) - 1))] = data.draw(st.integers(0, 255))
    result = _both(bytes(buffer), 0, data.draw(st.sampled_from([MAX, 64, 0])))
    if result[0] == "error":
        return
    for event in result[0]:  # what went raw makes the decoder decode or raise, never crash
        if event[0] == 0:
            decoder = FrameDecoder()
            try:
                decoder.receive_data(bytes(buffer[event[1] : event[2]]))
                decoder.next_frame()
            except ProtocolError:
                pass


@SETTINGS
@given(st.binary(max_size=120), st.integers(-2, 130), st.integers(-1, 200))
def test_random_bytes_agree(data: bytes, start: int, max_frame: int) -> None:
    _both(data, start, max_frame)


def test_partial_frames_wait_for_more() -> None:
    frame = commands.new_send_receipt(1, 2, 3, 4)
    for cut in range(len(frame)):
        assert _both(frame[:cut]) == ([], 0)
    assert _both(b"x" + frame, 1)[1] == len(frame) + 1


def test_bad_arguments_are_refused_alike() -> None:
    frame = commands.new_send_receipt(1, 2, 3, 4)
    for args in (
        ("text", 0), (frame, "0"), (frame, 0, 1.5), (frame, 0, -1), (frame, 2**70), (memoryview(frame)[::2], 0),
        (bytearray(frame), 0), (memoryview(frame), 0),
    ):  # fmt: skip
        _both(*args)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
