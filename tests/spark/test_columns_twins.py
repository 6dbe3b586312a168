"""The bulk decoder of the Spark read path: the compiled ``_columns_c`` and its twin ``_columns_py`` give the
same bytes for every input (mangled ones included, which they must survive), and on well-formed entries the
Arrow batch they build is the message path's (``quasar.client`` Messages through ``schema.to_arrow_batches``)
row for row, byte for byte. No broker, no Spark session."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.client.message import Message, ReceivedEntry, unpack_batch
from quasar.protocol import pb
from quasar.spark import _columns_py
from quasar.spark.columns import entries_to_batch
from quasar.spark.positions import ENTRY_END
from quasar.spark.schema import to_arrow_batches

_columns_c = pytest.importorskip("quasar.spark._columns_c", reason="the compiled twin is not built")

TWINS = (_columns_c, _columns_py)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEXT = st.text(max_size=6)
TOPIC = "persistent://public/default/cols"
EVERYTHING = ((-1, -1, -1), (2**62, 0, 0))


def _outcome(twin: Any, *args: Any) -> Any:
    try:
        return twin.decode_entries(*args)
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return "error", type(exc)


def _both(*args: Any) -> Any:
    c, py = (_outcome(twin, *args) for twin in TWINS)
    if c[0] != "error":
        c = (c[0], c[1], [(ledger, entry) for ledger, entry, _ in c[2]])  # reasons are prose
        py = (py[0], py[1], [(ledger, entry) for ledger, entry, _ in py[2]])
    assert c == py, args
    return c


@st.composite
def items(draw: st.DrawFn, single: bool) -> Any:
    md = pb.SingleMessageMetadata() if single else pb.MessageMetadata(producer_name="p", sequence_id=1)
    if not single:
        md.publish_time = draw(st.integers(0, 2**45))
    for key, value in draw(st.lists(st.tuples(st.sampled_from(["a", "b", "é"]), TEXT), max_size=3)):
        md.properties.add(key=key, value=value)
    if draw(st.booleans()):
        md.partition_key = draw(TEXT)
    if draw(st.booleans()):
        md.event_time = draw(st.integers(0, 2**45))
    if draw(st.booleans()):
        md.ordering_key = draw(st.binary(max_size=3))
    return md


@st.composite
def entries(draw: st.DrawFn) -> list[tuple[int, int, bytes, bytes, int]]:
    out = []
    for entry_id in range(draw(st.integers(0, 4))):
        md = draw(items(single=False))
        redelivery = draw(st.integers(0, 3))
        if draw(st.booleans()):
            payload = draw(st.binary(max_size=20))
        else:
            parts = []
            count = draw(st.integers(1, 5))
            for _ in range(count):
                single = draw(items(single=True))
                value = draw(st.binary(max_size=12))
                single.payload_size = len(value)
                raw = single.SerializeToString()
                parts.append(struct.pack(">I", len(raw)) + raw + value)
            md.num_messages_in_batch = count
            payload = b"".join(parts)
        out.append((7, entry_id, md.SerializeToString(), payload, redelivery))
    return out


def _message_path(entries: list[Any], partition: int, start: Any, end: Any) -> pa.Table:
    """The same entries as quasar.client's consumer turns them into Messages, then the message path's
    transposition (what ``_RangeScan`` yields per message)."""
    rows = []
    for ledger, entry, meta, payload, redelivery in entries:
        md = pb.MessageMetadata.FromString(meta)
        batch = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 0
        received = ReceivedEntry(ledger, entry, partition, batch, TOPIC, meta, redelivery, None)
        if md.HasField("num_messages_in_batch"):
            messages, _ = unpack_batch(payload, received)
        else:
            messages = [Message(payload, received)]
        for m in messages:
            mid = m.message_id()
            key = (ledger, entry, mid.batch_index if mid.batch_index >= 0 else ENTRY_END)
            if start < key <= end:
                rows.append((
                    m.partition_key() or None, m.data(), ledger, entry, mid.batch_index, m.publish_timestamp(),
                    m.event_timestamp(), m.properties(), m.redelivery_count(), mid.serialize(),
                ))  # fmt: skip
    return pa.Table.from_batches(list(to_arrow_batches(rows, TOPIC, partition)), schema=_schema())


def _schema() -> pa.Schema:
    from quasar.spark.schema import arrow_read_schema

    return arrow_read_schema()


@SETTINGS
@given(entries(), st.sampled_from([-1, 0, 3]), st.integers(-1, 4), st.integers(-1, 6))
def test_twins_agree_and_equal_the_message_path(batch_entries, partition, start_entry, end_index):
    start = (7, start_entry, 2) if start_entry >= 0 else (-1, -1, -1)
    end = (7, 2, end_index if end_index >= 0 else ENTRY_END)
    for lo, hi in (EVERYTHING, (start, end)):
        rows, _, bad = _both(batch_entries, partition, lo, hi)
        assert bad == []
        bulk = pa.Table.from_batches([entries_to_batch(batch_entries, TOPIC, partition, lo, hi)])
        bulk.validate(full=True)
        assert bulk.num_rows == rows
        assert bulk.equals(_message_path(batch_entries, partition, lo, hi))


@SETTINGS
@given(entries(), st.data())
def test_mangled_entries_never_crash_and_the_twins_agree(batch_entries, data):
    mangled = []
    for ledger, entry, meta, payload, redelivery in batch_entries:
        meta = bytearray(meta)
        payload = bytearray(payload)
        for buf in (meta, payload):
            for _ in range(data.draw(st.integers(0, 3))):
                if buf:
                    buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
            if buf and data.draw(st.booleans()):
                del buf[data.draw(st.integers(0, len(buf) - 1)) :]
        mangled.append((ledger, entry, bytes(meta), bytes(payload), redelivery))
    mangled.append((8, 0, data.draw(st.binary(max_size=30)), data.draw(st.binary(max_size=30)), 0))
    rows, _, bad = _both(mangled, 1, *EVERYTHING)
    assert len(set(bad)) == len(bad)  # each skipped entry reported once
    batch = entries_to_batch(mangled, TOPIC, 1, *EVERYTHING)  # what is kept is valid Arrow
    batch.validate(full=True)
    assert batch.num_rows == rows


def test_a_malformed_entry_is_skipped_whole_and_reported():
    good = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    batch = pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=5, num_messages_in_batch=2)
    item = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
    one_item = struct.pack(">I", len(item)) + item + b"x"  # two announced, one present
    bad_key = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=5).SerializeToString()
    bad_key += b"\x32\x01\xff"  # partition_key (6) = b"\xff": not UTF-8
    entries_in = [
        (1, 0, good.SerializeToString(), b"a", 0),
        (1, 1, batch.SerializeToString(), one_item, 0),
        (1, 2, bad_key, b"c", 0),
        (1, 3, good.SerializeToString(), b"d", 0),
    ]
    for twin in TWINS:
        rows, buffers, bad = twin.decode_entries(entries_in, -1, *EVERYTHING)
        assert rows == 2
        assert [(ledger, entry) for ledger, entry, _ in bad] == [(1, 1), (1, 2)]
        assert buffers[_columns_py.BUFFERS.index("value_data")] == b"ad"


@pytest.mark.parametrize("twin", TWINS, ids=["c", "py"])
def test_bad_arguments_raise_the_same_errors(twin):
    ok = [(1, 0, b"", b"", 0)]
    with pytest.raises(TypeError):
        twin.decode_entries((1, 2), -1, *EVERYTHING)
    with pytest.raises(TypeError):
        twin.decode_entries([(1, 0, "text", b"", 0)], -1, *EVERYTHING)
    with pytest.raises(TypeError):
        twin.decode_entries([(1, 0, b"")], -1, *EVERYTHING)
    with pytest.raises(ValueError):
        twin.decode_entries([(2**63, 0, b"", b"", 0)], -1, *EVERYTHING)
    with pytest.raises(ValueError):
        twin.decode_entries(ok, 2**31, *EVERYTHING)
    with pytest.raises(TypeError):
        twin.decode_entries(ok, -1, (1, 2), (3, 4, 5))
    assert twin.decode_entries(ok, -1, *EVERYTHING)[0] == 1  # empty metadata: publish time 0, no key
