"""Hypothesis: encode -> decode round-trips for commands and payload frames, and "arbitrary bytes either
decode or raise RemoteProtocolError, nothing else" for the decoder and the payload parsers (hpack / h11 fuzz
invariant)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from quasar import protocol as p
from quasar.protocol import (
    NEED_DATA,
    CompressionError,
    CompressionType,
    FrameDecoder,
    MalformedBatchError,
    MalformedFrameError,
    MessageId,
    RemoteProtocolError,
    ServerError,
)
from quasar.protocol.pb import KeyValue, MessageMetadata, SingleMessageMetadata

from ._helpers import MODES, base_command, f_varint, feed, payload_frame, simple_frame

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)  # UTF-8 encodable
IDS = st.lists(st.tuples(I64, I64), max_size=5)


def decode_one(data: bytes, mode: str) -> p.Frame:
    (frame,) = feed(mode, data)
    return frame


def split_feed(data: bytes, cuts: list[int]) -> list[p.Frame]:
    decoder = FrameDecoder()
    frames = []
    previous = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        if cut > previous:  # b"" would mean end of stream
            decoder.receive_data(data[previous:cut])
            previous = cut
        while (frame := decoder.next_frame()) is not NEED_DATA:
            frames.append(frame)
    return frames


# ------------------------------------------------------------------------------- command round-trips --


@given(producer_id=U64, sequence_id=U64, ledger_id=I64, entry_id=I64, mode=st.sampled_from(MODES))
def test_send_receipt_round_trip(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, mode: str
) -> None:
    body = decode_one(p.new_send_receipt(producer_id, sequence_id, ledger_id, entry_id), mode).body
    assert (body.producer_id, body.sequence_id) == (producer_id, sequence_id)
    assert MessageId.from_pb(body.message_id) == MessageId(ledger_id, entry_id)


@given(request_id=I64, error=st.sampled_from(ServerError), message=TEXT)
def test_error_round_trip(request_id: int, error: ServerError, message: str) -> None:
    body = decode_one(p.new_error(request_id, error, message), "whole").body
    assert body.request_id == request_id % 2**64
    assert (body.error, body.message) == (error, message)


@given(consumer_id=U64, ids=IDS, ack_type=st.sampled_from(p.AckType), request_id=st.none() | U64)
def test_ack_round_trip(
    consumer_id: int, ids: list[tuple[int, int]], ack_type: p.AckType, request_id: int | None
) -> None:
    body = decode_one(p.new_ack(consumer_id, ids, ack_type, request_id), "whole").body
    assert [(MessageId.from_pb(m).ledger_id, MessageId.from_pb(m).entry_id) for m in body.message_id] == ids
    assert body.ack_type == ack_type
    assert body.HasField("request_id") == (request_id is not None)


@given(consumer_id=U64, permits=U32)
def test_flow_round_trip(consumer_id: int, permits: int) -> None:
    body = decode_one(p.new_flow(consumer_id, permits), "whole").body
    assert (body.consumer_id, body.messagePermits) == (consumer_id, permits)


@given(request_id=U64, topics=st.lists(TEXT, max_size=6))
def test_topics_response_round_trip(request_id: int, topics: list[str]) -> None:
    body = decode_one(p.new_get_topics_of_namespace_response(request_id, topics), "trailing").body
    assert list(body.topics) == topics


@given(
    topic=TEXT,
    producer_id=U64,
    request_id=U64,
    name=st.none() | TEXT,
    properties=st.dictionaries(TEXT, TEXT, max_size=3),
    epoch=U64,
)
def test_producer_round_trip(
    topic: str, producer_id: int, request_id: int, name: str | None, properties: dict[str, str], epoch: int
) -> None:
    body = decode_one(
        p.new_producer(topic, producer_id, request_id, producer_name=name, metadata=properties, epoch=epoch),
        "whole",
    ).body
    assert (body.topic, body.producer_id, body.request_id, body.epoch) == (
        topic,
        producer_id,
        request_id,
        epoch,
    )
    assert body.HasField("producer_name") == (name is not None)
    assert {kv.key: kv.value for kv in body.metadata} == properties


@given(
    consumer_id=U64,
    ledger_id=I64,
    entry_id=I64,
    partition=I32,
    redelivery_count=U32,
    ack_set=st.none() | st.lists(I64, max_size=4),
    payload=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
)
def test_message_round_trip(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    ack_set: list[int] | None,
    payload: bytes,
    cuts: list[int],
) -> None:
    metadata = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    stored = p.encode_headers_and_payload(metadata, payload)
    data = b"".join(
        p.new_message(
            consumer_id,
            ledger_id,
            entry_id,
            partition,
            stored,
            redelivery_count=redelivery_count,
            ack_set=ack_set,
        )
    )
    (frame,) = split_feed(data, cuts)
    body = frame.body
    assert MessageId.from_pb(body.message_id) == MessageId(ledger_id, entry_id, partition)
    assert body.redelivery_count == redelivery_count
    assert body.HasField("redelivery_count") == (redelivery_count > 0)
    assert list(body.ack_set) == (ack_set or [])
    assert frame.checksum_ok is True
    assert bytes(frame.headers_and_payload) == stored


# ------------------------------------------------------------------------------- payload round-trips --


@given(
    producer_name=TEXT,
    sequence_id=U64,
    publish_time=U64,
    properties=st.dictionaries(TEXT, TEXT, max_size=3),
    partition_key=st.none() | TEXT,
    num_messages=st.none() | st.integers(1, 1000),
    payload=st.binary(max_size=3000),
    checksum=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=5),
)
def test_send_payload_round_trip(
    producer_name: str,
    sequence_id: int,
    publish_time: int,
    properties: dict[str, str],
    partition_key: str | None,
    num_messages: int | None,
    payload: bytes,
    checksum: bool,
    cuts: list[int],
) -> None:
    metadata = MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time,
        properties=[KeyValue(key=k, value=v) for k, v in properties.items()],
    )
    if partition_key is not None:
        metadata.partition_key = partition_key
    if num_messages is not None:
        metadata.num_messages_in_batch = num_messages
    stored = p.encode_headers_and_payload(metadata, payload, checksum=checksum)
    frames = split_feed(p.new_send(7, sequence_id, stored, num_messages) + p.new_ping(), cuts)
    assert [f.type for f in frames] == [p.CommandType.SEND, p.CommandType.PING]
    frame = frames[0]
    assert frame.checksum_ok is (True if checksum else None)
    parsed = p.parse_headers_and_payload(frame.headers_and_payload)
    assert parsed.metadata == metadata
    assert parsed.payload == payload
    assert p.num_messages(parsed.metadata) == (num_messages or 1)
    assert (parsed.checksum is not None) == checksum


@given(st.lists(st.tuples(st.none() | TEXT, st.integers(0, 2**64 - 1), st.binary(max_size=100)), max_size=8))
def test_batch_round_trip(items: list[tuple[str | None, int, bytes]]) -> None:
    singles = []
    for key, sequence_id, payload in items:
        single = SingleMessageMetadata(sequence_id=sequence_id)
        if key is not None:
            single.partition_key = key
        singles.append((single, payload))
    decoded = p.decode_batch(p.encode_batch(singles), len(items))
    assert [
        (m.partition_key if m.HasField("partition_key") else None, m.sequence_id) for m, _ in decoded
    ] == [(key, seq) for key, seq, _ in items]
    assert [bytes(payload) for _, payload in decoded] == [payload for _, _, payload in items]


@given(kind=st.sampled_from(CompressionType), data=st.binary(max_size=5000))
def test_compression_round_trip(kind: CompressionType, data: bytes) -> None:
    assert p.decompress(kind, p.compress(kind, data), len(data)) == data


# ------------------------------------------------------------------ arbitrary input: decode or raise --

SEND_CMD = base_command(6, f_varint(1, 0) + f_varint(2, 0))
VALID_FRAMES = [
    p.new_ping(),
    p.new_connect("Pulsar-CPP-v4.2.0"),
    p.new_lookup("persistent://public/default/t", 2),
    p.new_ack(0, [(7, 0), (7, 1)], p.AckType.Individual),
    p.new_send(
        0,
        1,
        p.encode_headers_and_payload(MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"x"),
    ),
    b"".join(p.new_message(0, 7, 0, -1, b"\x0e\x02\0\0\0\x02\x10\x01\0\0\0\0")),
]


def decode_or_raise_remote(data: bytes) -> None:
    """Feed whole and byte by byte; only frames, NEED_DATA or RemoteProtocolError may come out."""
    for step in (len(data) or 1, 1):
        decoder = FrameDecoder(max_frame_size=1 << 16)
        try:
            for i in range(0, len(data), step):
                decoder.receive_data(data[i : i + step])
                while decoder.next_frame() is not NEED_DATA:
                    pass
        except RemoteProtocolError:
            pass


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_remote_protocol_error(data: bytes) -> None:
    decode_or_raise_remote(data)


@given(st.binary(max_size=200))
def test_arbitrary_command_bytes_decode_or_raise(data: bytes) -> None:
    decode_or_raise_remote(simple_frame(data))
    decode_or_raise_remote(payload_frame(SEND_CMD, data))


@given(
    frame=st.sampled_from(VALID_FRAMES),
    edits=st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_frames_decode_or_raise(frame: bytes, edits: list[tuple[int, int]]) -> None:
    mutated = bytearray(frame)
    for index, value in edits:
        mutated[index % len(mutated)] = value
    decode_or_raise_remote(bytes(mutated))


@given(st.binary(max_size=200))
def test_arbitrary_spans_parse_or_raise(data: bytes) -> None:
    for span in (data, struct.pack(">I", len(data)) + data):
        try:
            p.parse_headers_and_payload(span)
        except MalformedFrameError:
            pass


@given(st.binary(max_size=200), st.integers(-1, 10))
def test_arbitrary_batches_decode_or_raise(data: bytes, count: int) -> None:
    try:
        p.decode_batch(data, count)
    except MalformedBatchError:
        pass


@given(kind=st.sampled_from(CompressionType), data=st.binary(max_size=200), size=st.integers(-1, 1000))
def test_arbitrary_compressed_data_decompresses_or_raises(
    kind: CompressionType, data: bytes, size: int
) -> None:
    try:
        result = p.decompress(kind, data, size)
    except CompressionError:
        return
    if kind is not CompressionType.NONE:
        assert len(result) == size


@given(st.lists(I64 | U64, max_size=40), st.integers(0, 3000))
def test_ack_set_conversions_match_the_word_by_word_definition(words, size):
    from quasar.protocol.ack_set import ack_set_bits, ack_set_words

    expected = 0
    for i, word in enumerate(words):
        expected |= (word & (2**64 - 1)) << (64 * i)
    assert ack_set_bits(words) == expected
    count = max((expected.bit_length() + 63) // 64, (size + 63) // 64, 1 if size else 0)
    reference = [((expected >> (64 * i)) & (2**64 - 1)) for i in range(count)]
    assert ack_set_words(expected, size) == [w - 2**64 if w >= 2**63 else w for w in reference]
