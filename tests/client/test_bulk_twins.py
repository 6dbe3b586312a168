"""The bulk batch-entry encoder: the compiled ``_bulk_c`` and its pure-Python twin ``_bulk_py`` give the same
bytes and exception classes for every input (valid Arrow columns, and corrupted buffers that must fail
cleanly), and their items are what the producer's per-message codec writes (``encode_single_metadata``),
so the official client reads them back."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.client import _bulk_py
from quasar.client._codec_py import encode_single_metadata
from quasar.client.batch import split_batch

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (dev extras)")
_bulk_c = pytest.importorskip("quasar.client._bulk_c", reason="the compiled twin is not built")

TWINS = (_bulk_c, _bulk_py)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRING_MAP = pa.map_(pa.string(), pa.string())


def _outcome(*args: Any) -> list[tuple[str, Any]]:
    results = []
    for twin in TWINS:
        try:
            results.append(("ok", twin.encode_entries(*args)))
        except Exception as exc:  # noqa: BLE001  # the class is what is compared
            results.append(("error", type(exc)))
    assert results[0] == results[1], (args, results)
    return results[0]


def _var(array: Any) -> tuple[Any, ...]:
    buffers = array.buffers()
    return (array.offset, buffers[0], buffers[1], buffers[2])


def _map(array: Any) -> tuple[Any, ...]:
    buffers = array.buffers()
    return (array.offset, buffers[0], buffers[1], _var(array.keys), _var(array.items))


def _i64(array: Any) -> tuple[Any, ...]:
    buffers = array.buffers()
    return (array.offset, buffers[0], buffers[1])


@st.composite
def columns(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 30))
    text = st.text(max_size=8)
    values = draw(st.lists(st.binary(max_size=40), min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), text), min_size=n, max_size=n)))
    props = draw(
        st.one_of(
            st.none(),
            st.lists(st.one_of(st.none(), st.dictionaries(text, text, max_size=3)), min_size=n, max_size=n),
        )
    )
    events = draw(
        st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(0, 2**62)), min_size=n, max_size=n))
    )
    start = draw(st.integers(0, n))
    stop = draw(st.integers(start, n))
    return {
        "values": pa.array(values, pa.binary())[start:stop],
        "keys": None if keys is None else pa.array(keys, pa.string())[start:stop],
        "props": None if props is None else pa.array(props, STRING_MAP)[start:stop],
        "events": None if events is None else pa.array(events, pa.int64())[start:stop],
        "first": draw(st.integers(0, 2**40)),
        "max_messages": draw(st.integers(1, 8)),
        "max_bytes": draw(st.integers(1, 200)),
    }


def _args(c: dict[str, Any]) -> tuple[Any, ...]:
    return (
        len(c["values"]),
        _var(c["values"]),
        None if c["keys"] is None else _var(c["keys"]),
        None if c["props"] is None else _map(c["props"]),
        None if c["events"] is None else _i64(c["events"]),
        c["first"],
        None,
        c["max_messages"],
        c["max_bytes"],
    )


@SETTINGS
@given(columns())
def test_twins_agree_and_write_the_per_message_codec_items(c):
    kind, entries = _outcome(*_args(c))
    assert kind == "ok"
    n = len(c["values"])
    expected = []
    for i in range(n):
        value = c["values"][i].as_py()
        props = None if c["props"] is None else c["props"][i].as_py()
        smm = encode_single_metadata(
            len(value),
            c["first"] + i,
            None if props is None else dict(props),
            None if c["keys"] is None else c["keys"][i].as_py(),
            None if c["events"] is None else c["events"][i].as_py(),
            None,
        )
        expected.append(struct.pack(">I", len(smm)) + smm + value)
    assert b"".join(payload for payload, _, _ in entries) == b"".join(expected)
    # entries: consecutive rows, within the limits (a first row always fits), parsed back item by item
    row = 0
    for payload, count, first_row in entries:
        assert first_row == row and 1 <= count <= c["max_messages"]
        items = split_batch(payload, count)
        assert [single.sequence_id for single, _ in items] == [c["first"] + row + k for k in range(count)]
        sizes = [len(body) for _, body in items]
        assert count == 1 or sum(sizes) <= c["max_bytes"]
        row += count
    assert row == n


def test_row_numbers_give_the_sequence_ids():
    values = pa.array([b"a", b"b", b"c"])
    rows = pa.array([3, 7, 8], pa.int64())
    ((payload, count, _),) = _bulk_c.encode_entries(
        3, _var(values), None, None, None, 100, rows.buffers()[1], 10, 99
    )
    assert [single.sequence_id for single, _ in split_batch(payload, count)] == [103, 107, 108]
    assert _outcome(3, _var(values), None, None, None, 100, rows.buffers()[1], 10, 99)[0] == "ok"


@pytest.mark.parametrize(
    ("column", "array", "message"),
    [
        ("values", pa.array([b"a", None]), "value is null in row 1"),
        ("keys", pa.array([b"k", b"\xff"]), "key is not UTF-8 in row 1"),
        ("props", pa.array([[("a", "b")], [("c", None)]], STRING_MAP), "property value is null in row 1"),
        ("events", pa.array([1, -5]), "eventTime is negative in row 1"),
    ],
)
def test_bad_rows_name_the_row(column, array, message):
    c = {"values": pa.array([b"x", b"y"]), "keys": None, "props": None, "events": None, "first": 0,
         "max_messages": 5, "max_bytes": 100, column: array}  # fmt: skip
    for twin in TWINS:
        with pytest.raises(ValueError, match=message):
            twin.encode_entries(*_args(c))


@SETTINGS
@given(
    columns(),
    st.sampled_from(["values", "keys", "props", "events"]),
    st.integers(0, 3),
    st.binary(max_size=24),
    st.integers(-5, 2**40),
)
def test_corrupted_buffers_fail_the_same_way_and_never_crash(c, target, which, junk, offset):
    """Replace one buffer of one column by arbitrary bytes (or its offset by an arbitrary value): both twins
    return the same entries or raise the same exception class (no read past a buffer: no crash)."""
    args = list(_args(c))
    slot = {"values": 1, "keys": 2, "props": 3, "events": 4}[target]
    spec = args[slot]
    if spec is None:
        return
    spec = list(spec)
    if target == "props" and which >= 3:
        child = list(spec[which])
        child[2] = junk
        spec[which] = tuple(child)
    elif which == 0:
        spec[0] = offset
    else:
        spec[min(which, len(spec) - 1)] = junk
    args[slot] = tuple(spec)
    _outcome(*args)


@pytest.mark.parametrize(
    "args",
    [
        (1, "not a tuple", None, None, None, 0, None, 1, 1),
        (1, (0, None, b"", b""), None, None, None, 0, None, 1, 1),  # offsets too short
        (-1, (0, None, b"\0" * 4, b""), None, None, None, 0, None, 1, 1),
        (0, (0, None, b"\0" * 4, b""), None, None, None, -1, None, 1, 1),
        (0, (0, None, b"\0" * 4, b""), None, None, None, 2**64, None, 1, 1),
        (0, (0, None, b"\0" * 4, b""), None, None, None, 0, None, 0, 1),
        (2, (0, None, struct.pack("<iii", 0, 1, 2), b"xy"), None, None, None, 2**64 - 1, None, 1, 1),
        (1, (0, None, struct.pack("<ii", 0, 1), b"x"), None, None, None, 0, struct.pack("<q", -1), 1, 1),
        (1, (0, None, struct.pack("<ii", 1, 0), b"x"), None, None, None, 0, None, 1, 1),
        (True, (0, None, b"\0" * 8, b""), None, None, None, 0, None, 1, 1),
    ],
)
def test_bad_arguments_raise_the_same_class(args):
    assert _outcome(*args)[0] == "error"
