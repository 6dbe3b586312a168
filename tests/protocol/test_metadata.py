"""parse_headers_and_payload, num_messages and the batch codec (reference/pulsar-protocol.md §1.2, §7)."""

from __future__ import annotations

import struct

import pytest

from quasar import protocol as p
from quasar.protocol import LocalProtocolError, MalformedBatchError, MalformedFrameError
from quasar.protocol.pb import MessageMetadata, SingleMessageMetadata

from ._helpers import crc32c_reference, f_bytes, f_varint, span

METADATA = MessageMetadata(
    producer_name="fake-0", sequence_id=3, publish_time=1_700_000_000_000, partition_key="k"
)
PAYLOAD = b"\x00payload\xff" * 10


def test_parse_leaves_the_payload_identical_and_uncopied() -> None:
    stored = p.encode_headers_and_payload(METADATA, PAYLOAD)
    parsed = p.parse_headers_and_payload(stored)
    assert parsed.metadata == METADATA
    assert parsed.payload == PAYLOAD
    assert parsed.payload.obj is stored  # a view into the span, not a copy
    assert bytes(parsed.metadata_bytes) == METADATA.SerializeToString()
    assert parsed.checksum == crc32c_reference(stored[6:])
    assert parsed.broker_entry_metadata is None


def test_parse_a_memoryview_span_without_checksum() -> None:
    stored = memoryview(span(METADATA.SerializeToString(), PAYLOAD, checksum=False))
    parsed = p.parse_headers_and_payload(stored)
    assert parsed.checksum is None
    assert parsed.payload == PAYLOAD
    assert parsed.payload.obj is stored.obj


def test_parse_broker_entry_metadata_before_the_checksum() -> None:
    bem = f_varint(1, 1234) + f_varint(2, 99)
    stored = struct.pack(">HI", 0x0E02, len(bem)) + bem + p.encode_headers_and_payload(METADATA, PAYLOAD)
    parsed = p.parse_headers_and_payload(stored)
    assert (parsed.broker_entry_metadata.broker_timestamp, parsed.broker_entry_metadata.index) == (1234, 99)
    assert parsed.checksum is not None
    assert parsed.payload == PAYLOAD


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        b"\x00\x00",
        struct.pack(">I", 100) + b"short",
        span(b"\xff\xff", b""),  # unparsable metadata
        span(f_bytes(1, "p") + f_varint(2, 1), b""),  # publish_time (required) missing
        span(f_bytes(1, b"\xc3\x28") + f_varint(2, 1) + f_varint(3, 1), b""),  # invalid UTF-8 producer_name
        struct.pack(">HI", 0x0E02, 2) + b"\xff\xff" + span(METADATA.SerializeToString(), b""),  # bad BEM
    ],
)
def test_malformed_spans_raise(stored: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        p.parse_headers_and_payload(stored)


def test_num_messages_uses_presence_of_num_messages_in_batch() -> None:
    metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=0)
    assert p.num_messages(metadata) == 1
    metadata.num_messages_in_batch = 1
    assert metadata.HasField("num_messages_in_batch")
    assert p.num_messages(metadata) == 1
    metadata.num_messages_in_batch = 3
    assert p.num_messages(metadata) == 3


def test_encode_batch_matches_the_observed_cpp_bytes() -> None:
    # reference §7.2, uncompressed batch of "m0", "m1", "m2" from the C++ producer.
    items = [(SingleMessageMetadata(sequence_id=i), f"m{i}".encode()) for i in range(3)]
    expected = bytes.fromhex("00000004 18 02 40 00 6d30 00000004 18 02 40 01 6d31 00000004 18 02 40 02 6d32")
    assert p.encode_batch(items) == expected
    decoded = p.decode_batch(expected, 3)
    assert [(m.sequence_id, m.payload_size, bytes(v)) for m, v in decoded] == [
        (0, 2, b"m0"),
        (1, 2, b"m1"),
        (2, 2, b"m2"),
    ]
    assert decoded[0][1].obj is expected


def test_encode_batch_rejects_a_wrong_payload_size() -> None:
    with pytest.raises(LocalProtocolError):
        p.encode_batch([(SingleMessageMetadata(payload_size=5), b"abc")])


BATCH = p.encode_batch([(SingleMessageMetadata(), b"a"), (SingleMessageMetadata(), b"bc")])


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        (BATCH, 3),  # fewer items than announced
        (BATCH, 1),  # bytes left over
        (BATCH, -1),
        (BATCH[:-1], 2),  # last item truncated
        (struct.pack(">I", 50) + b"x", 1),  # metadata size past the end
        (struct.pack(">I", 2) + b"\xff\xff", 1),  # unparsable
        (struct.pack(">I", 2) + f_varint(8, 1), 1),  # no payload_size
        (struct.pack(">I", 11) + f_varint(3, -1), 1),  # negative payload_size
        (struct.pack(">I", 5) + f_varint(3, 1) + f_bytes(2, b"\xff"), 1),  # invalid UTF-8 partition_key
    ],
)
def test_malformed_batches_raise(payload: bytes, count: int) -> None:
    with pytest.raises(MalformedBatchError):
        p.decode_batch(payload, count)
