"""The HA codec: round trips, random splits, limits checked before allocation, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.replication.config import MAX_TRANSFER_BODY_SIZE
from quasar.replication.errors import HAProtocolError
from quasar.replication.ha_protocol import (
    HA_MAGIC,
    MAX_EPOCH_ENTRIES,
    NEED_DATA,
    TRANSFER_HEADER_SIZE,
    Handshake,
    HandshakeStatus,
    Hello,
    MasterSideDecoder,
    Report,
    SlaveSideDecoder,
    Transfer,
    encode_handshake,
    encode_hello,
    encode_report,
    encode_transfer,
)

I64 = st.integers(0, 2**63 - 1)
I32 = st.integers(0, 2**31 - 1)
EPOCHS = st.lists(st.tuples(I32, I64), max_size=20).map(tuple)
GROUPS = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)

hellos = st.builds(
    Hello, group=GROUPS, broker_id=st.integers(-(2**31), 2**31 - 1), max_offset=I64, epochs=EPOCHS
)
handshakes = st.builds(
    Handshake, status=st.sampled_from(HandshakeStatus), master_epoch=I32, max_offset=I64, epochs=EPOCHS
)
transfers = st.builds(
    Transfer, offset=I64, epoch=I32, epoch_start=I64, confirm_offset=I64, body=st.binary(max_size=300)
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return [p for p in pieces if p]


def drain(decoder: MasterSideDecoder | SlaveSideDecoder, chunks: list[bytes]) -> list[object]:
    frames: list[object] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    return frames


@settings(max_examples=150, deadline=None)
@given(hellos, st.lists(I64, max_size=5), st.lists(st.integers(0, 10_000), max_size=8))
def test_master_side_round_trips_under_any_split(hello: Hello, reports: list[int], cuts: list[int]) -> None:
    data = encode_hello(hello) + b"".join(encode_report(r) for r in reports)
    frames = drain(MasterSideDecoder(), split(data, cuts))
    assert frames == [hello, *(Report(r) for r in reports)]


@settings(max_examples=150, deadline=None)
@given(handshakes, st.lists(transfers, max_size=4), st.lists(st.integers(0, 10_000), max_size=8))
def test_slave_side_round_trips_under_any_split(
    handshake: Handshake, frames_in: list[Transfer], cuts: list[int]
) -> None:
    data = encode_handshake(handshake) + b"".join(encode_transfer(t) for t in frames_in)
    frames = drain(SlaveSideDecoder(), split(data, cuts))
    assert frames == [handshake, *frames_in]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_ha_protocol_error(data: bytes) -> None:
    for decoder in (MasterSideDecoder(), SlaveSideDecoder()):
        try:
            drain(decoder, [data])
            decoder.receive_data(b"")
            decoder.next_frame()
        except HAProtocolError:
            pass


def test_byte_at_a_time_then_trailing_bytes_stay_buffered() -> None:
    hello = Hello(group="g", broker_id=1, max_offset=42, epochs=((1, 0), (3, 100)))
    decoder = MasterSideDecoder()
    data = encode_hello(hello)
    for i, byte in enumerate(data):
        decoder.receive_data(bytes([byte]))
        frame = decoder.next_frame()
        assert (frame is NEED_DATA) == (i < len(data) - 1)
    assert frame == hello
    decoder.receive_data(encode_report(7)[:5])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_size == 5


def test_transfer_header_is_32_bytes_and_heartbeat_is_empty() -> None:
    assert TRANSFER_HEADER_SIZE == 32
    heartbeat = Transfer(offset=5, epoch=1, epoch_start=0, confirm_offset=3)
    data = encode_transfer(heartbeat)
    assert len(data) == 32
    assert struct.unpack(">qiqqi", data) == (5, 1, 0, 3, 0)
    assert heartbeat.end_offset == 5


def test_bad_magic_is_an_error_and_latches() -> None:
    decoder = MasterSideDecoder()
    decoder.receive_data(b"QHB")
    with pytest.raises(HAProtocolError, match="magic"):
        decoder.next_frame()
    with pytest.raises(HAProtocolError):
        decoder.next_frame()
    with pytest.raises(HAProtocolError):
        decoder.receive_data(b"x")


def test_limits_are_checked_before_the_bytes_arrive() -> None:
    decoder = MasterSideDecoder()
    decoder.receive_data(HA_MAGIC + struct.pack(">H", 256))
    with pytest.raises(HAProtocolError, match="group name"):
        decoder.next_frame()

    decoder = MasterSideDecoder()
    decoder.receive_data(
        HA_MAGIC + struct.pack(">H", 1) + b"g" + struct.pack(">iqI", 1, 0, MAX_EPOCH_ENTRIES + 1)
    )
    with pytest.raises(HAProtocolError, match="epoch entries"):
        decoder.next_frame()

    slave = SlaveSideDecoder()
    slave.receive_data(encode_handshake(Handshake(status=HandshakeStatus.OK, master_epoch=1, max_offset=0)))
    assert isinstance(slave.next_frame(), Handshake)
    slave.receive_data(struct.pack(">qiqqi", 0, 1, 0, 0, MAX_TRANSFER_BODY_SIZE + 1))
    with pytest.raises(HAProtocolError, match="body"):
        slave.next_frame()


def test_malformed_fields() -> None:
    decoder = MasterSideDecoder()
    decoder.receive_data(HA_MAGIC + struct.pack(">H", 2) + b"\xff\xfe" + struct.pack(">iqI", 1, 0, 0))
    with pytest.raises(HAProtocolError, match="UTF-8"):
        decoder.next_frame()

    slave = SlaveSideDecoder()
    slave.receive_data(HA_MAGIC + struct.pack(">iiqI", 9, 1, 0, 0))
    with pytest.raises(HAProtocolError, match="status"):
        slave.next_frame()

    master = MasterSideDecoder()
    master.receive_data(encode_hello(Hello(group="g", broker_id=1, max_offset=0)) + struct.pack(">q", -1))
    assert isinstance(master.next_frame(), Hello)
    with pytest.raises(HAProtocolError, match="negative"):
        master.next_frame()


def test_end_of_stream_mid_frame() -> None:
    decoder = SlaveSideDecoder()
    decoder.receive_data(HA_MAGIC + b"\x00")
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(b"")
    with pytest.raises(HAProtocolError, match="ended"):
        decoder.next_frame()
    clean = MasterSideDecoder()
    clean.receive_data(b"")
    assert clean.next_frame() is NEED_DATA


def test_constructors_validate() -> None:
    with pytest.raises(ValueError):
        Hello(group="x" * 256, broker_id=1, max_offset=0)
    with pytest.raises(ValueError):
        Hello(group="g", broker_id=1, max_offset=-1)
    with pytest.raises(ValueError):
        Handshake(status=HandshakeStatus.OK, master_epoch=1, max_offset=0, epochs=((1, -1),))
