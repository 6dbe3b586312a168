"""The SEND fast path: the compiled ``_frames_c`` and its pure-Python twin ``_frames_py`` give the same answer
for every input, and the decoder gives the same frames and errors with the fast path as without it."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.protocol import FrameDecoder, SendFrame, _frames_py, commands
from quasar.protocol import decoder as decoder_module
from quasar.protocol.errors import ProtocolError
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.metadata import num_messages, parse_headers_and_payload
from quasar.protocol.pb import BaseCommand, MessageMetadata
from quasar.protocol.requests import new_send

_frames_c = pytest.importorskip("quasar.protocol._frames_c", reason="the compiled twin is not built")

TWINS = (_frames_c, _frames_py)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=12)


def _offsets(frame: bytes) -> tuple[int, int, int]:
    """(command_start, command_end, frame_end) of a whole frame, as the decoder computes them."""
    command_size = struct.unpack_from(">I", frame, 4)[0]
    return 8, 8 + command_size, len(frame)


@st.composite
def metadata(draw: st.DrawFn) -> MessageMetadata:
    md = MessageMetadata(producer_name=draw(TEXT), sequence_id=draw(U64), publish_time=draw(U64))
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        md.partition_key = draw(TEXT)
    for key, value in draw(st.lists(st.tuples(TEXT, TEXT), max_size=3)):
        md.properties.add(key=key, value=value)
    if draw(st.booleans()):
        md.compression = draw(st.sampled_from([0, 1, 2, 3, 4]))
        md.uncompressed_size = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        md.event_time = draw(U64)
    if draw(st.booleans()):
        md.ordering_key = draw(st.binary(max_size=8))
    if draw(st.booleans()):
        md.uuid = draw(TEXT)
        md.chunk_id = draw(st.integers(0, 100))
        md.num_chunks_from_msg = draw(st.integers(1, 100))
        md.total_chunk_msg_size = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        md.null_value = draw(st.booleans())
    if draw(st.booleans()):
        md.replicate_to.extend(draw(st.lists(TEXT, max_size=2)))
    return md


@st.composite
def send_frames(draw: st.DrawFn) -> bytes:
    md = draw(metadata())
    payload = draw(st.binary(max_size=64))
    checksum = draw(st.booleans())
    highest = draw(st.one_of(st.none(), U64))
    return new_send(
        draw(U64),
        draw(U64),
        encode_headers_and_payload(md, payload, checksum=checksum),
        draw(st.one_of(st.none(), st.integers(0, 1000))),
        highest_sequence_id=highest,
        is_chunk=draw(st.booleans()),
    )


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid SEND with a few bytes changed, inserted or cut (the length prefixes are kept consistent with
    the new size half of the time, so the damage reaches the parsers)."""
    frame = bytearray(draw(send_frames()))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "insert", "cut"]))
        at = draw(st.integers(8, max(8, len(frame) - 1)))
        if action == "flip" and at < len(frame):
            frame[at] ^= draw(st.integers(1, 255))
        elif action == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif at < len(frame):
            del frame[at : at + draw(st.integers(1, 4))]
    if draw(st.booleans()):
        struct.pack_into(">I", frame, 0, len(frame) - 4)
    return bytes(frame)


def _parse(twin: Any, frame: bytes) -> Any:
    start, end, frame_end = _offsets(frame)
    if end > frame_end:
        return "bad offsets"
    return twin.parse_send(frame, start, end, frame_end)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(send_frames())
def test_twins_agree_on_valid_sends_and_read_what_upb_reads(frame: bytes) -> None:
    results = [_parse(twin, frame) for twin in TWINS]
    assert results[0] == results[1]
    fields = results[0]
    assert fields is not None, "a plain SEND built by new_send must take the fast path"
    command = BaseCommand.FromString(frame[8 : _offsets(frame)[1]]).send
    producer_id, sequence_id, highest, is_chunk, _messages, checksum_ok = fields
    assert (producer_id, sequence_id, highest, is_chunk) == (
        command.producer_id,
        command.sequence_id,
        command.highest_sequence_id,
        command.is_chunk,
    )
    assert checksum_ok in (True, None)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), st.binary(min_size=8, max_size=80)))
def test_twins_agree_on_damaged_and_random_bytes(frame: bytes) -> None:
    assert _parse(_frames_c, frame) == _parse(_frames_py, frame)


def _decode_all(data: bytes) -> list[Any]:
    """Frames (as comparable tuples) or the error class the decoder reaches on ``data``."""
    decoder = FrameDecoder()
    out: list[Any] = []
    try:
        decoder.receive_data(data)
        decoder.receive_data(b"")
        while (frame := decoder.next_frame()) is not decoder_module.NEED_DATA:
            assert frame is not decoder_module.NEED_DATA
            command = frame.command
            out.append(
                (
                    frame.type,
                    command.SerializeToString(),
                    bytes(frame.headers_and_payload or b""),
                    frame.checksum_ok,
                )
            )
    except ProtocolError as exc:
        out.append(type(exc))
    return out


class _Declines:
    @staticmethod
    def parse_send(*_args: object) -> None:
        return None


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(send_frames(), mutated()))
def test_decoder_gives_the_same_frames_and_errors_with_and_without_the_fast_path(frame: bytes) -> None:
    fast = _decode_all(frame)
    real = decoder_module._frames
    decoder_module._frames = _Declines
    try:
        generic = _decode_all(frame)
    finally:
        decoder_module._frames = real
    assert fast == generic


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(send_frames())
def test_a_fast_send_frame_carries_the_generic_paths_facts(frame: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    fast = decoder.next_frame()
    assert isinstance(fast, SendFrame)
    parsed = parse_headers_and_payload(fast.headers_and_payload)
    assert fast.num_messages == num_messages(parsed.metadata)
    send = fast.command.send
    assert fast.highest_sequence_id == (
        send.highest_sequence_id if send.HasField("highest_sequence_id") else 0
    )


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_bad_checksum_is_reported_not_declined(twin: Any) -> None:
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    frame = bytearray(new_send(1, 1, encode_headers_and_payload(md, b"payload")))
    frame[-1] ^= 0xFF
    assert _parse(twin, bytes(frame)) == (1, 1, 0, False, 1, False)


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_large_payload_checksum(twin: Any) -> None:
    """Over 64 KiB the compiled CRC runs with the GIL released; the result is the same."""
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=7)
    frame = new_send(3, 4, encode_headers_and_payload(md, bytes(range(256)) * 1024))
    assert _parse(twin, frame) == (3, 4, 0, False, 7, True)


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_other_commands_and_unhandled_fields_decline(twin: Any) -> None:
    assert _parse(twin, commands.new_flow(1, 100)) is None
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, txnid_least_bits=5)
    assert _parse(twin, new_send(1, 1, encode_headers_and_payload(md, b"x"))) is None
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    md.properties.add(key="k", value="v")
    assert _parse(twin, new_send(1, 1, encode_headers_and_payload(md, b"x"))) == (1, 1, 0, False, 1, True)
    md = MessageMetadata(producer_name="p", publish_time=2)  # sequence_id missing: the generic path refuses
    raw = md.SerializePartialToString()
    assert _parse(twin, new_send(1, 1, encode_headers_and_payload(raw, b"x"))) is None


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_invalid_utf8_in_a_string_declines(twin: Any) -> None:
    md = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, partition_key="ab")
    raw = md.SerializeToString().replace(b"ab", b"\xc3\x28")
    assert _parse(twin, new_send(1, 1, encode_headers_and_payload(raw, b"x"))) is None
    surrogate = md.SerializeToString().replace(b"\x32\x02ab", b"\x32\x03\xed\xa0\x80")
    assert _parse(twin, new_send(1, 1, encode_headers_and_payload(surrogate, b"x"))) is None


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
@pytest.mark.parametrize("offsets", [(-1, 2, 3), (3, 2, 4), (0, 1, 10**9), (0, 5, 4)])
def test_offsets_outside_the_buffer_raise_value_error(twin: Any, offsets: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        twin.parse_send(b"abcdefgh", *offsets)


def test_decoder_returns_send_frames_whose_command_parses_lazily() -> None:
    md = MessageMetadata(producer_name="p", sequence_id=9, publish_time=2, num_messages_in_batch=4)
    decoder = FrameDecoder()
    decoder.receive_data(new_send(5, 9, encode_headers_and_payload(md, b"abc"), 4, highest_sequence_id=12))
    frame = decoder.next_frame()
    assert isinstance(frame, SendFrame)
    assert (frame.producer_id, frame.sequence_id, frame.highest_sequence_id, frame.num_messages) == (
        5,
        9,
        12,
        4,
    )
    assert frame.body.producer_id == 5 and frame.command.send.num_messages == 4


IDS = st.integers(-(2**63), 2**64 - 1)


@settings(max_examples=500)
@given(U64, U64, IDS, IDS, st.one_of(st.none(), U64))
def test_send_receipt_twins_write_the_protobuf_bytes(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int | None
) -> None:
    frame = _frames_c.encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)
    assert frame == _frames_py.encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    receipt = decoder.next_frame().command.send_receipt  # type: ignore[union-attr]
    assert (receipt.producer_id, receipt.sequence_id, receipt.highest_sequence_id) == (
        producer_id,
        sequence_id,
        highest or 0,
    )
    assert receipt.HasField("highest_sequence_id") is (highest is not None)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (ledger_id % 2**64, entry_id % 2**64)


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
@pytest.mark.parametrize(
    "args",
    [(-1, 0, 0, 0, None), (2**64, 0, 0, 0, None), (0, 0, -(2**63) - 1, 0, None), (0, 0, 0, 0, -1)],
)
def test_send_receipt_values_out_of_range_raise_value_error(twin: Any, args: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        twin.encode_send_receipt(*args)


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_send_receipt_refuses_a_non_int(twin: Any) -> None:
    with pytest.raises(TypeError):
        twin.encode_send_receipt(1, "2", 3, 4, None)


@settings(max_examples=500)
@given(
    U64,
    IDS,
    IDS,
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-5, 2**32 - 1),
    st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20)),
    st.one_of(st.none(), U64),
    st.integers(0, 2**20),
)
def test_message_header_twins_write_the_protobuf_bytes(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery: int,
    ack_set: list[int] | None,
    epoch: int | None,
    payload_size: int,
) -> None:
    args = (consumer_id, ledger_id, entry_id, partition, redelivery, ack_set, epoch, payload_size)
    header = _frames_c.encode_message_header(*args)
    assert header == _frames_py.encode_message_header(*args)
    total, command_size = struct.unpack_from(">II", header)
    assert (total, len(header)) == (4 + command_size + payload_size, 8 + command_size)
    message = BaseCommand.FromString(header[8:]).message
    assert message.consumer_id == consumer_id and message.message_id.partition == partition
    assert message.redelivery_count == max(redelivery, 0) and list(message.ack_set) == (ack_set or [])


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
@pytest.mark.parametrize(
    "args",
    [
        (1, 0, 0, 2**31, 0, None, None, 0),  # partition past int32
        (1, 0, 0, 0, 2**32, None, None, 0),  # redelivery count past uint32
        (1, 0, 0, 0, 0, [2**63], None, 0),  # an ack-set word past int64
        (1, 0, 0, 0, 0, [0] * 65537, None, 0),  # more words than any batch needs
        (1, 0, 0, 0, 0, None, -1, 0),  # a negative epoch
        (1, 0, 0, 0, 0, None, None, 2**32),  # a frame past 4 GiB
    ],
)
def test_message_header_values_out_of_range_raise_value_error(twin: Any, args: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        twin.encode_message_header(*args)


def test_new_message_is_the_header_and_the_stored_bytes_unchanged() -> None:
    stored = memoryview(
        encode_headers_and_payload(MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"x")
    )
    parts = commands.new_message(7, 3, 4, -1, stored, redelivery_count=2, ack_set=[5])
    assert parts[1] is stored
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(parts))
    frame = decoder.next_frame()
    message = frame.command.message  # type: ignore[union-attr]
    assert (message.consumer_id, message.redelivery_count, list(message.ack_set)) == (7, 2, [5])
    assert (message.message_id.ledgerId, message.message_id.entryId, message.message_id.partition) == (
        3,
        4,
        -1,
    )
    assert bytes(frame.headers_and_payload) == bytes(stored)  # type: ignore[union-attr, arg-type]


def _dispatch_info(twin: Any, entry: bytes) -> Any:
    try:
        return twin.entry_dispatch_info(entry)
    except ValueError:
        return ValueError


@st.composite
def stored_entries(draw: st.DrawFn) -> bytes:
    md = draw(metadata())
    if draw(st.booleans()):
        md.deliver_at_time = draw(st.integers(-(2**63), 2**63 - 1))
    return encode_headers_and_payload(md, draw(st.binary(max_size=32)), checksum=draw(st.booleans()))


@settings(max_examples=400)
@given(stored_entries())
def test_entry_dispatch_info_twins_read_what_protobuf_reads(entry: bytes) -> None:
    parsed = parse_headers_and_payload(entry).metadata
    expected = (num_messages(parsed), parsed.deliver_at_time if parsed.HasField("deliver_at_time") else 0)
    assert _dispatch_info(_frames_c, entry) == _dispatch_info(_frames_py, entry) == expected


@settings(max_examples=1500)
@given(st.one_of(stored_entries().map(lambda e: e[: len(e) // 2]), st.binary(max_size=60)))
def test_entry_dispatch_info_twins_agree_on_damaged_and_random_bytes(entry: bytes) -> None:
    assert _dispatch_info(_frames_c, entry) == _dispatch_info(_frames_py, entry)
