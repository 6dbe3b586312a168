"""Bulk batch-entry encoder, pure Python: the twin of the compiled ``quasar.client._bulk_c`` (same API, same
bytes, same exception classes; DESIGN.md "Compiled hot paths"). :mod:`quasar.client.bulk` picks one.

:func:`encode_entries` turns rows given as columnar buffers in the Apache Arrow layout (no Python object per
row) into the uncompressed payloads of Pulsar batch entries (reference/pulsar-protocol.md §7.2): per row an
item ``[u32 BE size][SingleMessageMetadata][value]``, the SingleMessageMetadata written as protobuf and the C++
producer write it (fields in number order): properties (1, ``KeyValue{key 1, value 2}`` per map entry, in
order), partition_key (2, when the key is not null), payload_size (3), event_time (5, when not null),
sequence_id (8, always).

Column arguments (``offset`` is the Arrow array offset; ``validity`` a bitmap buffer or None = no nulls):

* binary / string column: ``(offset, validity, offsets, data)``: ``offsets`` int32 little-endian, row ``i``
  is ``data[offsets[offset+i]:offsets[offset+i+1]]``.
* int64 column: ``(offset, validity, values)``, little-endian int64.
* ``map<string,string>`` column: ``(offset, validity, offsets, keys, items)``: ``offsets`` int32 into the child
  columns ``keys`` and ``items`` (binary / string column tuples, absolute row numbers of the children).

Entries follow Java's ``BatchMessageContainerImpl`` room rule: a row joins the open entry while it has fewer
than ``max_messages`` items and the entry's value bytes plus the row's stay within ``max_bytes`` (a first row
always joins). Buffers are any bytes-like objects (``pyarrow.Buffer``, bytes, memoryview).

Errors: ValueError naming the row (0-based in this call) for a null value, a null property value, a key or
property that is not UTF-8, a negative event time or sequence id; ValueError for buffers too short or offsets
out of order or range; TypeError for arguments of the wrong shape.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

__all__ = ["encode_entries"]

_U32 = struct.Struct(">I")
_U64_MAX = (1 << 64) - 1
_I32_MAX = (1 << 31) - 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(data)) + data


def _view(obj: Any, name: str) -> memoryview:
    try:
        return memoryview(obj).cast("B")
    except TypeError:
        raise TypeError(f"{name} must be a bytes-like buffer, got {type(obj).__name__}") from None


def _index(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


class _Valid:
    """A validity bitmap (or none) over ``count`` rows from ``offset``."""

    __slots__ = ("bits", "offset")

    def __init__(self, offset: int, validity: Any, count: int, name: str) -> None:
        self.offset = offset
        self.bits = None if validity is None else _view(validity, f"{name} validity")
        if self.bits is not None and count > 0 and len(self.bits) * 8 < offset + count:
            raise ValueError(f"malformed column {name!r}: validity bitmap shorter than {offset + count} bits")

    def ok(self, i: int) -> bool:
        bits = self.bits
        if bits is None:
            return True
        j = self.offset + i
        return bool(bits[j >> 3] >> (j & 7) & 1)


class _Var(_Valid):
    """A binary / string column."""

    __slots__ = ("data", "name", "offs")

    def __init__(self, spec: Any, count: int, name: str) -> None:
        if not isinstance(spec, tuple) or len(spec) != 4:
            raise TypeError(f"column {name!r} must be (offset, validity, offsets, data)")
        offset = _index(spec[0], f"{name} offset")
        if offset < 0:
            raise ValueError(f"malformed column {name!r}: negative offset")
        super().__init__(offset, spec[1], count, name)
        self.name = name
        self.offs = _view(spec[2], f"{name} offsets")
        self.data = _view(spec[3], f"{name} data") if spec[3] is not None else memoryview(b"")
        if len(self.offs) < (offset + count + 1) * 4:
            raise ValueError(f"malformed column {name!r}: offsets buffer shorter than {count + 1} offsets")

    def get(self, i: int) -> bytes:
        j = (self.offset + i) * 4
        start = int.from_bytes(self.offs[j : j + 4], "little", signed=True)
        end = int.from_bytes(self.offs[j + 4 : j + 8], "little", signed=True)
        if not 0 <= start <= end <= len(self.data):
            raise ValueError(f"malformed column {self.name!r}: offsets out of order or past the data")
        return bytes(self.data[start:end])


class _Child(_Var):
    """A child column of a map: its row count is not known up front, so each row is bounds-checked."""

    def __init__(self, spec: Any, name: str) -> None:
        super().__init__(spec, 0, name)

    def get_or_none(self, i: int) -> bytes | None:
        """Row ``i`` (None when null)."""
        j = self.offset + i
        if (j + 2) * 4 > len(self.offs) or (self.bits is not None and j >> 3 >= len(self.bits)):
            raise ValueError(f"malformed column {self.name!r}: row {i} past its buffers")
        return self.get(i) if self.ok(i) else None


def _utf8(data: bytes, what: str, row: int) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 in row {row}") from None


def _int64(view: memoryview, index: int, name: str) -> int:
    j = index * 8
    if j + 8 > len(view):
        raise ValueError(f"malformed column {name!r}: values buffer too short")
    return int.from_bytes(view[j : j + 8], "little", signed=True)


def _event_column(spec: Any, count: int) -> tuple[_Valid, memoryview] | None:
    if spec is None:
        return None
    if not isinstance(spec, tuple) or len(spec) != 3:
        raise TypeError("column 'eventTime' must be (offset, validity, values)")
    offset = _index(spec[0], "eventTime offset")
    if offset < 0:
        raise ValueError("malformed column 'eventTime': negative offset")
    column = (_Valid(offset, spec[1], count, "eventTime"), _view(spec[2], "eventTime"))
    if len(column[1]) < (offset + count) * 8:
        raise ValueError("malformed column 'eventTime': values buffer too short")
    return column


class _Map(_Valid):
    """A ``map<string,string>`` column."""

    __slots__ = ("items", "keys", "offs")

    def __init__(self, spec: Any, count: int) -> None:
        if not isinstance(spec, tuple) or len(spec) != 5:
            raise TypeError("column 'properties' must be (offset, validity, offsets, keys, items)")
        offset = _index(spec[0], "properties offset")
        if offset < 0:
            raise ValueError("malformed column 'properties': negative offset")
        super().__init__(offset, spec[1], count, "properties")
        self.offs = _view(spec[2], "properties offsets")
        if len(self.offs) < (offset + count + 1) * 4:
            raise ValueError("malformed column 'properties': offsets buffer shorter than count + 1 offsets")
        self.keys = _Child(spec[3], "properties keys")
        self.items = _Child(spec[4], "properties values")

    def encode(self, i: int) -> bytes:
        """The properties fields of row ``i`` (empty when null)."""
        if not self.ok(i):
            return b""
        j = (self.offset + i) * 4
        start = int.from_bytes(self.offs[j : j + 4], "little", signed=True)
        end = int.from_bytes(self.offs[j + 4 : j + 8], "little", signed=True)
        if not 0 <= start <= end:
            raise ValueError("malformed column 'properties': offsets out of order")
        out = bytearray()
        for e in range(start, end):
            prop_key = self.keys.get_or_none(e)
            if prop_key is None:
                raise ValueError(f"property key is null in row {i}")
            prop_value = self.items.get_or_none(e)
            if prop_value is None:
                raise ValueError(f"property value is null in row {i}")
            _utf8(prop_key, "property key", i)
            _utf8(prop_value, "property value", i)
            out += _delimited(0x0A, _delimited(0x0A, prop_key) + _delimited(0x12, prop_value))
        return bytes(out)


class _Rows:
    """The parsed arguments of :func:`encode_entries`; :meth:`item` encodes one row."""

    def __init__(self, count: int, values: Any, keys: Any, properties: Any, event_times: Any, first: int,
                 rows: Any) -> None:  # fmt: skip
        self.first = first
        self.values = _Var(values, count, "value")
        self.keys = None if keys is None else _Var(keys, count, "key")
        self.events = _event_column(event_times, count)
        self.props = None if properties is None else _Map(properties, count)
        self.rows = None
        if rows is not None:
            self.rows = _view(rows, "rows")
            if len(self.rows) < count * 8:
                raise ValueError("rows buffer shorter than count int64 values")

    def item(self, i: int) -> tuple[bytes, int]:
        """Row ``i`` as ``([u32 size][SingleMessageMetadata][value], len(value))``."""
        if not self.values.ok(i):
            raise ValueError(f"value is null in row {i}")
        value = self.values.get(i)
        if len(value) > _I32_MAX:
            raise ValueError(f"value of row {i} is too large")
        smm = bytearray(b"" if self.props is None else self.props.encode(i))
        if self.keys is not None and self.keys.ok(i):
            key = self.keys.get(i)
            _utf8(key, "key", i)
            smm += _delimited(0x12, key)
        smm += b"\x18" + _varint(len(value))
        if self.events is not None and self.events[0].ok(i):
            event = _int64(self.events[1], self.events[0].offset + i, "eventTime")
            if event < 0:
                raise ValueError(f"eventTime is negative in row {i}")
            smm += b"\x28" + _varint(event)
        r = i if self.rows is None else _int64(self.rows, i, "rows")
        sequence_id = self.first + r
        if r < 0 or sequence_id > _U64_MAX:
            raise ValueError(f"sequence id of row {i} is out of range [0, 2**64)")
        smm += b"\x40" + _varint(sequence_id)
        return _U32.pack(len(smm)) + bytes(smm) + value, len(value)


def encode_entries(
    count: int,
    values: Any,
    keys: Any,
    properties: Any,
    event_times: Any,
    first_sequence_id: int,
    rows: Any,
    max_messages: int,
    max_bytes: int,
) -> list[tuple[bytes, int, int]]:
    """Encode ``count`` rows into batch entries (see the module docstring for the column tuples).

    Args:
        count: rows (>= 0). values: binary column (required, no nulls). keys / properties / event_times:
            columns or None. first_sequence_id: row ``i`` gets sequence id ``first_sequence_id + r`` with
            ``r = rows[i]`` (``rows``: an int64 buffer of ``count`` row numbers) or ``r = i`` when ``rows`` is
            None; must stay within [0, 2**64). max_messages / max_bytes: entry limits (>= 1).

    Returns:
        ``[(payload, num_messages, first_row), ...]`` in row order; ``first_row`` is the entry's first row
        (0-based in this call).

    Raises:
        TypeError / ValueError: see the module docstring.
    """
    count = _index(count, "count")
    first = _index(first_sequence_id, "first_sequence_id")
    max_messages = _index(max_messages, "max_messages")
    max_bytes = _index(max_bytes, "max_bytes")
    if count < 0 or max_messages < 1 or max_bytes < 1:
        raise ValueError("count must be >= 0 and max_messages, max_bytes >= 1")
    if max(count * 16, max_messages, max_bytes) > sys.maxsize:
        raise ValueError("count, max_messages or max_bytes is out of range")
    if not 0 <= first <= _U64_MAX:
        raise ValueError("first_sequence_id is out of range [0, 2**64)")
    parsed = _Rows(count, values, keys, properties, event_times, first, rows)
    entries: list[tuple[bytes, int, int]] = []
    parts: list[bytes] = []
    entry_bytes = 0
    entry_first = 0
    for i in range(count):
        item, size = parsed.item(i)
        if parts and (len(parts) >= max_messages or entry_bytes + size > max_bytes):
            entries.append((b"".join(parts), len(parts), entry_first))
            parts, entry_bytes, entry_first = [], 0, i
        parts.append(item)
        entry_bytes += size
    if parts:
        entries.append((b"".join(parts), len(parts), entry_first))
    return entries
