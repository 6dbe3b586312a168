"""The message keys of a stored Pulsar entry, for the store's IndexFile: pure-Python twin of ``_entry_keys_c``.

Same API, results, exception classes and messages as the compiled module (``_entry_keys_c.c``, whose
comment gives the layouts and the fields read); use :mod:`quasar.protocol.entry_keys`, which picks one of
the two and decompresses compressed batches between :func:`scan_entry` and :func:`batch_keys`.

The walk reads the protobuf wire format by hand (not with the protobuf runtime) so that both twins decide
the same way what is malformed: a bad tag (field 0, a number above 2**29 - 1, wire type 3, 4, 6 or 7), a
varint longer than 10 bytes, a field running past its message. A known field with another wire type is
skipped as unknown, the last occurrence of a field wins, a compression value outside 0..4 is ignored
(proto2's closed enums); only the keys are checked for UTF-8 (strict, as ``bytes.decode``).
"""

from __future__ import annotations

import operator
import struct

from .errors import MalformedBatchError, MalformedFrameError

__all__ = ["MIN_BATCH_ITEM_SIZE", "batch_keys", "scan_entry"]

MIN_BATCH_ITEM_SIZE = 6
"""Bytes of the smallest batch item: a 4-byte metadata size and a SingleMessageMetadata holding only
``payload_size`` (tag and a one-byte varint), with an empty payload; a batch of n bytes holds n // 6 items
at most (the C twin's ``EK_MIN_ITEM_SIZE``)."""

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MASK64 = (1 << 64) - 1
_MAX_FIELD = 536870911
_FIXED_WIDTH = {1: 8, 5: 4}  # fixed64, fixed32
_BAD_WIRE_TYPES = frozenset((3, 4, 6, 7))  # groups (refused, as qs_pb.h) and undefined
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

# qs_pb.h's error codes and their wording
_TRUNCATED, _BAD_VARINT, _BAD_TAG = -1, -2, -3
_REASONS = {
    _TRUNCATED: "truncated field",
    _BAD_VARINT: "varint longer than 10 bytes",
    _BAD_TAG: "invalid tag",
}


class _WireError(Exception):
    """A protobuf wire-format error at ``at`` (offset of the failing field's tag from the message start)."""

    def __init__(self, code: int, at: int) -> None:
        super().__init__(code, at)
        self.code = code
        self.at = at


def _view(data: object) -> memoryview:
    """``data`` as a flat unsigned-byte memoryview; BufferError when not C-contiguous, as PyBUF_SIMPLE."""
    view = memoryview(data)  # type: ignore[arg-type]  # TypeError for a non-buffer, as the C twin
    if not view.c_contiguous:
        raise BufferError("memoryview: underlying buffer is not C-contiguous")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """``(value, next position)`` of the varint at ``pos``; raises ``_WireError`` (``at`` to be set)."""
    if pos >= end:
        raise _WireError(_TRUNCATED, 0)
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    pos += 1
    shift = 7
    while shift < 70:
        if pos >= end:
            raise _WireError(_TRUNCATED, 0)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _MASK64, pos
        shift += 7
    raise _WireError(_BAD_VARINT, 0)


def _int32(value: int) -> int:
    """The low 32 bits of a varint as a signed int32 (how protobuf reads int32 and enum fields)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _compression(value: int, current: int) -> int:
    """CompressionType is a closed enum (proto2): a value outside 0..4 is an unknown field, ``current`` stays."""
    value = _int32(value)
    return value if 0 <= value <= 4 else current


# The two walkers below inline the one-byte cases of tags, varints and lengths (nearly every field of these
# messages): a call per field would make the pure-Python twin slower than the protobuf runtime it replaces.


def _walk_metadata(
    buf: memoryview, start: int, end: int
) -> tuple[tuple[int, int] | None, int, int, int | None, bool]:
    """MessageMetadata at ``buf[start:end]``: ``(key span, compression, uncompressed_size,
    num_messages_in_batch or None, encrypted)``; raises ``_WireError`` with ``at`` from ``start``."""
    key = None
    compression = 0
    uncompressed_size = 0
    num_messages = None
    encrypted = False
    pos = field_start = start
    try:
        while pos < end:
            field_start = pos
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(buf, pos, end)
            field = tag >> 3
            wire_type = tag & 7
            if field == 0 or field > _MAX_FIELD or wire_type in _BAD_WIRE_TYPES:
                raise _WireError(_BAD_TAG, 0)
            if wire_type == 0 or wire_type == 2:  # both start with a varint: the value, or the length
                if pos < end and buf[pos] < 0x80:
                    value = buf[pos]
                    pos += 1
                else:
                    value, pos = _varint(buf, pos, end)
                if wire_type == 2:
                    if value > end - pos:
                        raise _WireError(_TRUNCATED, 0)
                    if field == 6:
                        key = (pos, pos + value)
                    elif field == 13:
                        encrypted = True
                    pos += value
                elif field == 8:
                    compression = _compression(value, compression)
                elif field == 9:
                    uncompressed_size = value & 0xFFFFFFFF
                elif field == 11:
                    num_messages = _int32(value)
            else:
                width = _FIXED_WIDTH[wire_type]
                if end - pos < width:
                    raise _WireError(_TRUNCATED, 0)
                pos += width
    except _WireError as exc:
        exc.at = field_start - start
        raise
    return key, compression, uncompressed_size, num_messages, encrypted


def _walk_single(buf: memoryview, start: int, end: int) -> tuple[int, int, int | None]:
    """SingleMessageMetadata at ``buf[start:end]``: ``(key start, key end, payload_size or None)``, the key
    span ``(-1, -1)`` without a key; raises ``_WireError`` with ``at`` from ``start``."""
    key_start = key_end = -1
    payload_size = None
    pos = field_start = start
    try:
        while pos < end:
            field_start = pos
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(buf, pos, end)
            field = tag >> 3
            wire_type = tag & 7
            if field == 0 or field > _MAX_FIELD or wire_type in _BAD_WIRE_TYPES:
                raise _WireError(_BAD_TAG, 0)
            if wire_type == 0 or wire_type == 2:  # both start with a varint: the value, or the length
                if pos < end and buf[pos] < 0x80:
                    value = buf[pos]
                    pos += 1
                else:
                    value, pos = _varint(buf, pos, end)
                if wire_type == 2:
                    if value > end - pos:
                        raise _WireError(_TRUNCATED, 0)
                    if field == 2:
                        key_start, key_end = pos, pos + value
                    pos += value
                elif field == 3:
                    payload_size = _int32(value)
            else:
                width = _FIXED_WIDTH[wire_type]
                if end - pos < width:
                    raise _WireError(_TRUNCATED, 0)
                pos += width
    except _WireError as exc:
        exc.at = field_start - start
        raise
    return key_start, key_end, payload_size


def _walk_batch(buf: memoryview, off: int, size: int, count: int, keys: list[str]) -> None:
    """Append the partition keys of ``count`` batch items in ``buf[off:off + size]`` to ``keys``."""
    if count < 0:
        raise MalformedBatchError(f"negative message count {count}")
    if count > size // MIN_BATCH_ITEM_SIZE:  # refused before any work on the items
        raise MalformedBatchError(
            f"num_messages_in_batch {count} cannot fit in {size} bytes "
            f"(a batch item takes at least {MIN_BATCH_ITEM_SIZE})"
        )
    end_of_payload = off + size
    pos = off
    for index in range(count):
        if end_of_payload - pos < 4:
            raise MalformedBatchError(f"batch item {index} of {count}: no room for its metadata size")
        metadata_size = _U32.unpack_from(buf, pos)[0]
        start = pos + 4
        if metadata_size > end_of_payload - start:
            raise MalformedBatchError(f"batch item {index}: metadata size {metadata_size} runs past the end")
        end = start + metadata_size
        try:
            key_start, key_end, payload_size = _walk_single(buf, start, end)
        except _WireError as exc:
            raise MalformedBatchError(
                f"batch item {index}: unparsable SingleMessageMetadata: {_REASONS[exc.code]} at byte {exc.at}"
            ) from None
        if payload_size is None:
            raise MalformedBatchError(f"batch item {index}: SingleMessageMetadata without payload_size")
        key = None
        if key_start >= 0:
            try:
                key = str(buf[key_start:key_end], "utf-8")
            except UnicodeDecodeError:
                raise MalformedBatchError(f"batch item {index}: partition_key is not valid UTF-8") from None
        if payload_size < 0 or payload_size > end_of_payload - end:
            raise MalformedBatchError(
                f"batch item {index}: payload_size {payload_size} runs past the payload"
            )
        pos = end + payload_size
        if key is not None:
            keys.append(key)
    if pos != end_of_payload:
        raise MalformedBatchError(f"{end_of_payload - pos} bytes left over after {count} batch items")


def scan_entry(body: object, /) -> tuple[list[str], int, int, int, int]:
    """Read the keys of a stored Pulsar entry, as far as no decompression is needed.

    Args:
        body: a bytes-like object, ``[0x0e02 size bem]? [0x0e01 crc]? [u32 metadataSize][MessageMetadata]
            [payload]``.

    Returns:
        ``(keys, pending_compression, uncompressed_size, count, payload_start)``: ``keys`` holds
        MessageMetadata.partition_key if present, then, for an unencrypted batch (num_messages_in_batch
        present, no encryption_keys) that is not compressed, every SingleMessageMetadata.partition_key in
        order. ``pending_compression`` is 0 when ``keys`` is complete (the other three are then 0); else the
        entry is a compressed unencrypted batch: decompress ``body[payload_start:]`` with that
        CompressionType to ``uncompressed_size`` bytes and extend ``keys`` with ``batch_keys(that, count)``.

    Raises:
        MalformedFrameError: a header or metadataSize runs past the end, the MessageMetadata is unparsable,
            or its partition_key is not UTF-8.
        MalformedBatchError: see :func:`batch_keys`.
        TypeError, BufferError: ``body`` is not a C-contiguous buffer.
    """
    buf = _view(body)
    size = len(buf)
    pos = 0
    if size >= 2 and _U16.unpack_from(buf, 0)[0] == 0x0E02:
        if size < 6:
            raise MalformedFrameError("broker entry metadata header runs past the end of the entry")
        bem_size = _U32.unpack_from(buf, 2)[0]
        if bem_size > size - 6:
            raise MalformedFrameError(
                f"brokerEntryMetadataSize {bem_size} runs past the end of the entry ({size - 6} bytes left)"
            )
        pos = 6 + bem_size
    if size - pos >= 2 and _U16.unpack_from(buf, pos)[0] == 0x0E01:
        if size - pos < 6:
            raise MalformedFrameError("checksum header runs past the end of the entry")
        pos += 6
    if size - pos < 4:
        raise MalformedFrameError("entry has no metadataSize field")
    metadata_size = _U32.unpack_from(buf, pos)[0]
    metadata_start = pos + 4
    if metadata_size > size - metadata_start:
        raise MalformedFrameError(
            f"metadataSize {metadata_size} runs past the end of the entry ({size - metadata_start} bytes left)"
        )
    metadata_end = metadata_start + metadata_size
    try:
        key, compression, uncompressed_size, num_messages, encrypted = _walk_metadata(
            buf, metadata_start, metadata_end
        )
    except _WireError as exc:
        raise MalformedFrameError(
            f"unparsable MessageMetadata: {_REASONS[exc.code]} at byte {exc.at}"
        ) from None
    keys: list[str] = []
    if key is not None:
        try:
            keys.append(str(buf[key[0] : key[1]], "utf-8"))
        except UnicodeDecodeError:
            raise MalformedFrameError("MessageMetadata partition_key is not valid UTF-8") from None
    if num_messages is None or encrypted:
        return keys, 0, 0, 0, 0
    if compression:
        return keys, compression, uncompressed_size, num_messages, metadata_end
    _walk_batch(buf, metadata_end, size - metadata_end, num_messages, keys)
    return keys, 0, 0, 0, 0


def batch_keys(payload: object, count: int, /) -> list[str]:
    """The partition keys of the items of an uncompressed batch payload, in order.

    Args:
        payload: a bytes-like object, ``count`` items of ``[u32 size][SingleMessageMetadata][item payload of
            payload_size bytes]`` and nothing after them.
        count: num_messages_in_batch (an int; OverflowError outside a signed 64-bit range, as the C twin).

    Returns:
        One str per item that has a partition_key (items without one add nothing).

    Raises:
        MalformedBatchError: negative ``count``, a size that runs past the payload, an unparsable
            SingleMessageMetadata (bad tag or varint, truncated field), one without payload_size, a
            partition_key that is not UTF-8, a negative payload_size, or bytes left over after ``count`` items.
        TypeError, BufferError: ``payload`` is not a C-contiguous buffer, or ``count`` is not an int.
    """
    buf = _view(payload)
    count = operator.index(count)
    if not _I64_MIN <= count <= _I64_MAX:
        raise OverflowError("int too big to convert")
    keys: list[str] = []
    _walk_batch(buf, 0, len(buf), count, keys)
    return keys
