"""The commit log record encoder and the consume queue unit writer in pure Python: the twin of ``_record_c.c``.

Same API, same bytes written, same return values, same exception classes (DESIGN.md "Compiled hot paths");
``quasar.native.load_twin("quasar.storage._record")`` picks one, ``QUASAR_PURE_PYTHON=1`` forces this one.
These docstrings are the specification of both. The record layout is documented in
:mod:`quasar.storage.record` (RocketMQ ``CommitLog.DefaultAppendMessageCallback.doAppend`` and
``MessageExtEncoder``), the consume queue unit in :mod:`quasar.storage.consume_queue` (``>qiq``: commit log
offset, size, tag hash; RocketMQ ``ConsumeQueue.putMessagePositionInfo``).

Arguments are checked in signature order, each completely (type, then range) before the next, then the sizes
and the room in the buffer; nothing is written unless every check passes. Errors:

- ``TypeError``: an int argument that is not an ``int`` (``bool`` is one), ``queue_flag`` / ``middle`` /
  ``tail`` not exactly ``bytes``, ``bodies`` / ``offsets`` not a list or tuple, a body or ``buf`` without the
  buffer protocol, a unit offset that is not an ``int``;
- ``BufferError``: ``buf`` read-only or not C-contiguous, a body not C-contiguous;
- ``ValueError``: a negative (or past 2**63) ``position``, ``queue_flag`` not 8 or ``middle`` not 48 bytes,
  the records or units not fitting in ``buf``, a unit field out of its range, bad ``start`` / ``stop``;
- :class:`~quasar.storage.errors.InvalidMessageError` (also a ValueError): a record field out of its range
  (``magic`` outside u32, an offset outside i64, a record longer than 2**31 - 1 bytes).

CRC-32 here is ISA-L's (``isal.isal_zlib.crc32``), zlib's polynomial as RocketMQ ``UtilAll.crc32``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from isal.isal_zlib import crc32 as _isal_crc32

from quasar.storage.errors import InvalidMessageError

__all__ = ["_crc32_paths", "crc32", "pack_record", "pack_records", "pack_units"]

_HEADER = struct.Struct(">iIi8sqq48si")
"""The 88 bytes before the body: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID+FLAG (pre-packed), QUEUEOFFSET,
PHYSICALOFFSET, SYSFLAG..PreparedTransactionOffset (pre-packed), BODY length."""
_UNIT = struct.Struct(">qiq")
_BODY_POSITION = 88
_CRC32_RESERVED_LEN = 20
_CRC32_TAIL_FORMAT = b"__CRC32#\x01%010d\x02"
_MAX_INT = 0x7FFFFFFF
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


def crc32(data: object, value: int = 0) -> int:
    """``zlib.crc32(data, value)``: the CRC-32 of a bytes-like object, continuing from ``value``. Raises
    TypeError for a non-int ``value`` or a non-buffer ``data``, BufferError for a non-contiguous one."""
    if not isinstance(value, int):
        raise TypeError(f"value must be an int, not {type(value).__name__}")
    return _isal_crc32(_bytes_view(data), value & 0xFFFFFFFF)


def _crc32_paths(limit: int = -1) -> tuple[bool, bool]:
    """Tests only: the compiled twin's CRC-32 implementations in use, (PCLMULQDQ, AVX-512); this twin has
    neither."""
    return False, False


def _int(value: object, name: str) -> int:
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _position(value: object) -> int:
    position = _int(value, "position")
    if not 0 <= position <= _I64_MAX:
        raise ValueError("position outside the buffer")
    return position


def _i64(value: object, name: str) -> int:
    number = _int(value, name)
    if not _I64_MIN <= number <= _I64_MAX:
        raise InvalidMessageError(f"record field out of range: {name}")
    return number


def _magic(value: object) -> int:
    magic = _int(value, "magic")
    if not 0 <= magic <= 0xFFFFFFFF:
        raise InvalidMessageError("record field out of range: magic")
    return magic


def _bytes(value: object, name: str, length: int = -1) -> bytes:
    if type(value) is not bytes:
        raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    if length >= 0 and len(value) != length:
        raise ValueError(f"{name} must be {length} bytes, got {len(value)}")
    return value


def _target(buf: object) -> memoryview:
    """``buf`` as a writable 1-D byte view (TypeError, BufferError), as ``PyBUF_WRITABLE`` takes it."""
    view = memoryview(buf)  # type: ignore[arg-type]
    if view.readonly:
        raise BufferError("the buffer is not writable")
    if not view.c_contiguous:
        raise BufferError("the buffer is not C-contiguous")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _bytes_view(body: object) -> memoryview:
    """A body as a 1-D byte view of its bytes (TypeError, BufferError), as ``PyBUF_SIMPLE`` takes it."""
    view = memoryview(body)  # type: ignore[arg-type]
    if not view.c_contiguous:
        raise BufferError("the buffer is not C-contiguous")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _record_size(length: int, tail: bytes, append_prop_crc: bool) -> int:
    total = _BODY_POSITION + length + len(tail) + (_CRC32_RESERVED_LEN if append_prop_crc else 0)
    if total > _MAX_INT:
        raise InvalidMessageError("record field out of range: record longer than 2147483647 bytes")
    return total


def _write(
    buf: memoryview,
    position: int,
    physical_offset: int,
    magic: int,
    queue_flag: bytes,
    queue_offset: int,
    middle: bytes,
    body: memoryview,
    tail: bytes,
    append_prop_crc: bool,
) -> int:
    """Write one checked record; the same steps, in the same order, as the compiled ``write_record``."""
    length = len(body)
    p = position + _BODY_POSITION
    q = p + length
    end = q + len(tail)
    _HEADER.pack_into(
        buf,
        position,
        end - position + (_CRC32_RESERVED_LEN if append_prop_crc else 0),
        magic,
        _isal_crc32(body) & 0x7FFFFFFF,
        queue_flag,
        queue_offset,
        physical_offset,
        middle,
        length,
    )
    buf[p:q] = body
    buf[q:end] = tail
    if append_prop_crc:
        q = end + _CRC32_RESERVED_LEN
        buf[end:q] = _CRC32_TAIL_FORMAT % (_isal_crc32(buf[position:end]) & 0x7FFFFFFF)
        return q
    return end


def pack_record(
    buf: object,
    position: object,
    physical_offset: object,
    magic: object,
    queue_flag: object,
    queue_offset: object,
    middle: object,
    body: object,
    tail: object,
    append_prop_crc: object,
    unit_buf: object = None,
    unit_position: object = 0,
    tag_hash: object = 0,
) -> int:
    """Write one commit log record at ``buf[position:]`` (and, with ``unit_buf``, its consume queue unit) and
    return the position just past the record.

    Args:
        buf: a writable C-contiguous buffer (a mapped segment's memoryview).
        position: where the record starts in ``buf`` (bytes).
        physical_offset: PHYSICALOFFSET, the record's own commit log offset (i64).
        magic: MAGICCODE (u32): V1 ``0xDAA320A7`` or V2 ``0xDAA320AB`` per the topic length.
        queue_flag: QUEUEID and FLAG packed big-endian (``>ii``, 8 bytes).
        queue_offset: QUEUEOFFSET (i64).
        middle: SYSFLAG .. PreparedTransactionOffset packed (``>iq4siq4siiq``, 48 bytes).
        body: the body, any C-contiguous buffer (its bytes).
        tail: the TOPIC and PROPERTIES fields up to the reserved ``__CRC32#`` property (bytes).
        append_prop_crc: truthy: end with the 20-byte ``__CRC32#`` property, the CRC of every byte before it.
        unit_buf: None, or a writable buffer (a consume queue file) that gets the record's 20-byte unit
            ``>qiq`` (``physical_offset``, the record's size, ``tag_hash``) at ``unit_position``: the put path
            writes both with one call.
        unit_position: where the unit goes in ``unit_buf`` (bytes); not read without ``unit_buf``.
        tag_hash: the unit's tag hash (i64; ValueError outside); not read without ``unit_buf``.

    Writes ``88 + len(body) + len(tail) (+ 20)`` bytes: TOTALSIZE, BODYCRC (CRC-32 of the body &
    0x7FFFFFFF), the fields, the body, the tail, the property. Checks the record's arguments, its size and
    room, then ``unit_buf``, ``unit_position``, ``tag_hash`` and the unit's room (ValueError). Errors: see
    the module docstring; nothing is written when one is raised.
    """
    target = _target(buf)
    start = _position(position)
    physical = _i64(physical_offset, "physical_offset")
    magic_value = _magic(magic)
    flag = _bytes(queue_flag, "queue_flag", 8)
    queue = _i64(queue_offset, "queue_offset")
    fields = _bytes(middle, "middle", 48)
    view = _bytes_view(body)
    tail_bytes = _bytes(tail, "tail")
    crc = bool(append_prop_crc)
    total = _record_size(len(view), tail_bytes, crc)
    if start + total > len(target):
        raise ValueError("the record does not fit in the buffer")
    if unit_buf is None:
        return _write(target, start, physical, magic_value, flag, queue, fields, view, tail_bytes, crc)
    units = _target(unit_buf)
    at = _position(unit_position)
    tag = _int(tag_hash, "tag_hash")
    if not _I64_MIN <= tag <= _I64_MAX:
        raise ValueError("consume queue unit field out of range: tag_hash")
    if at + 20 > len(units):
        raise ValueError("the unit does not fit in the buffer")
    end = _write(target, start, physical, magic_value, flag, queue, fields, view, tail_bytes, crc)
    _UNIT.pack_into(units, at, physical, total, tag)
    return end


def pack_records(
    buf: object,
    position: object,
    base_offset: object,
    magic: object,
    queue_flag: object,
    queue_offset: object,
    middle: object,
    bodies: object,
    tail: object,
    append_prop_crc: object,
) -> tuple[int, tuple[int, ...]]:
    """Write one record per body, back to back from ``buf[position:]`` on (RocketMQ ``putMessages``: each
    record is the one :func:`pack_record` writes), and return ``(end position, offsets)``.

    Record *i* has QUEUEOFFSET ``queue_offset + i`` and PHYSICALOFFSET ``base_offset + its position`` (the
    buffer is a segment that starts at commit log offset ``base_offset``); ``offsets`` is the tuple of those
    commit log offsets. ``bodies`` is a list or tuple of C-contiguous buffers; the other arguments are those
    of :func:`pack_record`. After the arguments, in order: each body (buffer, then record size), the last
    queue offset within i64 (InvalidMessageError), the room in ``buf`` (ValueError), the last commit log
    offset within i64 (InvalidMessageError). Nothing is written when an error is raised; an empty batch
    writes nothing and returns ``(position, ())``. The compiled twin runs the writing without the GIL from
    64 KiB on.
    """
    target = _target(buf)
    start = _position(position)
    base = _i64(base_offset, "base_offset")
    magic_value = _magic(magic)
    flag = _bytes(queue_flag, "queue_flag", 8)
    queue = _i64(queue_offset, "queue_offset")
    fields = _bytes(middle, "middle", 48)
    if not isinstance(bodies, list | tuple):
        raise TypeError(f"bodies must be a list or a tuple, not {type(bodies).__name__}")
    tail_bytes = _bytes(tail, "tail")
    crc = bool(append_prop_crc)
    views: list[memoryview] = []
    needed = 0
    for body in bodies:
        view = _bytes_view(body)
        views.append(view)
        needed += _record_size(len(view), tail_bytes, crc)
    if views and queue + len(views) - 1 > _I64_MAX:
        raise InvalidMessageError("record field out of range: queue_offset")
    if start + needed > len(target):
        raise ValueError("the records do not fit in the buffer")
    if not _I64_MIN <= base + start <= _I64_MAX - needed:
        raise InvalidMessageError("record field out of range: physical_offset")
    offsets: list[int] = []
    add = offsets.append
    at = start
    for view in views:
        add(base + at)
        at = _write(target, at, base + at, magic_value, flag, queue, fields, view, tail_bytes, crc)
        queue += 1
    return at, tuple(offsets)


def pack_units(
    buf: object,
    position: object,
    offsets: object,
    start: object,
    stop: object,
    end_offset: object,
    tag_hash: object,
) -> int:
    """Write the consume queue units of the records ``offsets[start:stop]`` from ``buf[position:]`` on and
    return the position past the last (``position + 20 * (stop - start)``).

    Unit *i* is ``>qiq``: ``offsets[i]``, the record's size (``offsets[i + 1] - offsets[i]``, or
    ``end_offset - offsets[i]`` for the last offset of the list), ``tag_hash``. Checks, in order: ``buf``,
    ``position``, ``offsets`` a list or tuple, ``start`` and ``stop`` ints with ``0 <= start <= stop <=
    len(offsets)``, ``end_offset`` and ``tag_hash`` ints within i64, room in ``buf``, then each offset read
    (an int within i64; TypeError, ValueError) and each size within i32 (ValueError). Nothing is written when
    an error is raised.
    """
    target = _target(buf)
    at = _position(position)
    if not isinstance(offsets, list | tuple):
        raise TypeError(f"offsets must be a list or a tuple, not {type(offsets).__name__}")
    first = _int(start, "start")
    last = _int(stop, "stop")
    if not 0 <= first <= last <= len(offsets):
        raise ValueError("need 0 <= start <= stop <= len(offsets)")
    end = _int(end_offset, "end_offset")
    if not _I64_MIN <= end <= _I64_MAX:
        raise ValueError("consume queue unit field out of range: end_offset")
    tag = _int(tag_hash, "tag_hash")
    if not _I64_MIN <= tag <= _I64_MAX:
        raise ValueError("consume queue unit field out of range: tag_hash")
    if at + (last - first) * 20 > len(target):
        raise ValueError("the units do not fit in the buffer")
    units = _unit_fields(offsets, first, last, end)
    pack_into = _UNIT.pack_into
    for offset, size in units:
        pack_into(target, at, offset, size, tag)
        at += 20
    return at


def _unit_fields(offsets: Sequence[object], first: int, last: int, end: int) -> list[tuple[int, int]]:
    """(offset, size) of units ``first`` to ``last`` (exclusive), each checked as :func:`pack_units` says."""
    fields: list[tuple[int, int]] = []
    if first == last:
        return fields
    offset = _unit_offset(offsets[first])
    for i in range(first, last):
        following = _unit_offset(offsets[i + 1]) if i + 1 < len(offsets) else end
        size = following - offset
        if not -_MAX_INT - 1 <= size <= _MAX_INT:
            raise ValueError("consume queue unit field out of range: size")
        fields.append((offset, size))
        offset = following
    return fields


def _unit_offset(item: object) -> int:
    offset = _int(item, "a commit log offset")
    if not _I64_MIN <= offset <= _I64_MAX:
        raise ValueError("consume queue unit field out of range: commit log offset")
    return offset
