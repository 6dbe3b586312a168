"""Stored entries -> column buffers of the read schema, pure Python: the twin of the compiled
``quasar.spark._columns_c`` (same API, same bytes; DESIGN.md "Compiled hot paths"). :mod:`quasar.spark.columns`
picks one and wraps the buffers in Arrow arrays.

:func:`decode_entries` takes whole entries as a reader with ``deliver_entries`` hands them out
(:class:`quasar.client.StoredEntry`: ``MessageMetadata`` bytes and the uncompressed payload) and builds, in one
pass, the buffers of every column of :data:`quasar.spark.schema.READ_SCHEMA_DDL` but the two constant ones
(``topic``, ``partition``), for the messages whose key ``(ledgerId, entryId, batchIndex)`` lies in
``(start, end]`` (batch index -1 ordered as ``ENTRY_END``, after every item of its entry).

Each message is what the message-by-message path (``quasar.client.Message``) gives:

| column          | batch item (``num_messages_in_batch`` set)     | other entry                               |
|-----------------|------------------------------------------------|-------------------------------------------|
| key             | SingleMessageMetadata.partition_key (2)        | MessageMetadata.partition_key (6)         |
| value           | the item's bytes                               | the payload                               |
| messageId       | MessageIdData: 1 ledger, 2 entry, 3 partition if != -1, 4 index, 6 batch size; no 4, 6 unbatched |
| batchIndex      | the item's index                               | -1                                        |
| publishTime     | MessageMetadata.publish_time (3), ms * 1000 (µs)                                           |
| eventTime       | SingleMessageMetadata.event_time (5)           | MessageMetadata.event_time (12); 0 = null |
| properties      | SingleMessageMetadata.properties (1)           | MessageMetadata.properties (4)            |
| redeliveryCount | the entry's                                                                                |

An empty or absent key is null. Properties are a map in first-seen key order; a repeated key keeps its last
value (what ``{kv.key: kv.value ...}`` gives). Times wrap modulo 2**64 like Arrow's unchecked multiply.

An entry whose metadata or batch does not parse (a field with the wrong wire type, a size past the end, bytes
left over, a batch item without ``payload_size``, a key or property that is not UTF-8) adds no row; it is
reported in ``bad`` and the caller logs it (the message path discards such an entry too).
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["BUFFERS", "ENTRY_END", "decode_entries"]

#: Sort value of batch index -1 (the whole entry), as :data:`quasar.spark.positions.ENTRY_END`.
ENTRY_END = 1 << 31

#: Names of the buffers :func:`decode_entries` returns, in order.
BUFFERS = (
    "key_validity", "key_offsets", "key_data", "value_offsets", "value_data", "id_offsets", "id_data",
    "ledger", "entry", "batch_index", "publish_us", "event_validity", "event_us", "props_offsets",
    "prop_key_offsets", "prop_key_data", "prop_value_offsets", "prop_value_data", "redelivery",
)  # fmt: skip

_U32 = struct.Struct(">I")
_M64 = (1 << 64) - 1
_I32_MAX = (1 << 31) - 1


class _Bad(Exception):
    pass


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 70:
        if pos >= end:
            raise _Bad("truncated")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & _M64, pos
        shift += 7
    raise _Bad("varint longer than 10 bytes")


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, Any]]:
    """(field, wire type, value) of a protobuf message at buf[pos:end]; value: int, or (start, end) for wt 2."""
    out: list[tuple[int, int, Any]] = []
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        wire, number = tag & 7, tag >> 3
        if number == 0 or number > 536870911 or wire in (3, 4, 6, 7):
            raise _Bad("bad tag")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            out.append((number, 0, value))
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if n > end - pos:
                raise _Bad("truncated")
            out.append((number, 2, (pos, pos + n)))
            pos += n
        else:
            size = 8 if wire == 1 else 4
            if end - pos < size:
                raise _Bad("truncated")
            pos += size
            out.append((number, wire, None))  # kept: a known field with this wire type is malformed
    return out


def _text(buf: bytes, span: tuple[int, int]) -> bytes:
    raw = buf[span[0] : span[1]]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("not UTF-8") from None
    return raw


def _keyvalue(buf: bytes, span: tuple[int, int]) -> tuple[bytes, bytes]:
    k = v = b""
    for number, wire, value in _fields(buf, span[0], span[1]):
        if number in (1, 2):
            if wire != 2:
                raise _Bad("key/value wire type")
            if number == 1:
                k = _text(buf, value)
            else:
                v = _text(buf, value)
    return k, v


#: (key, properties, event_time, then the varint fields kept by name) of MessageMetadata / SingleMessageMetadata
_ENTRY_FIELDS = (6, 4, 12, {3: "publish", 11: "batch"})
_ITEM_FIELDS = (2, 1, 5, {3: "size"})


def _message_fields(buf: bytes, pos: int, end: int, layout: tuple[Any, ...]) -> dict[str, Any]:
    """key (bytes or None), props (list of (k, v)), event (int), and size (payload_size or None) or publish
    and batch (num_messages_in_batch or None), as ``layout`` says."""
    key_f, props_f, event_f, varints = layout
    out: dict[str, Any] = {"key": None, "props": [], "event": 0, "size": None, "publish": 0, "batch": None}
    for number, wire, value in _fields(buf, pos, end):
        if number in (key_f, props_f):
            if wire != 2:
                raise _Bad("key or properties wire type")
            if number == key_f:
                out["key"] = _text(buf, value)
            else:
                out["props"].append(_keyvalue(buf, value))
        elif number == event_f or number in varints:
            if wire != 0:
                raise _Bad("varint field wire type")
            out["event" if number == event_f else varints[number]] = value
    return out


def _put_varint(out: bytearray, value: int) -> None:
    value &= _M64
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _message_id(ledger: int, entry: int, partition: int, index: int, size: int) -> bytes:
    out = bytearray(b"\x08")
    _put_varint(out, ledger)
    out.append(0x10)
    _put_varint(out, entry)
    if partition != -1:
        out.append(0x18)
        _put_varint(out, partition)
    if index != -1:
        out.append(0x20)
        _put_varint(out, index)
    if size != 0:
        out.append(0x30)
        _put_varint(out, size)
    return bytes(out)


def _int32(value: int) -> int:
    """A varint as protobuf reads an int32 field: the low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _entry_rows(
    ledger: int, entry: int, meta: bytes, payload: bytes, partition: int, start: Any, end: Any
) -> list[tuple[Any, ...]]:
    """Rows (key, value, id, batch index, publish ms, event ms, props) of one entry in (start, end]."""
    md = _message_fields(meta, 0, len(meta), _ENTRY_FIELDS)
    publish = md["publish"]
    rows = []
    if md["batch"] is None:
        key = (ledger, entry, ENTRY_END)
        if start < key <= end:
            rid = _message_id(ledger, entry, partition, -1, 0)
            rows.append((md["key"], payload, rid, -1, publish, md["event"], md["props"]))
        return rows
    count = _int32(md["batch"])
    if count < 0:
        raise _Bad("negative num_messages_in_batch")
    total = len(payload)
    pos = 0
    for index in range(count):
        if total - pos < 4:
            raise _Bad(f"batch item {index} runs past the payload")
        meta_end = pos + 4 + _U32.unpack_from(payload, pos)[0]
        if meta_end > total:
            raise _Bad(f"batch item {index} runs past the payload")
        single = _message_fields(payload, pos + 4, meta_end, _ITEM_FIELDS)
        size = single["size"]
        if size is None:
            raise _Bad(f"batch item {index} has no payload_size")
        if size > total - meta_end:
            raise _Bad(f"batch item {index} runs past the payload")
        pos = meta_end + size
        key = (ledger, entry, index)
        if start < key <= end:
            rid = _message_id(ledger, entry, partition, index, count)
            value = payload[meta_end:pos]
            rows.append((single["key"], value, rid, index, publish, single["event"], single["props"]))
    if pos != total:
        raise _Bad(f"{total - pos} bytes left over after {count} batch items")
    return rows


def decode_entries(
    entries: list[tuple[int, int, bytes, bytes, int]],
    partition: int,
    start: tuple[int, int, int],
    end: tuple[int, int, int],
) -> tuple[int, tuple[bytes, ...], list[tuple[int, int, str]]]:
    """Column buffers of the messages in ``(start, end]`` of ``entries``.

    Args:
        entries: ``(ledgerId, entryId, MessageMetadata bytes, uncompressed payload bytes, redelivery count)``
            per entry, in order.
        partition: the partition index for the message ids (-1: not partitioned).
        start, end: ordering keys ``(ledgerId, entryId, batchIndex or ENTRY_END)``; rows are ``start < key <=
            end``.

    Returns:
        ``(rows, buffers, bad)``: ``buffers`` in :data:`BUFFERS` order, each bytes: validity bitmaps (LSB
        first, 1 = valid) for key and eventTime, int32 offsets (rows + 1, little-endian) with their data for
        key, value, messageId, the properties map (offsets into its entries) and its keys and values, int64
        ledger, entry, publishTime and eventTime (µs), int32 batchIndex and redeliveryCount. ``bad``:
        ``(ledgerId, entryId, reason)`` of each entry skipped as malformed.

    Raises:
        TypeError: an entry is not such a tuple, or a field has the wrong type. ValueError: an int out of
            range (int64 ids, int32 partition and redelivery count). OverflowError: a variable-size column
            passes 2 GiB.
    """
    if not isinstance(entries, list):
        raise TypeError(f"entries must be a list, got {type(entries).__name__}")
    start, end = _key(start), _key(end)
    partition = _as_int(partition, 32)
    cols: dict[str, Any] = {name: bytearray() for name in BUFFERS}
    varlen = {n: [0] for n in ("key", "value", "id", "props", "prop_key", "prop_value")}
    fixed: dict[str, list[int]] = {
        "ledger": [],
        "entry": [],
        "batch": [],
        "publish": [],
        "event": [],
        "redel": [],
    }
    key_valid: list[bool] = []
    event_valid: list[bool] = []
    bad = []
    for item in entries:
        if not isinstance(item, tuple) or len(item) != 5:
            raise TypeError("each entry must be a tuple (ledgerId, entryId, metadata, payload, redelivery)")
        ledger, entry, meta, payload, redelivery = item
        ledger, entry = _as_int(ledger, 64), _as_int(entry, 64)
        if meta.__class__ is not bytes or payload.__class__ is not bytes:
            raise TypeError("an entry's metadata and payload must be bytes")
        redelivery = _as_int(redelivery, 32)
        try:
            rows = _entry_rows(ledger, entry, meta, payload, partition, start, end)
        except _Bad as exc:
            bad.append((ledger, entry, str(exc)))
            continue
        for key, value, rid, index, publish, event, props in rows:
            key_valid.append(bool(key))
            if key:
                cols["key_data"] += key
            varlen["key"].append(len(cols["key_data"]))
            cols["value_data"] += value
            varlen["value"].append(len(cols["value_data"]))
            cols["id_data"] += rid
            varlen["id"].append(len(cols["id_data"]))
            merged: dict[bytes, bytes] = {}
            for k, v in props:
                merged[k] = v
            for k, v in merged.items():
                cols["prop_key_data"] += k
                varlen["prop_key"].append(len(cols["prop_key_data"]))
                cols["prop_value_data"] += v
                varlen["prop_value"].append(len(cols["prop_value_data"]))
            varlen["props"].append(len(varlen["prop_key"]) - 1)
            fixed["ledger"].append(ledger)
            fixed["entry"].append(entry)
            fixed["batch"].append(index)
            fixed["publish"].append(_wrap_us(publish))
            event_valid.append(event != 0)
            fixed["event"].append(_wrap_us(event) if event else 0)
            fixed["redel"].append(redelivery)
    for name in ("key", "value", "id", "props", "prop_key", "prop_value"):
        if varlen[name][-1] > _I32_MAX:
            raise OverflowError(f"column {name} passes 2 GiB in one call; decode fewer entries at once")
        cols[f"{name}_offsets" if name != "props" else "props_offsets"] = struct.pack(
            f"<{len(varlen[name])}i", *varlen[name]
        )
    n = len(fixed["ledger"])
    cols["key_validity"] = _bitmap(key_valid)
    cols["event_validity"] = _bitmap(event_valid)
    cols["ledger"] = struct.pack(f"<{n}q", *fixed["ledger"])
    cols["entry"] = struct.pack(f"<{n}q", *fixed["entry"])
    cols["batch_index"] = struct.pack(f"<{n}i", *fixed["batch"])
    cols["publish_us"] = struct.pack(f"<{n}q", *fixed["publish"])
    cols["event_us"] = struct.pack(f"<{n}q", *fixed["event"])
    cols["redelivery"] = struct.pack(f"<{n}i", *fixed["redel"])
    return n, tuple(bytes(cols[name]) for name in BUFFERS), bad


def _wrap_us(ms: int) -> int:
    us = (ms * 1000) & _M64
    return us - (1 << 64) if us >= 1 << 63 else us


def _bitmap(bits: list[bool]) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _as_int(value: Any, bits: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"{value} does not fit in int{bits}")
    return int(value)


def _key(value: Any) -> tuple[int, int, int]:
    if not isinstance(value, tuple) or len(value) != 3:
        raise TypeError("start and end must be (ledgerId, entryId, batchIndex) tuples")
    return (_as_int(value[0], 64), _as_int(value[1], 64), _as_int(value[2], 64))
