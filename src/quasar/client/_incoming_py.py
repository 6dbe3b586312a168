"""The client's receive fast path, pure Python: the twin of the compiled ``quasar.client._incoming_c`` (same
API, same results, same exception classes; DESIGN.md "Compiled hot paths"). :mod:`quasar.client.codec` picks
one.

* :func:`read_frames`: SEND_RECEIPT and MESSAGE frames decoded (below), every other frame handed back raw.
* :func:`split_batch`: a received batch payload cut into ``Message`` objects (C++ ``ConsumerImpl::
  receiveIndividualMessagesFromBatch``), each keeping its ``SingleMessageMetadata`` bytes.
* :func:`complete_receipt`: a SEND_RECEIPT's message ids handed to the waiters of its messages.

:func:`read_frames` cuts the complete frames of a received buffer (reference/pulsar-protocol.md §1) and decodes
the two commands that arrive once per message, SEND_RECEIPT and MESSAGE, without protobuf objects for the
command (C++ ``ClientConnection::handleIncomingCommand``). It is *conservative*: a frame is decoded here only
when its command holds nothing but the fields listed below, each at most once and with its proto wire type, and
(MESSAGE) its metadata passes the same checks as :func:`quasar.protocol.parse_headers_and_payload` (required
fields present, strings valid UTF-8). Every other frame, and every malformed one, is handed back whole as a
``raw`` event for :class:`quasar.protocol.FrameDecoder`, which decodes it or raises its protocol error, so the
errors and every rare field stay the decoder's.

Events, in stream order::

    (0, start, end)                       raw: buffer[start:end] is one whole frame (or, when the length prefix
                                          is refused, the rest of the buffer) for the FrameDecoder
    (7, producer_id, sequence_id, ledger_id, entry_id)
                                          SEND_RECEIPT{producer_id 1, sequence_id 2, message_id 3 (required
                                          here), highest_sequence_id 4}; ids as signed int64 (``to_int64``)
    (9, consumer_id, ledger_id, entry_id, redelivery_count, checksum_ok, metadata, payload,
     num_messages_in_batch, num_chunks_from_msg, compression, uncompressed_size)
                                          MESSAGE{consumer_id 1, message_id 2, redelivery_count 3 (uint32),
                                          consumer_epoch 5} (an ``ack_set`` goes raw) followed by
                                          ``[0x0e01 crc]? [metadataSize][MessageMetadata][payload]`` (broker
                                          entry metadata goes raw); checksum_ok: None without a checksum, else
                                          whether the CRC-32C matches; metadata: its bytes (checked: protobuf
                                          parses them); payload: bytes; then the metadata fields the consumer
                                          routes by, as protobuf reads them: num_messages_in_batch (int32, None
                                          when absent), num_chunks_from_msg (int32), compression (0..4),
                                          uncompressed_size (uint32), 0 when absent

MessageIdData here: ledgerId 1 and entryId 2 (required), partition 3, batch_index 4, batch_size 6 (varints).
MessageMetadata here: every field of PulsarApi.proto except encryption (13-15), each with its wire type (a
repeated field may repeat: properties 4, replicate_to 7; a KeyValue holds exactly key 1 and value 2), and a
compression value 0..4.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from quasar.protocol import crc32c

from ._codec_py import _bytes, _check_int

__all__ = ["complete_receipt", "read_frames", "split_batch"]

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_I64_MAX = (1 << 63) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_U32_MAX = (1 << 32) - 1
_RAW, _RECEIPT, _MESSAGE = 0, 7, 9

#: MessageMetadata field -> (wire type, kind): "once" scalars, "str" once + UTF-8, "strs" repeated UTF-8,
#: "kv" repeated KeyValue, "enum" the compression 0..4.
_METADATA_FIELDS: dict[int, tuple[int, str]] = {
    1: (2, "str"), 2: (0, "once"), 3: (0, "once"), 4: (2, "kv"), 5: (2, "str"), 6: (2, "str"),
    7: (2, "strs"), 8: (0, "enum"), 9: (0, "once"), 11: (0, "once"), 12: (0, "once"), 16: (2, "once"),
    17: (0, "once"), 18: (2, "once"), 19: (0, "once"), 20: (0, "once"), 22: (0, "once"), 23: (0, "once"),
    24: (0, "once"), 25: (0, "once"), 26: (2, "str"), 27: (0, "once"), 28: (0, "once"), 29: (0, "once"),
    30: (0, "once"),
}  # fmt: skip
_ID_FIELDS = {1: 0, 2: 0, 3: 0, 4: 0, 6: 0}


class _Bad(Exception):
    """Not for the fast path (the frame goes raw)."""


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift >= 70:
            raise _Bad
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos


def _fields(data: memoryview, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """``(field, wire_type, value, value_end)`` of each field of a message; for wire type 2 ``value`` is the
    start of its bytes. Only wire types 0 and 2 are accepted."""
    fields = []
    while pos < end:
        tag, pos = _varint(data, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0 or field > 536870911:
            raise _Bad
        if wire == 0:
            value, pos = _varint(data, pos, end)
            fields.append((field, 0, value, pos))
        elif wire == 2:
            size, pos = _varint(data, pos, end)
            if size > end - pos:
                raise _Bad
            fields.append((field, 2, pos, pos + size))
            pos += size
        else:
            raise _Bad
    return fields


def _strict(
    fields: list[tuple[int, int, int, int]], allowed: dict[int, int], required: tuple[int, ...]
) -> dict[int, tuple[int, int]]:
    """The fields by number; each allowed once with its wire type, the required ones present."""
    found: dict[int, tuple[int, int]] = {}
    for field, wire, value, value_end in fields:
        if allowed.get(field) != wire or field in found:
            raise _Bad
        found[field] = (value, value_end)
    for field in required:
        if field not in found:
            raise _Bad
    return found


def _int64(value: int) -> int:
    return value - (1 << 64) if value > _I64_MAX else value


def _message_id(data: memoryview, start: int, end: int) -> tuple[int, int]:
    found = _strict(_fields(data, start, end), _ID_FIELDS, (1, 2))
    return _int64(found[1][0]), _int64(found[2][0])


def _utf8(data: memoryview, start: int, end: int) -> None:
    try:
        bytes(data[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad from None


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value > 0x7FFFFFFF else value


def _check_metadata(data: memoryview, start: int, end: int) -> tuple[int | None, int, int, int]:
    """Raise _Bad unless the metadata is for the fast path; else its routing fields (see the docstring)."""
    seen: set[int] = set()
    routing: dict[int, int] = {}
    for field, wire, value, value_end in _fields(data, start, end):
        spec = _METADATA_FIELDS.get(field)
        if spec is None or spec[0] != wire:
            raise _Bad
        kind = spec[1]
        if kind in ("once", "str", "enum"):
            if field in seen:
                raise _Bad
            seen.add(field)
        if kind in ("str", "strs"):
            _utf8(data, value, value_end)
        elif kind == "kv":
            pair = _strict(_fields(data, value, value_end), {1: 2, 2: 2}, (1, 2))
            _utf8(data, *pair[1])
            _utf8(data, *pair[2])
        elif kind == "enum" and value > 4:
            raise _Bad
        if field in (8, 9, 11, 27):
            routing[field] = value
    if not {1, 2, 3} <= seen:
        raise _Bad
    batch = _int32(routing[11]) if 11 in routing else None
    return batch, _int32(routing.get(27, 0)), routing.get(8, 0), routing.get(9, 0) & 0xFFFFFFFF


def _command(data: memoryview, start: int, end: int) -> tuple[int, int, int]:
    """``(type, body_start, body_end)`` of a BaseCommand holding only ``type`` and its SEND_RECEIPT or MESSAGE."""
    found = _strict(_fields(data, start, end), {1: 0, _RECEIPT: 2, _MESSAGE: 2}, (1,))
    kind = found[1][0]
    if kind not in (_RECEIPT, _MESSAGE) or set(found) != {1, kind}:
        raise _Bad
    return kind, found[kind][0], found[kind][1]


def _frame(data: memoryview, pos: int, frame_end: int) -> tuple[Any, ...]:
    command_end = pos + 8 + _U32.unpack_from(data, pos + 4)[0]
    if command_end > frame_end:
        raise _Bad
    kind, body, body_end = _command(data, pos + 8, command_end)
    if kind == _RECEIPT:
        found = _strict(_fields(data, body, body_end), {1: 0, 2: 0, 3: 2, 4: 0}, (1, 2, 3))
        if command_end != frame_end:
            raise _Bad
        ledger_id, entry_id = _message_id(data, *found[3])
        return (_RECEIPT, found[1][0], found[2][0], ledger_id, entry_id)
    found = _strict(_fields(data, body, body_end), {1: 0, 2: 2, 3: 0, 5: 0}, (1, 2))
    ledger_id, entry_id = _message_id(data, *found[2])
    redelivery = found[3][0] & 0xFFFFFFFF if 3 in found else 0
    pos = command_end
    if frame_end - pos >= 2 and _U16.unpack_from(data, pos)[0] == 0x0E02:
        raise _Bad
    checksum_ok = None
    if frame_end - pos >= 2 and _U16.unpack_from(data, pos)[0] == 0x0E01:
        if frame_end - pos < 6:
            raise _Bad
        stored = _U32.unpack_from(data, pos + 2)[0]
        pos += 6
        checksum_ok = crc32c(data[pos:frame_end]) == stored
    if frame_end - pos < 4:
        raise _Bad
    metadata_start = pos + 4
    metadata_end = metadata_start + _U32.unpack_from(data, pos)[0]
    if metadata_end > frame_end:
        raise _Bad
    routing = _check_metadata(data, metadata_start, metadata_end)
    metadata = bytes(data[metadata_start:metadata_end])
    payload = bytes(data[metadata_end:frame_end])
    return (_MESSAGE, found[1][0], ledger_id, entry_id, redelivery, checksum_ok, metadata, payload, *routing)


def read_frames(
    buffer: bytes | bytearray, start: int, max_frame_size: int
) -> tuple[list[tuple[Any, ...]], int]:
    """Decode the complete frames of ``buffer[start:]`` (see the module docstring).

    Args:
        buffer: received bytes (any C-contiguous bytes-like object).
        start: where the first frame starts (0 <= start <= len(buffer)).
        max_frame_size: the largest accepted totalSize; a frame whose length prefix exceeds it (or is below 4)
            ends the scan with a raw event holding the rest of the buffer (the decoder then raises).

    Returns:
        ``(events, end)``: ``buffer[end:]`` is an incomplete frame (keep it for the next call).

    Raises:
        TypeError: ``buffer`` is not bytes-like, or an int argument is not an int. ValueError: ``start`` outside
            the buffer, or a negative ``max_frame_size``. BufferError: ``buffer`` not C-contiguous.
    """
    if not isinstance(start, int) or not isinstance(max_frame_size, int):
        raise TypeError("start and max_frame_size must be ints")
    try:
        data = memoryview(buffer)
    except TypeError:
        raise TypeError(f"buffer must be bytes-like, got {type(buffer).__name__}") from None
    if not data.c_contiguous:
        raise BufferError("buffer is not C-contiguous")
    data = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    size = len(data)
    if not 0 <= start <= size:
        raise ValueError(f"start {start} is outside the {size}-byte buffer")
    if not 0 <= max_frame_size <= _I64_MAX:
        raise ValueError(f"max_frame_size {max_frame_size} is out of range")
    events: list[tuple[Any, ...]] = []
    pos = start
    while size - pos >= 4:
        total = _U32.unpack_from(data, pos)[0]
        if total > max_frame_size or total < 4:
            events.append((_RAW, pos, size))
            pos = size
            break
        if size - pos < 4 + total:
            break
        frame_end = pos + 4 + total
        try:
            events.append(_frame(data, pos, frame_end))
        except _Bad:
            events.append((_RAW, pos, frame_end))
        pos = frame_end
    return events, pos


def _plain_single(single: bytes) -> int:
    """``payload_size`` when ``single`` holds only varint fields 3 (``payload_size``, present) and 8
    (``sequence_id``), else -1 (any other field, or not well-formed: the caller parses it fully)."""
    pos, end, size = 0, len(single), -1
    while pos < end:
        tag = single[pos]
        pos += 1
        if tag not in (0x18, 0x40):
            return -1
        value = shift = 0
        while True:
            if pos >= end or shift > 63:
                return -1
            byte = single[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        if tag == 0x18:
            value &= _U32_MAX  # int32: the low 32 bits, signed
            size = value - (1 << 32) if value > _I32_MAX else value
    if size < 0:
        return -1
    return size


def split_batch(
    payload: bytes,
    offset: int,
    count: int,
    keep: Callable[[int], bool] | None,
    entry: Any,
    message_type: type,
    parse: Callable[[bytes], Any],
) -> tuple[list[Any], int]:
    """Cut the uncompressed batch ``payload[offset:]`` (``[u32 size][SingleMessageMetadata][item]`` x
    ``count``, reference/pulsar-protocol.md §7.2) into messages.

    Each kept item becomes ``message_type`` built without ``__init__`` (slots ``_data`` = the item bytes,
    ``entry``, ``batch_index`` = its index, ``_single``). ``_single`` is the metadata bytes when they hold only
    ``payload_size`` and ``sequence_id`` (what producers write without keys, properties or times; parsed only
    if an accessor needs it), else ``parse(bytes)`` (a SingleMessageMetadata; its ``payload_size`` is used).
    Items for which ``keep(index)`` is false are skipped and counted (``keep`` None keeps all).

    Returns:
        ``(messages, skipped)``.

    Raises:
        TypeError: ``payload`` not bytes, or ``message_type`` lacks those slots.
        ValueError: ``offset`` outside the payload, ``count`` < 0, a size running past the payload, a
            negative ``payload_size``, or bytes left over. Whatever ``parse`` or ``keep`` raise.
    """
    payload = _bytes("payload", payload)
    total = len(payload)
    offset = _check_int("offset", offset, 0, total)
    count = _check_int("count", count, 0, _I64_MAX)
    setters = _slot_setters(message_type, ("_data", "entry", "batch_index", "_single"))
    set_data, set_entry, set_index, set_single = setters
    new = object.__new__
    pos = offset
    messages = []
    skipped = 0
    for index in range(count):
        if total - pos < 4:
            raise ValueError(f"batch item {index} runs past the {total}-byte payload")
        start = pos + 4
        end = start + _U32.unpack_from(payload, pos)[0]
        if end > total:
            raise ValueError(f"batch item {index} runs past the {total}-byte payload")
        single: Any = payload[start:end]
        size = _plain_single(single)
        if size < 0:
            single = parse(single)
            size = single.payload_size
            if not isinstance(size, int) or size < 0:
                raise ValueError(f"batch item {index} has payload_size {size!r}")
        if size > total - end:
            raise ValueError(f"batch item {index} runs past the {total}-byte payload")
        pos = end + size
        if keep is None or keep(index):
            message: Any = new(message_type)
            set_data(message, payload[end:pos])
            set_entry(message, entry)
            set_index(message, index)
            set_single(message, single)
            messages.append(message)
        else:
            skipped += 1
    if pos != total:
        raise ValueError(f"{total - pos} bytes left over after {count} batch items")
    return messages, skipped


def _slot_setters(cls: type, names: tuple[str, ...]) -> list[Callable[[Any, Any], None]]:
    if not isinstance(cls, type):
        raise TypeError(f"message type must be a class, got {type(cls).__name__}")
    setters = []
    for name in names:
        descriptor: Any = getattr(cls, name, None)
        if type(descriptor).__name__ != "member_descriptor" or not issubclass(cls, descriptor.__objclass__):
            raise TypeError(f"{cls.__name__} has no slot {name!r}")
        setters.append(descriptor.__set__)
    return setters


def complete_receipt(
    waiters: list[Any],
    ledger_id: int,
    entry_id: int,
    partition: int,
    size: int,
    message_id_type: type,
    future_type: Any,
    fallback: Callable[[Any, Any], None],
) -> None:
    """Hand each waiter of a receipted entry its message id.

    The id of waiter ``i`` is ``message_id_type`` built without ``__init__`` with slots ``ledger_id``,
    ``entry_id``, ``partition``, ``batch_index`` = ``i`` and ``batch_size`` = ``size``; with ``size`` <= 0
    (not a batch) ``batch_index`` = -1 and ``batch_size`` = 0. A None waiter is skipped; a waiter of exactly
    ``future_type`` gets ``set_result(id)`` unless ``done()``; any other waiter goes to ``fallback(waiter, id)``.

    Raises:
        TypeError: ``waiters`` not a list, or ``message_id_type`` lacks those slots. Whatever a future's
            methods or ``fallback`` raise (the waiters after it are left alone).
    """
    if not isinstance(waiters, list):
        raise TypeError(f"waiters must be a list, got {type(waiters).__name__}")
    size = _check_int("size", size, _I32_MIN, _I32_MAX)
    names = ("ledger_id", "entry_id", "partition", "batch_index", "batch_size")
    set_ledger, set_entry, set_partition, set_index, set_size = _slot_setters(message_id_type, names)
    new = object.__new__
    batched = size > 0
    for index, waiter in enumerate(list(waiters)):
        if waiter is None:
            continue
        mid: Any = new(message_id_type)
        set_ledger(mid, ledger_id)
        set_entry(mid, entry_id)
        set_partition(mid, partition)
        set_index(mid, index if batched else -1)
        set_size(mid, size if batched else 0)
        if waiter.__class__ is future_type:
            if not waiter.done():
                waiter.set_result(mid)
        else:
            fallback(waiter, mid)
