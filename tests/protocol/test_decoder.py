"""FrameDecoder: framing, payload spans, checksums, limits, error state. Every test that decodes bytes runs
whole, byte-at-a-time and with trailing bytes (the ``mode`` parameter)."""

from __future__ import annotations

import struct

import pytest

from quasar import protocol as p
from quasar.protocol import (
    NEED_DATA,
    CommandType,
    FrameDecoder,
    FrameTooLargeError,
    LocalProtocolError,
    MalformedFrameError,
    RemoteProtocolError,
)

from ._helpers import MODES, base_command, f_bytes, f_varint, feed, payload_frame, simple_frame, span

METADATA = f_bytes(1, "p-0") + f_varint(2, 1) + f_varint(3, 1_700_000_000_000)
SPAN = span(METADATA, b"payload bytes")
PING = p.new_ping()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


# --------------------------------------------------------------------------------------- framing --


def test_several_frames_in_one_buffer(mode: str) -> None:
    data = PING + p.new_flow(1, 1000) + p.new_send(0, 1, SPAN) + p.new_pong()
    frames = feed(mode, data)
    assert [f.type for f in frames] == [
        CommandType.PING,
        CommandType.FLOW,
        CommandType.SEND,
        CommandType.PONG,
    ]
    assert frames[1].body.messagePermits == 1000
    assert frames[0].headers_and_payload is None and frames[0].checksum_ok is None


def test_many_small_frames_in_one_receive() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(PING * 20_000 + p.new_flow(3, 7))
    types = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        types.append(frame.type)
    assert types == [CommandType.PING] * 20_000 + [CommandType.FLOW]
    assert decoder.buffered_size == 0


def test_frame_type_is_a_command_type(mode: str) -> None:
    (frame,) = feed(mode, PING)
    assert frame.type is CommandType.PING


def test_need_data_until_the_frame_is_complete() -> None:
    decoder = FrameDecoder()
    for byte in PING[:-1]:
        decoder.receive_data(bytes([byte]))
        assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(PING[-1:])
    assert decoder.next_frame().type == CommandType.PING
    assert decoder.next_frame() is NEED_DATA


# ---------------------------------------------------------------------------------- payload frames --


def test_send_exposes_the_span_verbatim_and_verifies_the_checksum(mode: str) -> None:
    (frame,) = feed(mode, p.new_send(0, 1, SPAN))
    assert frame.type == CommandType.SEND
    assert isinstance(frame.headers_and_payload, memoryview)
    assert bytes(frame.headers_and_payload) == SPAN
    assert frame.checksum_ok is True


def test_send_without_checksum(mode: str) -> None:
    no_crc = span(METADATA, b"x", checksum=False)
    (frame,) = feed(mode, p.new_send(0, 1, no_crc))
    assert frame.checksum_ok is None
    assert bytes(frame.headers_and_payload) == no_crc


def test_crc_mismatch_is_reported_not_raised(mode: str) -> None:
    corrupt = bytearray(SPAN)
    corrupt[-1] ^= 0xFF  # flip a payload byte
    frames = feed(mode, p.new_send(0, 1, bytes(corrupt)) + PING)
    assert [f.type for f in frames] == [CommandType.SEND, CommandType.PING]  # connection goes on
    assert frames[0].checksum_ok is False
    assert bytes(frames[0].headers_and_payload) == bytes(corrupt)


def test_message_with_broker_entry_metadata_then_checksum(mode: str) -> None:
    bem = f_varint(1, 1_700_000_000_123) + f_varint(2, 41)
    stored = struct.pack(">HI", 0x0E02, len(bem)) + bem + SPAN
    (frame,) = feed(mode, b"".join(p.new_message(0, 7, 3, -1, stored)))
    assert frame.checksum_ok is True
    parsed = p.parse_headers_and_payload(frame.headers_and_payload)
    assert parsed.broker_entry_metadata.index == 41
    assert bytes(parsed.payload) == b"payload bytes"


def test_empty_payload_is_valid(mode: str) -> None:
    (frame,) = feed(mode, p.new_send(0, 1, span(METADATA, b"")))
    assert frame.checksum_ok is True


def test_payload_view_survives_later_receives_and_buffer_compaction() -> None:
    decoder = FrameDecoder()
    payload = bytes(range(256)) * 8
    decoder.receive_data(p.new_send(0, 1, span(METADATA, payload)))
    kept = decoder.next_frame().headers_and_payload
    snapshot = bytes(kept)
    for _ in range(5):  # > 64 KiB consumed each round: the decoder drops its consumed prefix
        decoder.receive_data(p.new_send(0, 2, span(METADATA, b"\xee" * 70_000)) + PING[:5])
        assert decoder.next_frame().type == CommandType.SEND
        decoder.receive_data(PING[5:])
        assert decoder.next_frame().type == CommandType.PING
    assert bytes(kept) == snapshot


def test_multi_mib_frame_in_64_kib_pieces() -> None:
    payload = bytes(range(256)) * (5 * 4096)  # 5 MiB
    data = p.new_send(0, 1, span(METADATA, payload))
    decoder = FrameDecoder()
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    for chunk in chunks[:-1]:
        decoder.receive_data(chunk)
        assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(chunks[-1])
    frame = decoder.next_frame()
    assert frame.checksum_ok is True
    assert p.parse_headers_and_payload(frame.headers_and_payload).payload == payload


# ----------------------------------------------------------------------------------------- limits --


def test_frame_too_large_raises_as_soon_as_the_length_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(struct.pack(">I", 1025))
    with pytest.raises(FrameTooLargeError) as info:
        decoder.next_frame()
    assert (info.value.size, info.value.max_size) == (1025, 1024)


def test_frame_at_the_limit_is_accepted(mode: str) -> None:
    frame = p.new_send(0, 1, span(METADATA, b"z" * 100))
    (decoded,) = feed(mode, frame, max_frame_size=len(frame) - 4)
    assert decoded.checksum_ok


def test_frame_one_byte_over_the_limit(mode: str) -> None:
    frame = p.new_send(0, 1, span(METADATA, b"z" * 100))
    with pytest.raises(FrameTooLargeError):
        feed(mode, frame, max_frame_size=len(frame) - 5)


def test_default_limit_is_max_message_size_plus_padding() -> None:
    assert FrameDecoder().max_frame_size == 5 * 1024 * 1024 + 10 * 1024
    with pytest.raises(LocalProtocolError):
        FrameDecoder(max_frame_size=4)


# ------------------------------------------------------------------------------ malformed frames --

SEND_CMD = base_command(6, f_varint(1, 0) + f_varint(2, 0))
MESSAGE_CMD = base_command(9, f_varint(1, 0) + f_bytes(2, f_varint(1, 1) + f_varint(2, 1)))
RECEIPT_WITHOUT_ENTRY_ID = base_command(7, f_varint(1, 0) + f_varint(2, 0) + f_bytes(3, f_varint(1, 7)))

MALFORMED = {
    "total_size_below_4": struct.pack(">I", 3) + b"\0\0\0",
    "command_size_exceeds_frame": struct.pack(">II", 6, 5) + b"\x08\x12",
    "unparsable_command": simple_frame(b"\xff\xff\xff"),
    "empty_command": simple_frame(b""),
    "unknown_type": simple_frame(f_varint(1, 42) + f_bytes(42, b"")),
    "type_without_sub_message": simple_frame(f_varint(1, 18)),
    "type_with_other_sub_message": simple_frame(f_varint(1, 18) + f_bytes(19, b"")),
    "missing_required_field": simple_frame(base_command(11, f_varint(1, 0))),  # FLOW without permits
    "missing_nested_required_field": simple_frame(RECEIPT_WITHOUT_ENTRY_ID),
    "invalid_utf8_string": simple_frame(base_command(23, f_bytes(1, b"persistent://\xff") + f_varint(2, 1))),
    "bytes_after_simple_command": simple_frame(base_command(18, b"") + b"\x00"),
    "send_without_span": simple_frame(SEND_CMD),
    "metadata_size_past_frame": payload_frame(SEND_CMD, b"\0\0\0\x09abc"),
    "checksum_header_truncated": payload_frame(SEND_CMD, b"\x0e\x01\0\0"),
    "no_metadata_size_after_checksum": payload_frame(SEND_CMD, b"\x0e\x01\0\0\0\0\0"),
    "broker_entry_metadata_past_frame": payload_frame(MESSAGE_CMD, b"\x0e\x02\0\0\0\x10"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_frames_raise(name: str, mode: str) -> None:
    with pytest.raises(MalformedFrameError):
        feed(mode, MALFORMED[name])


@pytest.mark.parametrize("name", ["unparsable_command", "metadata_size_past_frame"])
def test_decoder_stays_in_the_error_state(name: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(MALFORMED[name] + PING)
    with pytest.raises(MalformedFrameError) as first:
        decoder.next_frame()
    assert decoder.errored
    with pytest.raises(MalformedFrameError) as again:
        decoder.next_frame()
    assert again.value is first.value
    with pytest.raises(MalformedFrameError):
        decoder.receive_data(PING)


def test_end_of_stream_mid_frame_raises() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(PING + PING[:6])
    decoder.receive_data(b"")  # peer closed
    assert decoder.next_frame().type == CommandType.PING
    with pytest.raises(MalformedFrameError, match="ended in the middle"):
        decoder.next_frame()


def test_end_of_stream_between_frames_is_clean() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(PING)
    decoder.receive_data(b"")
    assert decoder.next_frame().type == CommandType.PING
    assert decoder.next_frame() is NEED_DATA
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(PING)


def test_all_decoder_errors_are_remote_protocol_errors() -> None:
    assert issubclass(FrameTooLargeError, RemoteProtocolError)
    assert issubclass(MalformedFrameError, RemoteProtocolError)
