"""Hypothesis versions of the fuzz harnesses in fuzz/ (bounded, fast): random streams and random commands into
the decoder, random MessageMetadata against the readers of stored entries, and the regressions the atheris
runs found (each with its minimal input)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.protocol import (
    NEED_DATA,
    FrameDecoder,
    SendFrame,
    _frames_py,
    commands,
    encode_headers_and_payload,
    num_messages,
    parse_headers_and_payload,
    requests,
)
from quasar.protocol import decoder as decoder_module
from quasar.protocol.errors import MalformedFrameError, ProtocolError, RemoteProtocolError
from quasar.protocol.frame import FRAME_HEADER
from quasar.protocol.pb import MessageMetadata

_frames_c = pytest.importorskip("quasar.protocol._frames_c", reason="the compiled twin is not built")

TWINS = (_frames_c, _frames_py)
fuzzing = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID_COMMANDS = [
    frame[8 : 8 + struct.unpack_from(">I", frame, 4)[0]]
    for frame in (
        requests.new_connect("c"),
        requests.new_lookup("persistent://public/default/t", 1),
        requests.new_producer("persistent://public/default/t", 1, 2),
        requests.new_flow(1, 10),
        requests.new_send(
            1,
            2,
            encode_headers_and_payload(
                MessageMetadata(producer_name="p", sequence_id=2, publish_time=3), b"x"
            ),
        ),
    )
]


def _valid_metadata() -> bytes:
    return MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """One of ``seeds`` with a few bytes flipped, inserted or cut."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "insert", "cut"]))
        if action == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at : at + draw(st.integers(1, 4))]
    return bytes(data)


def framed(command: bytes, rest: bytes = b"") -> bytes:
    """``command`` and ``rest`` behind correct length prefixes."""
    return FRAME_HEADER.pack(4 + len(command) + len(rest), len(command)) + command + rest


COMMANDS = st.one_of(st.binary(max_size=64), mutated(VALID_COMMANDS))
STREAMS = st.one_of(
    st.binary(max_size=256),
    st.lists(st.tuples(COMMANDS, st.binary(max_size=16)), max_size=4).map(
        lambda parts: b"".join(framed(command, rest) for command, rest in parts)
    ),
)


def _drain(decoder: FrameDecoder) -> list[Any]:
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


@fuzzing
@given(STREAMS, st.integers(1, 64))
def test_random_streams_give_frames_or_a_latched_remote_protocol_error(stream: bytes, step: int) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    try:
        for at in range(0, len(stream), step):
            decoder.receive_data(stream[at : at + step])
            for frame in _drain(decoder):
                assert frame.body.IsInitialized()  # the sub-message for its type is there, complete
        decoder.receive_data(b"")
        _drain(decoder)
    except RemoteProtocolError as exc:
        with pytest.raises(type(exc)) as again:
            decoder.next_frame()
        assert str(again.value) == str(exc) and decoder.errored


#: top-level MessageMetadata fields: num_messages_in_batch, deliver_at_time, partition_key, an unknown fixed64,
#: an empty group and a group holding a varint (numbered 4 and 11), a lone end-group tag
FIELDS = [
    b"\x58\x05",
    b"\x98\x01\x07",
    b"\x32\x01k",
    b"\xf9\x07" + bytes(8),
    b"\x23\x24",
    b"\x5b\x08\x01\x5c",
    b"\x24",
]
METADATA_TAILS = st.one_of(
    st.binary(max_size=48), st.lists(st.sampled_from(FIELDS), max_size=4).map(b"".join)
)


@fuzzing
@given(METADATA_TAILS)
def test_random_metadata_is_read_alike_by_protobuf_and_the_entry_readers(extra: bytes) -> None:
    """What ``parse_headers_and_payload`` accepts, both twins of ``entry_dispatch_info`` read with the same
    message count and delivery time; what it refuses never comes out of the SEND fast path."""
    metadata = _valid_metadata() + extra
    span = encode_headers_and_payload(metadata, b"payload")
    frame = framed(_send_command(), span)
    try:
        parsed = parse_headers_and_payload(span)
    except MalformedFrameError:
        for twin in TWINS:
            assert twin.parse_send(frame, 8, 8 + len(_send_command()), len(frame)) is None
        return
    expected = (num_messages(parsed.metadata), parsed.metadata.deliver_at_time)
    assert [twin.entry_dispatch_info(span) for twin in TWINS] == [expected, expected]


def _send_command() -> bytes:
    frame = requests.new_send(1, 1, b"\x00\x00\x00\x00")
    return frame[8 : 8 + struct.unpack_from(">I", frame, 4)[0]]


@pytest.mark.parametrize(
    "group", [b"\x23\x24", b"\x7b\x7c", b"\x23\x08\x01\x24"], ids=["4", "15", "4-nested"]
)
def test_metadata_with_a_group_is_refused_as_the_entry_readers_refuse_it(group: bytes) -> None:
    """Found by fuzz/fuzz_commands.py: upb keeps a group (wire type 3/4) as an unknown field, so such metadata
    was accepted at publish, stored, and then every dispatch of its subscription failed ('dispatch failed'):
    ``entry_dispatch_info`` refuses groups. The minimal input: a valid MessageMetadata plus ``0x23 0x24`` (an
    empty group numbered 4)."""
    span = encode_headers_and_payload(_valid_metadata() + group, b"x")
    with pytest.raises(MalformedFrameError, match="group"):
        parse_headers_and_payload(span)
    for twin in TWINS:
        with pytest.raises(ValueError, match="malformed MessageMetadata"):
            twin.entry_dispatch_info(span)
    frame = framed(_send_command(), span)
    real = decoder_module._frames
    for twin in TWINS:
        decoder_module._frames = twin
        try:
            decoder = FrameDecoder()
            decoder.receive_data(frame)
            decoded = decoder.next_frame()
        finally:
            decoder_module._frames = real
        assert decoded is not NEED_DATA and not isinstance(decoded, SendFrame)  # left to the SEND handler


@fuzzing
@given(COMMANDS)
def test_random_commands_parse_or_raise_protocol_error(command: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(framed(command, b""))
    try:
        frames = _drain(decoder)
    except ProtocolError:
        return
    assert len(frames) == 1 and frames[0].body.IsInitialized()


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_a_send_carrying_broker_entry_metadata_is_malformed(twin: Any) -> None:
    """Only a broker adds broker entry metadata (0x0e02), to MESSAGE. A SEND carrying one was stored as sent
    and reached consumers as if the broker had stamped it (here broker_timestamp 42, index 7); now the decoder
    refuses the frame, with the fast path (which declines it) as without."""
    bem = bytes.fromhex("082a1007")  # BrokerEntryMetadata{broker_timestamp: 42, index: 7}
    span = (
        b"\x0e\x02" + struct.pack(">I", len(bem)) + bem + encode_headers_and_payload(_valid_metadata(), b"x")
    )
    real = decoder_module._frames
    decoder_module._frames = twin
    try:
        decoder = FrameDecoder()
        decoder.receive_data(framed(_send_command(), span))
        with pytest.raises(MalformedFrameError, match="SEND with broker entry metadata"):
            decoder.next_frame()
    finally:
        decoder_module._frames = real
    message = b"".join(commands.new_message(1, 2, 3, -1, span))
    decoder = FrameDecoder()
    decoder.receive_data(message)
    assert decoder.next_frame() is not NEED_DATA  # a MESSAGE still carries it
