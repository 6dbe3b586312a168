"""The record encoder's twins: the compiled ``_record_c`` and the pure-Python ``_record_py`` write the same bytes,
return the same values and raise the same exception classes (leaving the buffer untouched) for every input, and
both write the layout of :mod:`quasar.storage.record` built here independently from zlib and ``struct``."""

from __future__ import annotations

import array
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.storage import _record_py
from quasar.storage.errors import InvalidMessageError
from quasar.storage.record import HEADER_MIDDLE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, QUEUE_FLAG

_record_c = pytest.importorskip("quasar.storage._record_c", reason="the compiled twin is not built")

TWINS = (_record_c, _record_py)
I64 = st.integers(-(2**63), 2**63 - 1)
MIDDLE = HEADER_MIDDLE.pack(
    0, 1_700_000_000_001, b"\x7f\x00\x00\x01", 10911, 1_700_000_000_123, b"\x0a\x00\x00\x02", 0, 3, 0
)


def reference_record(
    physical_offset: int, magic: int, queue_flag: bytes, queue_offset: int, middle: bytes, body: bytes, tail: bytes,
    prop_crc: bool,
) -> bytes:  # fmt: skip
    """The documented layout, built without the encoder: zlib CRCs, ``struct`` fields."""
    total = 88 + len(body) + len(tail) + (20 if prop_crc else 0)
    head = struct.pack(">iIi", total, magic, zlib.crc32(body) & 0x7FFFFFFF) + queue_flag
    head += struct.pack(">qq", queue_offset, physical_offset) + middle + struct.pack(">i", len(body))
    record = head + body + tail
    if prop_crc:
        record += b"__CRC32#\x01" + b"%010d" % (zlib.crc32(record) & 0x7FFFFFFF) + b"\x02"
    return record


@st.composite
def record_args(draw: st.DrawFn) -> dict[str, Any]:
    topic = draw(st.binary(min_size=1, max_size=140))
    magic = MESSAGE_MAGIC_CODE if len(topic) <= 127 else MESSAGE_MAGIC_CODE_V2
    length = bytes([len(topic)]) if len(topic) <= 127 else struct.pack(">H", len(topic))
    properties = draw(st.binary(max_size=40))
    prop_crc = draw(st.booleans())
    tail = length + topic + struct.pack(">H", len(properties) + (20 if prop_crc else 0)) + properties
    return {
        "magic": magic,
        "queue_flag": QUEUE_FLAG.pack(
            draw(st.integers(0, 2**31 - 1)), draw(st.integers(-(2**31), 2**31 - 1))
        ),
        "queue_offset": draw(st.integers(0, 2**62)),
        "middle": draw(st.sampled_from([MIDDLE, bytes(48), bytes(range(48))])),
        "tail": tail,
        "prop_crc": prop_crc,
    }


def bodies(max_size: int = 300) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=max_size),
        st.integers(0, 5000).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)),
    )


def run(twin: Any, name: str, make_buf: Callable[[], Any], *args: Any) -> tuple[Any, ...]:
    """``twin.name(buf, *args)`` on a fresh buffer: ("ok", result, bytes) or ("error", class, bytes)."""
    buf = make_buf()
    try:
        result = getattr(twin, name)(buf, *args)
    except Exception as exc:  # noqa: BLE001 - the class is the answer
        return "error", type(exc), _snapshot(buf)
    return "ok", result, _snapshot(buf)


def _snapshot(buf: Any) -> bytes | None:
    try:
        return bytes(memoryview(buf).cast("B")) if memoryview(buf).c_contiguous else bytes(memoryview(buf))
    except TypeError:
        return None


def agree(name: str, make_buf: Callable[[], Any], *args: Any) -> tuple[Any, ...]:
    outcomes = [run(twin, name, make_buf, *args) for twin in TWINS]
    assert outcomes[0] == outcomes[1], (name, args)
    return outcomes[0]


# -- CRC-32 ----------------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.binary(max_size=3000), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_crc32_is_zlibs_at_any_length_alignment_and_start(data: bytes, skip: int, value: int) -> None:
    view = memoryview(data)[min(skip, len(data)) :]
    assert _record_c.crc32(view, value) == zlib.crc32(view, value) == _record_py.crc32(view, value)
    assert _record_c.crc32(view) == zlib.crc32(view)


@pytest.fixture(params=[0, 1, 2], ids=["tables", "pclmul", "avx512"])
def crc32_level(request: pytest.FixtureRequest) -> Any:
    """Each CRC-32 implementation the CPU has (tables, 128-bit PCLMULQDQ folding, 512-bit VPCLMULQDQ)."""
    available = _record_c._crc32_paths()
    if request.param > sum(available):
        pytest.skip("the CPU lacks this CRC-32 implementation")
    _record_c._crc32_paths(request.param)
    yield request.param
    _record_c._crc32_paths(2)


def test_every_crc32_implementation_is_zlibs(crc32_level: int) -> None:
    data = bytes(range(256)) * 40 + bytes(range(97))
    for start in (0, 1, 5, 16):
        for length in [*range(0, 600), 1023, 1024, 1025, 4096, 10_000]:
            view = memoryview(data)[start : start + length]
            assert _record_c.crc32(view, 0x12345678) == zlib.crc32(view, 0x12345678), (start, length)
    tail = b"\x01t\x00\x14"
    body = data[:3000]
    out = agree(
        "pack_record", lambda: bytearray(4000), 0, 0, MESSAGE_MAGIC_CODE, bytes(8), 0, MIDDLE, body, tail, 1
    )
    assert out[2][: 88 + 3000 + 24] == reference_record(
        0, MESSAGE_MAGIC_CODE, bytes(8), 0, MIDDLE, body, tail, True
    )


def test_crc32_of_large_buffers_without_the_gil() -> None:
    data = bytes(range(256)) * 4099 + b"tail"
    assert _record_c.crc32(data) == zlib.crc32(data)
    assert _record_c.crc32(b"123456789") == 0xCBF43926
    for twin in TWINS:
        with pytest.raises(TypeError):
            twin.crc32("text")
        with pytest.raises(TypeError):
            twin.crc32(b"x", 1.0)
        with pytest.raises(BufferError):
            twin.crc32(memoryview(b"abcd")[::2])


# -- valid records ----------------------------------------------------------------------------------------------


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(record_args(), bodies(), st.integers(0, 40), I64, st.integers(0, 64))
def test_one_record_is_the_documented_layout_in_both_twins(
    args: dict[str, Any], body: bytes, position: int, physical_offset: int, slack: int
) -> None:
    expected = reference_record(
        physical_offset, args["magic"], args["queue_flag"], args["queue_offset"], args["middle"], body,
        args["tail"], args["prop_crc"],
    )  # fmt: skip
    size = position + len(expected) + slack
    outcome = agree(
        "pack_record", lambda: bytearray(b"\xee" * size), position, physical_offset, args["magic"],
        args["queue_flag"], args["queue_offset"], args["middle"], body, args["tail"], args["prop_crc"],
    )  # fmt: skip
    assert outcome[0] == "ok" and outcome[1] == position + len(expected)
    assert outcome[2] == b"\xee" * position + expected + b"\xee" * slack


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(record_args(), st.lists(bodies(200), max_size=12), st.integers(0, 40), st.integers(0, 2**40))
def test_a_batch_is_the_records_one_by_one(
    args: dict[str, Any], batch: list[bytes], position: int, base_offset: int
) -> None:
    expected, offsets, at = b"", [], position
    for i, body in enumerate(batch):
        offsets.append(base_offset + at)
        record = reference_record(
            base_offset + at, args["magic"], args["queue_flag"], args["queue_offset"] + i, args["middle"], body,
            args["tail"], args["prop_crc"],
        )  # fmt: skip
        expected += record
        at += len(record)
    size = position + len(expected)
    outcome = agree(
        "pack_records", lambda: bytearray(size), position, base_offset, args["magic"], args["queue_flag"],
        args["queue_offset"], args["middle"], tuple(batch), args["tail"], args["prop_crc"],
    )  # fmt: skip
    assert outcome == ("ok", (size, tuple(offsets)), bytes(position) + expected)


def test_a_large_batch_is_written_without_the_gil_and_still_byte_for_byte() -> None:
    batch = [bytes([i]) * (1000 + 37 * i) for i in range(150)]  # > 64 KiB: the GIL-free loop
    tail = b"\x05topic\x00\x14"
    size = sum(88 + len(b) + len(tail) + 20 for b in batch)
    out = agree(
        "pack_records",
        lambda: bytearray(size),
        0,
        1 << 30,
        MESSAGE_MAGIC_CODE,
        bytes(8),
        7,
        MIDDLE,
        batch,
        tail,
        True,
    )
    assert out[0] == "ok" and out[1][0] == size and len(out[1][1]) == 150
    big = bytes(range(256)) * 1024  # one 256 KiB record
    out = agree(
        "pack_record", lambda: bytearray(300_000), 0, 5, MESSAGE_MAGIC_CODE, bytes(8), 0, MIDDLE, big, tail, 1
    )
    assert out[2][: 88 + len(big) + len(tail) + 20] == reference_record(
        5, MESSAGE_MAGIC_CODE, bytes(8), 0, MIDDLE, big, tail, True
    )


def test_bodies_of_any_contiguous_buffer_type_are_their_bytes() -> None:
    tail = b"\x01t\x00\x00"
    numbers = array.array("i", [1, -2, 3])
    for body in (bytearray(b"abc"), memoryview(b"xabcx")[1:4], numbers, memoryview(numbers), b""):
        raw = bytes(memoryview(body).cast("B")) if memoryview(body).format != "B" else bytes(body)
        out = agree(
            "pack_record",
            lambda: bytearray(200),
            0,
            0,
            MESSAGE_MAGIC_CODE,
            bytes(8),
            0,
            MIDDLE,
            body,
            tail,
            0,
        )
        assert out[2][: 88 + len(raw) + 4] == reference_record(
            0, MESSAGE_MAGIC_CODE, bytes(8), 0, MIDDLE, raw, tail, 0
        )
    # the target may be a memoryview of any contiguous writable buffer (a mapped segment is one)
    out = agree(
        "pack_record", lambda: memoryview(array.array("q", bytes(200))), 8, 0, MESSAGE_MAGIC_CODE, bytes(8), 0,
        MIDDLE, b"b", tail, 1,
    )  # fmt: skip
    assert out[0] == "ok"


# -- bad input: same class, nothing written ---------------------------------------------------------------------


class _BadBool:
    def __bool__(self) -> bool:
        raise ZeroDivisionError("no truth")


BAD_BUFFERS: list[Callable[[], Any]] = [
    lambda: bytes(400),
    lambda: memoryview(bytes(400)),
    lambda: memoryview(bytearray(800))[::2],
    lambda: bytearray(10),
    lambda: bytearray(0),
    lambda: 400,
    lambda: "text",
]
BAD_INTS = [-1, 2**31, 2**32, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 1.0, "1", None, True, False]
BAD_BYTES = [
    b"",
    b"1234567",
    bytes(9),
    bytes(47),
    bytes(49),
    bytearray(8),
    bytearray(48),
    memoryview(bytes(8)),
    "x",
    None,
]
BAD_BODIES = [
    "text",
    5,
    None,
    memoryview(b"abcdef")[::2],
    array.array("d", [1.5]),
    memoryview(bytearray(3)),
    b"",
    b"x" * 500,
]
BAD_FLAGS: list[Any] = [_BadBool(), None, 0, 1, "", [], [0]]

GOOD_RECORD = [0, 4096, MESSAGE_MAGIC_CODE, bytes(8), 3, MIDDLE, b"body", b"\x01t\x00\x14", True]
"""pack_record's arguments after buf (position, physical_offset, magic, queue_flag, queue_offset, middle,
body, tail, append_prop_crc); pack_records' with [b"a", b"bb"] as bodies."""
GOOD_RECORDS = [0, 4096, MESSAGE_MAGIC_CODE, bytes(8), 3, MIDDLE, [b"a", b"bb"], b"\x01t\x00\x14", True]
CHOICES: list[list[Any]] = [
    BAD_INTS,
    BAD_INTS,
    BAD_INTS,
    BAD_BYTES,
    BAD_INTS,
    BAD_BYTES,
    BAD_BODIES,
    BAD_BYTES,
    BAD_FLAGS,
]


def pick(values: list[Any]) -> st.SearchStrategy[Any]:
    """One of ``values`` (by index: some are unhashable, which ``sampled_from`` needs)."""
    return st.integers(0, len(values) - 1).map(values.__getitem__)


@st.composite
def damaged(draw: st.DrawFn, good: list[Any], bodies_at: int | None) -> tuple[Callable[[], Any], list[Any]]:
    args = list(good)
    for index in draw(st.lists(st.integers(0, len(args) - 1), min_size=1, max_size=3)):
        if index == bodies_at:
            args[index] = draw(
                st.one_of(
                    st.lists(pick([*BAD_BODIES, b"ok", b""]), max_size=4),
                    st.lists(pick([*BAD_BODIES, b"ok"]), max_size=4).map(tuple),
                    pick([b"not a list", None, 5, iter([b"x"]), {b"x": 1}]),
                )
            )
        else:
            args[index] = draw(pick(CHOICES[index]))
    make_buf = draw(st.one_of(st.just(lambda: bytearray(400)), pick(BAD_BUFFERS)))
    return make_buf, args


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(GOOD_RECORD, None))
def test_a_bad_record_argument_is_the_same_error_in_both_and_writes_nothing(
    case: tuple[Any, list[Any]],
) -> None:
    make_buf, args = case
    outcome = agree("pack_record", make_buf, *args)
    if outcome[0] == "error":
        assert outcome[2] == _snapshot(make_buf())


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(GOOD_RECORDS, 6))
def test_a_bad_batch_argument_is_the_same_error_in_both_and_writes_nothing(
    case: tuple[Any, list[Any]],
) -> None:
    make_buf, args = case
    outcome = agree("pack_records", make_buf, *args)
    if outcome[0] == "error":
        assert outcome[2] == _snapshot(make_buf())


def test_out_of_range_fields_are_invalid_messages_and_a_short_buffer_a_value_error() -> None:
    tail = b"\x01t\x00\x00"
    for twin in TWINS:
        buf = bytearray(300)
        for args in (
            (0, 0, 2**32, bytes(8), 0, MIDDLE, b"x", tail, 0),  # magic past u32
            (0, 2**63, 1, bytes(8), 0, MIDDLE, b"x", tail, 0),  # physical offset past i64
            (0, 0, 1, bytes(8), -(2**63) - 1, MIDDLE, b"x", tail, 0),  # queue offset below i64
        ):
            with pytest.raises(InvalidMessageError):
                twin.pack_record(buf, *args)
        with pytest.raises(InvalidMessageError):  # the last queue offset of the batch passes i64
            twin.pack_records(buf, 0, 0, 1, bytes(8), 2**63 - 2, MIDDLE, [b"a", b"b", b"c"], tail, 0)
        with pytest.raises(InvalidMessageError):  # the last record's commit log offset passes i64
            twin.pack_records(buf, 0, 2**63 - 100, 1, bytes(8), 0, MIDDLE, [b"a", b"b"], tail, 0)
        with pytest.raises(ValueError) as caught:
            twin.pack_record(buf, 250, 0, 1, bytes(8), 0, MIDDLE, b"x", tail, 0)
        assert caught.type is ValueError
        with pytest.raises(ValueError) as caught:
            twin.pack_records(buf, 0, 0, 1, bytes(8), 0, MIDDLE, [b"x" * 100] * 3, tail, 0)
        assert caught.type is ValueError
        assert buf == bytearray(300)
        assert twin.pack_records(buf, 300, 0, 1, bytes(8), 0, MIDDLE, [], tail, 0) == (300, ())


# -- consume queue units ----------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(
    st.lists(st.integers(0, 2**40), max_size=30).map(sorted),
    st.data(),
    st.integers(0, 2**41),
    I64,
    st.integers(0, 30),
)
def test_units_are_the_consume_queue_layout_in_both_twins(
    offsets: list[int], data: st.DataObject, end_offset: int, tag_hash: int, position: int
) -> None:
    start = data.draw(st.integers(0, len(offsets)))
    stop = data.draw(st.integers(start, len(offsets)))
    ends = [*offsets[1:], end_offset]
    expected = b"".join(
        struct.pack(">qiq", offsets[i], ends[i] - offsets[i], tag_hash)
        for i in range(start, stop)
        if -(2**31) <= ends[i] - offsets[i] < 2**31
    )
    size = position + 20 * (stop - start)
    outcome = agree(
        "pack_units", lambda: bytearray(size), position, offsets, start, stop, end_offset, tag_hash
    )
    if len(expected) == 20 * (stop - start):
        assert outcome == ("ok", size, bytes(position) + expected)
    else:  # a size outside i32
        assert outcome[:2] == ("error", ValueError)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    pick([*BAD_BUFFERS, lambda: bytearray(100)]),
    st.sampled_from([0, -1, 2**63, 1.0, 95, 100]),
    st.one_of(
        st.lists(pick([0, 10, 30, 2**40, 2**63, -(2**63) - 1, 1.5, None, True]), max_size=5),
        st.sampled_from([None, "abc", b"abc", 3]),
    ),
    st.sampled_from([0, 1, 2, -1, 6, 2**64, None]),
    st.sampled_from([0, 1, 3, 5, -1, 2**64, 1.0]),
    st.sampled_from([40, 2**63, -(2**63) - 1, None]),
    st.sampled_from([0, 7, -(2**63), 2**63, "x"]),
)
def test_bad_unit_arguments_are_the_same_error_in_both_and_write_nothing(
    make_buf: Callable[[], Any], position: Any, offsets: Any, start: Any, stop: Any, end: Any, tag: Any
) -> None:
    outcome = agree("pack_units", make_buf, position, offsets, start, stop, end, tag)
    if outcome[0] == "error":
        assert outcome[2] == _snapshot(make_buf())


# -- a record and its unit in one call (the put path) -----------------------------------------------------------


def _record_and_unit(twin: Any, unit_factory: Callable[[], Any], extra: list[Any]) -> tuple[Any, ...]:
    buf, unit_buf = bytearray(300), unit_factory()
    try:
        result = twin.pack_record(
            buf,
            10,
            4096,
            MESSAGE_MAGIC_CODE,
            bytes(8),
            3,
            MIDDLE,
            b"body",
            b"\x01t\x00\x14",
            1,
            unit_buf,
            *extra,
        )
    except Exception as exc:  # noqa: BLE001 - the class is the answer
        return "error", type(exc), bytes(buf), _snapshot(unit_buf)
    return "ok", result, bytes(buf), _snapshot(unit_buf)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.just(lambda: bytearray(60)), pick(BAD_BUFFERS), st.just(lambda: None)),
    st.lists(pick([0, 20, 40, 41, -1, 2**63, 1.0, None, 7, -(2**63), 2**63 - 1, 2**64, "x"]), max_size=2),
)
def test_a_record_with_its_unit_is_both_writes_or_none_in_both_twins(
    unit_factory: Callable[[], Any], extra: list[Any]
) -> None:
    outcomes = [_record_and_unit(twin, unit_factory, extra) for twin in TWINS]
    assert outcomes[0] == outcomes[1]
    status, result, buf, unit_buf = outcomes[0]
    record = reference_record(4096, MESSAGE_MAGIC_CODE, bytes(8), 3, MIDDLE, b"body", b"\x01t\x00\x14", True)
    if status == "error":
        assert buf == bytes(300) and unit_buf == _snapshot(unit_factory())
        return
    assert result == 10 + len(record) and buf[10 : 10 + len(record)] == record
    if unit_buf is not None:
        at = extra[0] if extra else 0
        tag = extra[1] if len(extra) > 1 else 0
        assert unit_buf[at : at + 20] == struct.pack(">qiq", 4096, len(record), tag)
        assert unit_buf[:at] + unit_buf[at + 20 :] == bytes(40)
