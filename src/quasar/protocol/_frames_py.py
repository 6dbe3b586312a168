"""The broker's SEND fast path in pure Python: the twin of the compiled ``_frames_c`` (same API, same results).

:func:`parse_send` reads one SEND frame straight from the decoder's receive buffer: the BaseCommand and its
CommandSend, the payload headers (``[0x0e01 crc32c]? [u32 metadataSize][MessageMetadata][payload]``,
reference/pulsar-protocol.md), the CRC-32C over ``[metadataSize .. frame end)``, and the MessageMetadata, which
it validates as the generic path does (required producer_name / sequence_id / publish_time, strings valid
UTF-8, nested KeyValue complete) without building a protobuf object.

It *declines* (returns None) anything it does not fully understand: another command type, a field the fast
path does not handle (transactions, markers, message_id, encryption keys, broker entry metadata, unknown
fields), a value outside its type's range, any malformed byte. The generic decoder (upb + checks) then
answers or raises as before, so the fast path never accepts what the generic path refuses. Source:
Pulsar ``Commands.java`` ``newSend`` / C++ ``Commands::newSend`` (layout), PulsarApi.proto (field numbers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crc32c import crc32c

from ._build import fill_id
from .frame import FRAME_HEADER, encode_command
from .proto.PulsarApi_pb2 import BaseCommand

__all__ = ["SendFields", "encode_message_header", "encode_send_receipt", "entry_dispatch_info", "parse_send"]

SendFields = tuple[int, int, int, bool, int, bool | None]
"""``(producer_id, sequence_id, highest_sequence_id (0 when absent), is_chunk, messages_in_entry,
checksum_ok (None without a checksum))``."""

_SEND_TYPE = 6
_INT32_MAX = 0x7FFFFFFF
_UINT32_MAX = 0xFFFFFFFF


class _Decline(Exception):
    """The frame is not a plain, valid SEND: let the generic decoder decide."""


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while shift < 70:
        if pos >= end:
            raise _Decline
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    raise _Decline


def _u64(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    start = pos
    value, pos = _varint(buf, pos, end)
    if pos - start == 10 and buf[start + 9] > 1:
        raise _Decline
    return value, pos


def _bounded(buf: memoryview, pos: int, end: int, limit: int) -> tuple[int, int]:
    value, pos = _varint(buf, pos, end)
    if value > limit:
        raise _Decline
    return value, pos


def _tag(buf: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    tag, pos = _varint(buf, pos, end)
    field, wire_type = tag >> 3, tag & 7
    if field == 0 or field > 536870911 or wire_type in (3, 4, 6, 7):
        raise _Decline
    return field, wire_type, pos


def _length(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    size, pos = _varint(buf, pos, end)
    if size > end - pos:
        raise _Decline
    return pos, pos + size


def _string(buf: memoryview, pos: int, end: int) -> int:
    start, stop = _length(buf, pos, end)
    try:
        # bytes.decode is strict UTF-8 (no surrogates, nothing past U+10FFFF), as the C twin's check
        bytes(buf[start:stop]).decode("utf-8")
    except UnicodeDecodeError:
        raise _Decline from None
    return stop


def _command_send(buf: memoryview, pos: int, end: int) -> tuple[int, int, int, bool]:
    producer_id = sequence_id = None
    highest = 0
    is_chunk = False
    while pos < end:
        field, wire_type, pos = _tag(buf, pos, end)
        if wire_type != 0:
            raise _Decline
        if field == 1:
            producer_id, pos = _u64(buf, pos, end)
        elif field == 2:
            sequence_id, pos = _u64(buf, pos, end)
        elif field == 3:
            _, pos = _bounded(buf, pos, end, _INT32_MAX)
        elif field == 6:
            highest, pos = _u64(buf, pos, end)
        elif field == 7:
            flag, pos = _bounded(buf, pos, end, 1)
            is_chunk = bool(flag)
        else:  # txnid, marker, message_id, unknown: the generic path
            raise _Decline
    if producer_id is None or sequence_id is None:
        raise _Decline
    return producer_id, sequence_id, highest, is_chunk


def _base_command(buf: memoryview, pos: int, end: int) -> tuple[int, int, int, bool]:
    command_type = None
    send = None
    while pos < end:
        field, wire_type, pos = _tag(buf, pos, end)
        if field == 1 and wire_type == 0:
            command_type, pos = _varint(buf, pos, end)
        elif field == 6 and wire_type == 2 and send is None:
            start, pos = _length(buf, pos, end)
            send = _command_send(buf, start, pos)
        else:
            raise _Decline
    if command_type != _SEND_TYPE or send is None:
        raise _Decline
    return send


def _key_value(buf: memoryview, pos: int, end: int) -> None:
    seen = set()
    while pos < end:
        field, wire_type, pos = _tag(buf, pos, end)
        if wire_type != 2 or field not in (1, 2):
            raise _Decline
        pos = _string(buf, pos, end)
        seen.add(field)
    if len(seen) != 2:
        raise _Decline


def _skip_bytes(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    _, stop = _length(buf, pos, end)
    return 0, stop


def _checked_string(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    return 0, _string(buf, pos, end)


def _key_value_field(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    start, stop = _length(buf, pos, end)
    _key_value(buf, start, stop)
    return 0, stop


def _limit(limit: int) -> _Reader:
    return lambda buf, pos, end: _bounded(buf, pos, end, limit)


_Reader = Callable[[memoryview, int, int], tuple[int, int]]
_STRING_FIELD = (2, _checked_string)
_U64_FIELD = (0, _u64)
_INT32_FIELD = (0, _limit(_INT32_MAX))
_BOOL_FIELD = (0, _limit(1))
_BYTES_FIELD = (2, _skip_bytes)
#: MessageMetadata field number -> (wire type, reader); a field not listed (encryption_keys, marker_type,
#: txnid, unknown fields) declines, as in the C twin's switch.
_METADATA_FIELDS: dict[int, tuple[int, _Reader]] = {
    1: _STRING_FIELD,  # producer_name
    2: _U64_FIELD,  # sequence_id
    3: _U64_FIELD,  # publish_time
    4: (2, _key_value_field),  # properties
    5: _STRING_FIELD,  # replicated_from
    6: _STRING_FIELD,  # partition_key
    7: _STRING_FIELD,  # replicate_to
    8: (0, _limit(4)),  # compression: NONE LZ4 ZLIB ZSTD SNAPPY
    9: (0, _limit(_UINT32_MAX)),  # uncompressed_size
    11: _INT32_FIELD,  # num_messages_in_batch
    12: _U64_FIELD,  # event_time
    14: _STRING_FIELD,  # encryption_algo
    15: _BYTES_FIELD,  # encryption_param
    16: _BYTES_FIELD,  # schema_version
    17: _BOOL_FIELD,  # partition_key_b64_encoded
    18: _BYTES_FIELD,  # ordering_key
    19: _U64_FIELD,  # deliver_at_time (int64: any 64-bit pattern)
    24: _U64_FIELD,  # highest_sequence_id
    25: _BOOL_FIELD,  # null_value
    26: _STRING_FIELD,  # uuid
    27: _INT32_FIELD,  # num_chunks_from_msg
    28: _INT32_FIELD,  # total_chunk_msg_size
    29: _INT32_FIELD,  # chunk_id
    30: _BOOL_FIELD,  # null_partition_key
}
_REQUIRED = frozenset((1, 2, 3))  # producer_name, sequence_id, publish_time


def _message_metadata(buf: memoryview, pos: int, end: int) -> int:
    """Messages in the entry (num_messages_in_batch when present, else 1)."""
    seen = set()
    messages = 1
    while pos < end:
        field, wire_type, pos = _tag(buf, pos, end)
        spec = _METADATA_FIELDS.get(field)
        if spec is None or spec[0] != wire_type:
            raise _Decline
        value, pos = spec[1](buf, pos, end)
        seen.add(field)
        if field == 11:
            messages = value
    if not seen.issuperset(_REQUIRED):
        raise _Decline
    return messages


def parse_send(
    buffer: bytes | bytearray | memoryview, command_start: int, command_end: int, frame_end: int
) -> SendFields | None:
    """Read the SEND frame whose BaseCommand is ``buffer[command_start:command_end]`` and whose payload
    headers run from ``command_end`` to ``frame_end`` (byte offsets into ``buffer``).

    Returns:
        :data:`SendFields`, or None when the frame is not a plain, valid SEND (the generic decoder decides).

    Raises:
        ValueError: the offsets do not fit the buffer.
    """
    buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    if not 0 <= command_start <= command_end <= frame_end <= len(buf):
        raise ValueError("parse_send: offsets outside the buffer")
    try:
        producer_id, sequence_id, highest, is_chunk = _base_command(buf, command_start, command_end)
        pos = command_end
        if frame_end - pos >= 2 and buf[pos] == 0x0E and buf[pos + 1] == 0x02:
            raise _Decline  # broker entry metadata: not on a SEND the fast path takes
        stored_crc = None
        if frame_end - pos >= 2 and buf[pos] == 0x0E and buf[pos + 1] == 0x01:
            if frame_end - pos < 6:
                raise _Decline
            stored_crc = int.from_bytes(buf[pos + 2 : pos + 6], "big")
            pos += 6
        if frame_end - pos < 4:
            raise _Decline
        checksum_start = pos
        metadata_size = int.from_bytes(buf[pos : pos + 4], "big")
        pos += 4
        if metadata_size > frame_end - pos:
            raise _Decline
        messages = _message_metadata(buf, pos, pos + metadata_size)
    except _Decline:
        return None
    checksum_ok = None if stored_crc is None else crc32c(buf[checksum_start:frame_end]) == stored_crc
    return producer_id, sequence_id, highest, is_chunk, messages, checksum_ok


def encode_send_receipt(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int | None
) -> bytes:
    """The whole SEND_RECEIPT frame (``[totalSize][commandSize][BaseCommand]``) with
    ``message_id{ledgerId, entryId}``; ``highest_sequence_id`` None leaves the field out (Pulsar
    ``Commands.newSendReceipt``).

    Raises:
        ValueError: a value outside its range (producer, sequence and highest ids uint64; ledger and entry ids
            int64, negative ones sent as their uint64 wire value).
        TypeError: an argument is not an int.
    """
    cmd = BaseCommand(type=BaseCommand.SEND_RECEIPT)
    body = cmd.send_receipt
    body.producer_id = producer_id
    body.sequence_id = sequence_id
    fill_id(body.message_id, ledger_id, entry_id)
    if highest_sequence_id is not None:
        body.highest_sequence_id = highest_sequence_id
    return encode_command(cmd)


_MAX_ACK_SET_WORDS = 65536
_U32_MAX = 0xFFFFFFFF


def encode_message_header(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    ack_set: Iterable[int] | None,
    consumer_epoch: int | None,
    payload_size: int,
) -> bytes:
    """``[totalSize][commandSize][BaseCommand MESSAGE]`` for a MESSAGE whose stored bytes (``payload_size``
    of them) follow unchanged (Pulsar ``Commands.newMessageCommand``): ``message_id{ledgerId, entryId,
    partition}``; ``redelivery_count`` only when > 0; ``ack_set`` (int64 words) and ``consumer_epoch`` only
    when not None.

    Raises:
        ValueError: a value out of range (ids as :func:`encode_send_receipt`, partition int32, redelivery
            count at most 2^32-1), an ack_set over 65,536 words, or a frame over 4 GiB.
        TypeError: an argument of the wrong type.
    """
    if not isinstance(payload_size, int):
        raise TypeError(f"payload_size must be int, not {type(payload_size).__name__}")
    if not 0 <= payload_size <= _U32_MAX:
        raise ValueError("the MESSAGE frame does not fit the u32 totalSize field")
    cmd = BaseCommand(type=BaseCommand.MESSAGE)
    body = cmd.message
    body.consumer_id = consumer_id
    message_id = body.message_id
    fill_id(message_id, ledger_id, entry_id)
    message_id.partition = partition
    if redelivery_count > 0:
        body.redelivery_count = redelivery_count
    if ack_set is not None:
        words = list(ack_set)
        if len(words) > _MAX_ACK_SET_WORDS:
            raise ValueError("ack_set has more than 65536 words")
        body.ack_set.extend(words)
    if consumer_epoch is not None:
        body.consumer_epoch = consumer_epoch
    command = cmd.SerializeToString()
    total = 4 + len(command) + payload_size
    if total > _U32_MAX:
        raise ValueError("the MESSAGE frame does not fit the u32 totalSize field")
    return FRAME_HEADER.pack(total, len(command)) + command


_U64_MASK = (1 << 64) - 1


def _skip_field(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(buf, pos, end)[1]
    if wire_type == 2:
        return _length(buf, pos, end)[1]
    width = 8 if wire_type == 1 else 4
    if end - pos < width:
        raise _Decline
    return pos + width


def entry_dispatch_info(entry: bytes | bytearray | memoryview) -> tuple[int, int]:
    """What a dispatcher needs of a stored entry (``[0x0e02 bem]? [0x0e01 crc]? [u32 size][MessageMetadata]
    [payload]``): ``(num_messages, deliver_at_time)``: ``num_messages_in_batch`` when present, else 1 (int32,
    as protobuf reads it), and ``deliver_at_time`` in ms, 0 when absent (int64). Walks the metadata's wire
    format only (the entry was validated when it was published).

    Raises:
        ValueError: the headers or the metadata are truncated or malformed.
    """
    buf = entry if isinstance(entry, memoryview) else memoryview(entry)
    end = len(buf)
    pos = 0
    if end >= 2 and buf[0] == 0x0E and buf[1] == 0x02:
        if end < 6 or int.from_bytes(buf[2:6], "big") > end - 6:
            raise ValueError("broker entry metadata runs past the end of the entry")
        pos = 6 + int.from_bytes(buf[2:6], "big")
    if end - pos >= 2 and buf[pos] == 0x0E and buf[pos + 1] == 0x01:
        if end - pos < 6:
            raise ValueError("checksum header runs past the end of the entry")
        pos += 6
    if end - pos < 4 or int.from_bytes(buf[pos : pos + 4], "big") > end - pos - 4:
        raise ValueError("metadata size runs past the end of the entry")
    stop = pos + 4 + int.from_bytes(buf[pos : pos + 4], "big")
    pos += 4
    messages = 1
    deliver_at = 0
    try:
        while pos < stop:
            field, wire_type, pos = _tag(buf, pos, stop)
            if wire_type == 0 and field in (11, 19):
                value, pos = _varint(buf, pos, stop)
                if field == 11:
                    messages = ((value & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000
                else:
                    deliver_at = ((value & _U64_MASK) ^ (1 << 63)) - (1 << 63)
            else:
                pos = _skip_field(buf, pos, stop, wire_type)
    except _Decline:
        raise ValueError("malformed MessageMetadata") from None
    return messages, deliver_at
