"""The CommitLog record codec: layout table, round trip, and the recovery check."""

from __future__ import annotations

import re
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.storage import record
from quasar.storage.errors import CorruptRecordError, InvalidMessageError
from quasar.storage.record import (
    BLANK,
    BLANK_MAGIC_CODE,
    BODY_POSITION,
    CRC32_RESERVED_LEN,
    FIXED_PART_SIZE,
    HEADER,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
    STORE_TIMESTAMP_POSITION,
    SYSFLAG_POSITION,
    CheckStatus,
    calc_msg_length,
    check_record,
    decode_properties,
    decode_record,
    encode_blank_into,
    encode_properties,
    encode_record_into,
    ipv4_host,
)


def _encode(**overrides) -> bytearray:
    fields = {
        "topic": b"topic-a",
        "queue_id": 3,
        "queue_offset": 17,
        "physical_offset": 4096,
        "body": b"hello world",
        "properties": encode_properties({"KEYS": "k1 k2"}),
        "store_timestamp": 1_700_000_000_123,
        "born_timestamp": 1_700_000_000_001,
    }
    fields.update(overrides)
    reserved = CRC32_RESERVED_LEN if fields.get("append_prop_crc") else 0
    size = calc_msg_length(len(fields["body"]), len(fields["topic"]), len(fields["properties"]) + reserved)
    buf = bytearray(size)
    assert encode_record_into(buf, 0, **fields) == size
    return buf


def test_struct_sizes_match_the_docstring_table():
    rows = re.findall(r"^ (\d+)\s+(\S+)\s+(\d+)\s+(\d+)", record.__doc__, re.MULTILINE)
    fixed = [(int(n), name, int(size), int(offset)) for n, name, size, offset in rows if int(n) <= 14]
    assert [n for n, *_ in fixed] == list(range(1, 15))
    position = 0
    for _, name, size, offset in fixed:
        assert offset == position, name
        position += size
    assert position == FIXED_PART_SIZE == 84
    assert HEADER.size == BODY_POSITION == 88  # fixed part + BODY length
    assert BLANK.size == record.END_FILE_MIN_BLANK_LENGTH == 8
    assert (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE) == (
        -626843481 & 0xFFFFFFFF,
        -626843477 & 0xFFFFFFFF,
        -875286124 & 0xFFFFFFFF,
    )


def test_fields_sit_at_the_documented_offsets():
    buf = _encode(queue_offset=0x0102030405060708, physical_offset=0x1112131415161718, sys_flag=0x5)
    assert struct.unpack_from(">i", buf, 0)[0] == len(buf)
    assert struct.unpack_from(">I", buf, 4)[0] == MESSAGE_MAGIC_CODE
    assert struct.unpack_from(">i", buf, 8)[0] == zlib.crc32(b"hello world") & 0x7FFFFFFF
    assert struct.unpack_from(">q", buf, QUEUE_OFFSET_POSITION)[0] == 0x0102030405060708
    assert struct.unpack_from(">q", buf, PHYSICAL_OFFSET_POSITION)[0] == 0x1112131415161718
    assert struct.unpack_from(">i", buf, SYSFLAG_POSITION)[0] == 0x5
    assert struct.unpack_from(">q", buf, STORE_TIMESTAMP_POSITION)[0] == 1_700_000_000_123
    assert buf[48:52] == b"\x7f\x00\x00\x01"  # BORNHOST ip
    assert struct.unpack_from(">i", buf, 84)[0] == 11  # body length
    assert buf[88:99] == b"hello world"
    assert buf[99] == 7 and buf[100:107] == b"topic-a"  # V1: 1-byte topic length
    assert struct.unpack_from(">H", buf, 107)[0] == len(buf) - 109
    assert bytes(buf[109:]) == b"KEYS\x01k1 k2\x02"


def test_long_topic_uses_magic_v2_with_a_two_byte_length():
    topic = b"t" * 200
    buf = _encode(topic=topic)
    assert struct.unpack_from(">I", buf, 4)[0] == MESSAGE_MAGIC_CODE_V2
    assert struct.unpack_from(">H", buf, 99)[0] == 200
    decoded = decode_record(memoryview(buf), 0, check_crc=True)
    assert decoded.topic == "t" * 200


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=160),
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    physical_offset=st.integers(0, 2**63 - 1),
    body=st.binary(max_size=600),
    properties=st.dictionaries(_text.filter(bool), _text, max_size=5),
    tag_hash=st.integers(-(2**63), 2**63 - 1),
    timestamps=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
    born_host=st.tuples(st.binary(min_size=4, max_size=4), st.integers(0, 65535)),
    prefix=st.integers(0, 64),
    prop_crc=st.booleans(),
)
def test_encode_decode_round_trip(
    topic,
    queue_id,
    queue_offset,
    physical_offset,
    body,
    properties,
    tag_hash,
    timestamps,
    born_host,
    prefix,
    prop_crc,
):
    topic_bytes = topic.encode()
    props = encode_properties(properties, tag_hash)
    size = calc_msg_length(len(body), len(topic_bytes), len(props) + (CRC32_RESERVED_LEN if prop_crc else 0))
    buf = bytearray(prefix + size + 16)  # written mid-buffer, with room after it
    written = encode_record_into(
        buf,
        prefix,
        topic=topic_bytes,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        body=memoryview(body),
        properties=props,
        store_timestamp=timestamps[0],
        born_timestamp=timestamps[1],
        born_host=born_host,
        append_prop_crc=prop_crc,
    )
    assert written == size
    view = memoryview(buf)
    assert check_record(view, prefix, prefix + size, require_prop_crc=prop_crc) == (CheckStatus.VALID, size)
    decoded = decode_record(view, prefix, check_crc=True)
    assert decoded.total_size == size
    assert decoded.magic == (MESSAGE_MAGIC_CODE if len(topic_bytes) <= 127 else MESSAGE_MAGIC_CODE_V2)
    assert (decoded.topic, decoded.queue_id, decoded.queue_offset) == (topic, queue_id, queue_offset)
    assert decoded.physical_offset == physical_offset
    assert (decoded.store_timestamp, decoded.born_timestamp) == timestamps
    assert decoded.born_host == born_host
    assert bytes(decoded.body) == body
    assert decoded.body.obj is buf  # a slice of the buffer, not a copy
    expected = dict(properties)
    if tag_hash:
        expected["TAG_HASH"] = str(tag_hash)
    assert decoded.properties == expected  # the reserved __CRC32# property is not a user property


def test_property_crc_covers_header_topic_and_properties():
    good = _encode(append_prop_crc=True)
    size = len(good)
    assert bytes(good[-20:-11]) == b"__CRC32#\x01"
    crc = zlib.crc32(good[:-20]) & 0x7FFFFFFF
    assert bytes(good[-11:]) == b"%010d\x02" % crc
    assert check_record(memoryview(good), 0, size, require_prop_crc=True).status is CheckStatus.VALID
    assert decode_record(memoryview(good), 0).properties == {"KEYS": "k1 k2"}

    for position in (12, 16, 40, 100, size - 25):  # queue id, flag, born time, topic, a property byte
        damaged = bytearray(good)
        damaged[position] ^= 0x01
        assert check_record(memoryview(damaged), 0, size).status is CheckStatus.CRC_MISMATCH, position
        assert check_record(memoryview(damaged), 0, size, check_crc=False).status is CheckStatus.VALID

    plain = _encode()  # written without the property: accepted unless required
    assert check_record(memoryview(plain), 0, len(plain)).status is CheckStatus.VALID
    assert (
        check_record(memoryview(plain), 0, len(plain), require_prop_crc=True).status
        is CheckStatus.CRC_MISMATCH
    )


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), pos=st.integers(0, 40))
def test_check_record_never_raises_on_arbitrary_bytes(data, pos):
    verdict = check_record(memoryview(data), pos, len(data))
    assert isinstance(verdict.status, CheckStatus)
    if verdict.status is CheckStatus.VALID:
        assert decode_record(memoryview(data), pos).total_size == verdict.size


def test_check_detects_every_kind_of_damage():
    good = _encode()
    size = len(good)
    assert check_record(memoryview(good), 0, size).status is CheckStatus.VALID

    flipped = bytearray(good)
    flipped[BODY_POSITION + 3] ^= 0x40
    assert check_record(memoryview(flipped), 0, size).status is CheckStatus.CRC_MISMATCH
    assert check_record(memoryview(flipped), 0, size, check_crc=False).status is CheckStatus.VALID

    assert check_record(memoryview(good), 0, size - 1).status is CheckStatus.SHORT_BUFFER  # torn

    bad_magic = bytearray(good)
    bad_magic[4:8] = b"\x00\x00\x00\x01"
    assert check_record(memoryview(bad_magic), 0, size).status is CheckStatus.BAD_MAGIC

    longer = bytearray(good) + bytearray(10)
    struct.pack_into(">i", longer, 0, size + 10)  # TOTALSIZE disagrees with the recomputed length
    assert check_record(memoryview(longer), 0, size + 10).status is CheckStatus.LENGTH_MISMATCH

    assert check_record(memoryview(bytearray(200)), 0, 200).status is CheckStatus.NO_DATA

    v6 = _encode(sys_flag=record.SYSFLAG_BORNHOST_V6)
    assert check_record(memoryview(v6), 0, len(v6)).status is CheckStatus.UNSUPPORTED


def test_blank_record_marks_the_end_of_a_file():
    buf = bytearray(100)
    encode_blank_into(buf, 40, 60)
    assert BLANK.unpack_from(buf, 40) == (60, BLANK_MAGIC_CODE)
    assert check_record(memoryview(buf), 40, 100) == (CheckStatus.END_OF_FILE, 60)
    assert check_record(memoryview(buf), 40, 90).status is CheckStatus.SHORT_BUFFER  # size must reach the end
    with pytest.raises(CorruptRecordError):
        decode_record(memoryview(buf), 40)


def test_properties_codec_rejects_separators_and_tolerates_a_missing_last_separator():
    assert encode_properties(None) == b""
    assert encode_properties({"a": "1", "b": ""}) == b"a\x011\x02b\x01\x02"
    assert encode_properties({}, tag_hash=-5) == b"TAG_HASH\x01-5\x02"
    for bad in ({"a\x01": "x"}, {"a": "x\x02"}, {"": "x"}, {"a": 1}, {"__CRC32#": "1"}, {"TAG_HASH": "1"}):
        with pytest.raises(InvalidMessageError):
            encode_properties(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        encode_properties(None, tag_hash=2**63)
    assert decode_properties(b"a\x011\x02b\x012") == {"a": "1", "b": "2"}
    with pytest.raises(CorruptRecordError):
        decode_properties(b"\xff\x01x")


def test_out_of_range_field_is_an_invalid_message_not_a_struct_error():
    with pytest.raises(InvalidMessageError):
        _encode(queue_id=2**31)
    assert ipv4_host("10.1.2.3", 10911) == (b"\x0a\x01\x02\x03", 10911)
    with pytest.raises(ValueError):
        ipv4_host("::1", 1)
