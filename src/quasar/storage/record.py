"""The CommitLog record: RocketMQ's byte layout, encoded straight into a mapped buffer.

Source: RocketMQ ``MessageExtEncoder.calMsgLength``, ``CommitLog.DefaultAppendMessageCallback.doAppend`` and
``CommitLog.checkMessageAndReturnSize`` (semantics.md A1). Big-endian; offsets below are for IPv4 hosts, the
only kind Quasar writes (records with the BORNHOST_V6 / STOREHOSTADDRESS_V6 sys flags are rejected on read).

====  ==========================  =====  ======  =====================================================
 #    field                       bytes  offset  notes
====  ==========================  =====  ======  =====================================================
 1    TOTALSIZE                   4      0       whole record, this field included
 2    MAGICCODE                   4      4       0xDAA320A7 (V1, 1-byte topic length) / 0xDAA320AB (V2)
 3    BODYCRC                     4      8       ``zlib.crc32(body) & 0x7FFFFFFF``
 4    QUEUEID                     4      12
 5    FLAG                        4      16      user flag
 6    QUEUEOFFSET                 8      20      logical offset in the consume queue (a count)
 7    PHYSICALOFFSET              8      28      the record's own commit log offset
 8    SYSFLAG                     4      36      MessageSysFlag bits
 9    BORNTIMESTAMP               8      40      ms since the epoch
 10   BORNHOST                    8      48      4 bytes IPv4 + 4 bytes port (int)
 11   STORETIMESTAMP              8      56      ms since the epoch, set by the store
 12   STOREHOSTADDRESS            8      64      4 bytes IPv4 + 4 bytes port (int)
 13   RECONSUMETIMES              4      72
 14   PreparedTransactionOffset   8      76
 15   BODY                        4+n    84      int length, then the body bytes
 16   TOPIC                       1+t    88+n    V1: 1-byte length; V2: 2-byte length (t > 127); UTF-8
 17   PROPERTIES                  2+p            short length, then UTF-8 ``name 0x01 value 0x02 ...``
====  ==========================  =====  ======  =====================================================

Fixed part = 84 bytes; total size = ``84 + 4 + n + (1 | 2) + t + 2 + p`` (:func:`calc_msg_length`).

Property CRC (RocketMQ ``enabledAppendPropCRC``, on by default in Quasar): the properties end with the reserved
20-byte ``__CRC32# 0x01 <10 digits> 0x02``, the ``crc32 & 0x7FFFFFFF`` of every record byte before it. BODYCRC
covers the body only; this covers the header, topic and properties too, so a record torn in its properties (or
a lost page under it) fails recovery instead of coming back with damaged fields.

Both CRCs are the zlib CRC-32 polynomial (RocketMQ ``UtilAll.crc32``). Records are written by one encoder,
compiled (``_record_c.c``: header, body, tail and both CRCs in one C call, one or many records per call, the
CRCs folded with PCLMULQDQ) with a pure-Python twin (``_record_py.py``); readers check CRCs with
``isal.isal_zlib.crc32`` (Intel ISA-L: the same values as ``zlib.crc32``).

End-of-file blank record (``END_FILE_MIN_BLANK_LENGTH = 8``): when a record plus 8 bytes does not fit in the
bytes left in a segment, only ``[TOTALSIZE = bytes left][BLANK_MAGIC_CODE 0xCBD43194]`` is written and the
record goes to the next segment. A reader meeting the blank magic moves to the next segment.
"""

from __future__ import annotations

import enum
import ipaddress
import mmap
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from isal.isal_zlib import crc32

from quasar.native import load_twin
from quasar.storage.errors import CorruptRecordError, InvalidMessageError

MESSAGE_MAGIC_CODE = 0xDAA320A7
"""V1 magic (Java int -626843481): the topic length is 1 byte."""
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
"""V2 magic (Java int -626843477): the topic length is 2 bytes; used when the topic is longer than 127
bytes."""
BLANK_MAGIC_CODE = 0xCBD43194
"""End-of-file filler magic (Java int -875286124)."""

END_FILE_MIN_BLANK_LENGTH = 8

HEADER = struct.Struct(">iIiiiqqiq4siq4siiqi")
"""Fields 1-14 plus the body length: the 84-byte fixed part and the 4-byte BODY length (88 bytes).
Hosts unpack as two values (4 address bytes, port): the tuple has 17 items, indexed by the ``H_*`` names."""
H_TOTAL_SIZE = 0
H_MAGIC = 1
H_BODY_CRC = 2
H_QUEUE_ID = 3
H_FLAG = 4
H_QUEUE_OFFSET = 5
H_PHYSICAL_OFFSET = 6
H_SYS_FLAG = 7
H_BORN_TIMESTAMP = 8
H_BORN_HOST = 9
H_BORN_PORT = 10
H_STORE_TIMESTAMP = 11
H_STORE_HOST = 12
H_STORE_PORT = 13
H_RECONSUME_TIMES = 14
H_PREPARED_TRANSACTION_OFFSET = 15
H_BODY_LENGTH = 16
FIXED_PART_SIZE = 84
BODY_LENGTH_POSITION = 84
BODY_POSITION = 88
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
STORE_TIMESTAMP_POSITION = 56

HEADER_PACKED = struct.Struct(">iIi8sqq48si")
"""The same 88 bytes as :data:`HEADER` as the encoder writes them, with two runs of fields passed pre-packed:
TOTALSIZE, MAGICCODE, BODYCRC, [QUEUEID FLAG] (8 bytes, :data:`QUEUE_FLAG`), QUEUEOFFSET, PHYSICALOFFSET,
[SYSFLAG .. PreparedTransactionOffset] (48 bytes, :data:`HEADER_MIDDLE`), BODY length (the pure-Python twin
packs exactly this struct)."""
QUEUE_FLAG = struct.Struct(">ii")
"""QUEUEID, FLAG (fields 4-5): constant per queue."""
HEADER_MIDDLE = struct.Struct(">iq4siq4siiq")
"""SYSFLAG, BORNTIMESTAMP, BORNHOST (address, port), STORETIMESTAMP, STOREHOSTADDRESS (address, port),
RECONSUMETIMES, PreparedTransactionOffset (fields 8-14, 48 bytes): constant while the timestamps are."""

BLANK = struct.Struct(">iI")
"""The end-of-file record: TOTALSIZE (bytes left in the segment), BLANK_MAGIC_CODE."""
PREFIX = struct.Struct(">iI")
"""TOTALSIZE and MAGICCODE, the first 8 bytes of every record."""
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")

MAX_TOPIC_LENGTH_V1 = 127
MAX_TOPIC_LENGTH = 32767
MAX_PROPERTIES_LENGTH = 32767
MAX_INT = 0x7FFFFFFF

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
"""RocketMQ ``MessageConst.PROPERTY_KEYS``: space-separated message keys (indexed by the IndexFile, later)."""
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
"""RocketMQ ``MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX``."""
PROPERTY_CRC32 = "__CRC32#"
"""RocketMQ ``MessageConst.PROPERTY_CRC32``: the reserved last property holding the whole-record CRC."""
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1
"""RocketMQ ``CRC32_RESERVED_LEN``: ``__CRC32#``, 0x01, 10 decimal digits, 0x02 (20 bytes)."""
CRC32_TAIL_PREFIX = PROPERTY_CRC32.encode() + b"\x01"
CRC32_TAIL_FORMAT = CRC32_TAIL_PREFIX + b"%010d\x02"
"""``CRC32_TAIL_FORMAT % crc`` is the 20-byte reserved property (one bytes formatting, no concatenation)."""
PROPERTY_TAG_HASH = "TAG_HASH"
"""Quasar's reserved property holding a non-zero consume queue tag hash, so recovery can rebuild the unit."""
_RESERVED_PROPERTIES = frozenset({PROPERTY_CRC32, PROPERTY_TAG_HASH})

# MessageSysFlag bits (semantics.md A1).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOSTADDRESS_V6 = 0x20

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything exposing the buffer protocol that the codec reads from or writes into."""

HostAddress = tuple[bytes, int]
"""An IPv4 host as written in BORNHOST / STOREHOSTADDRESS: (4 packed address bytes, port)."""


def ipv4_host(address: str, port: int) -> HostAddress:
    """``("127.0.0.1", 10911)`` -> ``(b"\\x7f\\x00\\x00\\x01", 10911)``. Raises ValueError on a non-IPv4
    address."""
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    return ipaddress.IPv4Address(address).packed, port


LOCAL_HOST: HostAddress = (b"\x7f\x00\x00\x01", 0)


def body_crc(body: Buffer) -> int:
    """BODYCRC of a body: ``zlib.crc32(body) & 0x7FFFFFFF`` (RocketMQ ``UtilAll.crc32``)."""
    return crc32(body) & 0x7FFFFFFF


def calc_msg_length(body_length: int, topic_length: int, properties_length: int) -> int:
    """Total record size in bytes (RocketMQ ``calMsgLength``); the topic length picks V1 (1) or V2 (2
    bytes)."""
    topic_length_size = 1 if topic_length <= MAX_TOPIC_LENGTH_V1 else 2
    return BODY_POSITION + body_length + topic_length_size + topic_length + 2 + properties_length


def encode_properties(properties: Mapping[str, str] | None, tag_hash: int = 0) -> bytes:
    """Properties as stored: UTF-8 ``name 0x01 value 0x02`` per pair (RocketMQ ``messageProperties2String``).

    A non-zero ``tag_hash`` (i64) is added as the reserved ``TAG_HASH`` property. Raises
    :class:`InvalidMessageError` for a non-str or empty name, a non-str value, a name/value containing 0x01 or
    0x02 (they would corrupt the encoding), or a reserved name (``TAG_HASH``, ``__CRC32#``).
    """
    if properties is not None and not isinstance(properties, Mapping):
        raise InvalidMessageError(
            f"properties must be a mapping of str to str, got {type(properties).__name__}"
        )
    if not properties and not tag_hash:
        return b""
    parts: list[str] = []
    if properties:
        for name, value in properties.items():
            if not isinstance(name, str) or not isinstance(value, str) or not name:
                raise InvalidMessageError(f"property names and values must be str (non-empty name): {name!r}")
            if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
                raise InvalidMessageError(f"property {name!r} contains a 0x01/0x02 separator")
            if name in _RESERVED_PROPERTIES:
                raise InvalidMessageError(f"property name {name!r} is reserved by the store")
            parts.append(f"{name}\x01{value}\x02")
    if tag_hash:
        if not -(2**63) <= tag_hash < 2**63:
            raise InvalidMessageError(f"tag hash is not an i64: {tag_hash}")
        parts.append(f"{PROPERTY_TAG_HASH}\x01{tag_hash}\x02")
    return "".join(parts).encode()


def decode_properties(raw: Buffer) -> dict[str, str]:
    """Inverse of :func:`encode_properties` (tolerates a missing trailing 0x02, as RocketMQ
    ``string2messageProperties``).

    Raises :class:`CorruptRecordError` when the bytes are not UTF-8.
    """
    try:
        text = bytes(raw).decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"properties are not UTF-8: {exc}") from None
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if item:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


def topic_field(topic: bytes) -> tuple[int, bytes]:
    """``(MAGICCODE, TOPIC field)`` for an encoded topic: V1 and a 1-byte length up to 127 bytes, else V2 and a
    2-byte length (fields 2 and 16). Raises :class:`InvalidMessageError` past 32767 bytes."""
    if len(topic) <= MAX_TOPIC_LENGTH_V1:
        return MESSAGE_MAGIC_CODE, _U8.pack(len(topic)) + topic
    if len(topic) <= MAX_TOPIC_LENGTH:
        return MESSAGE_MAGIC_CODE_V2, _U16.pack(len(topic)) + topic
    raise InvalidMessageError(f"topic longer than {MAX_TOPIC_LENGTH} bytes: {len(topic)}")


def record_tail(topic: bytes, properties: bytes, append_prop_crc: bool) -> bytes:
    """The bytes after BODY up to the ``__CRC32#`` property: fields 16 and 17 (``topic`` is the
    :func:`topic_field`), the PROPERTIES length counting the 20 reserved bytes when ``append_prop_crc``. The
    commit log copies it after each body; per-topic constant when there are no properties. Raises
    :class:`InvalidMessageError` past 32767 property bytes."""
    length = len(properties) + (CRC32_RESERVED_LEN if append_prop_crc else 0)
    if length > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(f"properties longer than {MAX_PROPERTIES_LENGTH} bytes: {length}")
    return topic + _U16.pack(length) + properties


def header_middle(
    *,
    sys_flag: int,
    born_timestamp: int,
    born_host: HostAddress,
    store_timestamp: int,
    store_host: HostAddress,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """Header fields 8-14 packed with :data:`HEADER_MIDDLE` (48 bytes), the part of the header that stays the
    same while the timestamps do. Raises :class:`InvalidMessageError` for a field out of its range."""
    try:
        return HEADER_MIDDLE.pack(
            sys_flag,
            born_timestamp,
            born_host[0],
            born_host[1],
            store_timestamp,
            store_host[0],
            store_host[1],
            reconsume_times,
            prepared_transaction_offset,
        )
    except struct.error as exc:
        raise InvalidMessageError(f"record field out of range: {exc}") from None


_record = load_twin("quasar.storage._record")


class PackRecord(Protocol):
    """The signature of :data:`pack_record_into`."""

    def __call__(
        self,
        buf: memoryview | bytearray,
        position: int,
        physical_offset: int,
        magic: int,
        queue_flag: bytes,
        queue_offset: int,
        middle: bytes,
        body: Buffer,
        tail: bytes,
        append_prop_crc: bool,
        unit_buf: memoryview | bytearray | None = None,
        unit_position: int = 0,
        tag_hash: int = 0,
        /,
    ) -> int: ...


pack_record_into: PackRecord = _record.pack_record
"""THE record encoder: ``pack_record_into(buf, position, physical_offset, magic, queue_flag, queue_offset, middle,
body, tail, append_prop_crc[, unit_buf, unit_position, tag_hash])`` writes one record at ``buf[position:]``
and returns the position just past it; given ``unit_buf``, it also writes the record's 20-byte consume queue
unit there (commit log offset, size, ``tag_hash``), so a put is one C call.

Every record Quasar writes is written by it or by :data:`pack_records_into` (the same encoder, many records per
call): ``put`` (:meth:`CommitLog.append_one <quasar.storage.commit_log.CommitLog.append_one>`), ``put_batch``
(:meth:`CommitLog.append_batch <quasar.storage.commit_log.CommitLog.append_batch>`, RocketMQ ``putMessages``)
and :func:`encode_record_into`, the keyword form used by tests and tools. The constant parts come
pre-encoded: ``magic`` and the TOPIC field from :func:`topic_field`, ``queue_flag`` (QUEUEID, FLAG packed with
:data:`QUEUE_FLAG`), ``middle`` (fields 8-14, :func:`header_middle`) and ``tail`` (:func:`record_tail`: TOPIC
and PROPERTIES up to the reserved CRC property); ``physical_offset`` is the record's own commit log offset;
``body`` is any C-contiguous buffer. It writes the 88-byte header (BODYCRC included), the body, the tail and,
with ``append_prop_crc``, the 20-byte ``__CRC32#`` property over every byte before it.

Compiled (``_record_c.c``: one C call, both CRCs with PCLMULQDQ folding) with a pure-Python twin
(``_record_py.py``, whose docstrings specify both). Raises :class:`InvalidMessageError` when a field is out of
its range, ValueError when the record does not fit in ``buf``, TypeError / BufferError for arguments of the
wrong kind; nothing is written then."""

pack_records_into: Callable[
    [memoryview | bytearray, int, int, int, bytes, int, bytes, Sequence[Buffer], bytes, bool],
    tuple[int, tuple[int, ...]],
] = _record.pack_records
"""Many records in one call: ``pack_records_into(buf, position, base_offset, magic, queue_flag, queue_offset,
middle, bodies, tail, append_prop_crc)`` writes one record per body (queue offsets ``queue_offset + i``), back
to back from ``buf[position:]``, where ``buf`` starts at commit log offset ``base_offset``; returns ``(end
position, the records' commit log offsets)``. Byte for byte the records :data:`pack_record_into` would write
one by one (RocketMQ ``putMessages``). The compiled twin writes a batch of 64 KiB or more with the GIL
released. Errors as :data:`pack_record_into`'s, checked for the whole batch before the first byte is
written."""


def encode_record_into(
    buf: memoryview | bytearray,
    pos: int,
    *,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    body: Buffer,
    properties: bytes,
    store_timestamp: int,
    born_timestamp: int,
    born_host: HostAddress = LOCAL_HOST,
    store_host: HostAddress = LOCAL_HOST,
    flag: int = 0,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    append_prop_crc: bool = False,
) -> int:
    """Write one record at ``buf[pos:]`` from its fields and return its total size in bytes.

    The keyword form of :data:`pack_record_into` (which it calls): the fields of the layout above, with
    ``properties`` as :func:`encode_properties` returns them; with ``append_prop_crc`` the reserved
    ``__CRC32#`` property follows them (20 more bytes). The caller checks that the record fits
    (:func:`calc_msg_length`, counting :data:`CRC32_RESERVED_LEN`). Raises :class:`InvalidMessageError` when
    a field is out of its range (a topic or properties too long, a number past its field).
    """
    try:
        queue_flag = QUEUE_FLAG.pack(queue_id, flag)
    except struct.error as exc:
        raise InvalidMessageError(f"record field out of range: {exc}") from None
    middle = header_middle(
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
    magic, topic_bytes = topic_field(topic)
    tail = record_tail(topic_bytes, properties, append_prop_crc)
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = pack_record_into(
        buf, pos, physical_offset, magic, queue_flag, queue_offset, middle, view, tail, append_prop_crc
    )
    return end - pos


def properties_crc_tail(buf: memoryview, properties_start: int, end: int) -> int | None:
    """The record CRC held by the ``__CRC32#`` property ending the properties ``buf[properties_start:end]``, or
    None when there is none (or it is not 10 decimal digits)."""
    tail = end - CRC32_RESERVED_LEN
    if (
        tail < properties_start
        or buf[tail : tail + len(CRC32_TAIL_PREFIX)] != CRC32_TAIL_PREFIX
        or buf[end - 1] != 2
    ):
        return None
    digits = bytes(buf[tail + len(CRC32_TAIL_PREFIX) : end - 1])
    return int(digits) if digits.isdigit() else None


def encode_blank_into(buf: Buffer, pos: int, max_blank: int) -> None:
    """Write the 8-byte end-of-file record: TOTALSIZE = ``max_blank`` (bytes left in the segment), BLANK
    magic."""
    BLANK.pack_into(buf, pos, max_blank, BLANK_MAGIC_CODE)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A decoded record. ``body`` and ``properties_raw`` are memoryview slices of the mapped file (no
    copy)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: memoryview
    topic: str
    properties_raw: memoryview

    @property
    def properties(self) -> dict[str, str]:
        """The properties, parsed on each access (RocketMQ ``string2messageProperties``)."""
        return decode_properties(self.properties_raw) if len(self.properties_raw) else {}


class CheckStatus(enum.Enum):
    """Verdict of :func:`check_record` (RocketMQ ``checkMessageAndReturnSize``, split into explicit
    values)."""

    VALID = "VALID"
    """A whole, consistent record."""
    END_OF_FILE = "END_OF_FILE"
    """The blank record: the rest of the segment is filler."""
    NO_DATA = "NO_DATA"
    """TOTALSIZE is 0: never-written (zero) bytes, the normal end of the written data."""
    SHORT_BUFFER = "SHORT_BUFFER"
    """TOTALSIZE is negative, too small, or runs past the end of the segment (a torn write)."""
    BAD_MAGIC = "BAD_MAGIC"
    CRC_MISMATCH = "CRC_MISMATCH"
    LENGTH_MISMATCH = "LENGTH_MISMATCH"
    """The recomputed length differs from TOTALSIZE (RocketMQ's "[BUG]" half message)."""
    UNSUPPORTED = "UNSUPPORTED"
    """IPv6 host flags: Quasar never writes them."""


class RecordCheck(NamedTuple):
    status: CheckStatus
    size: int
    """The record's TOTALSIZE when VALID or END_OF_FILE, else 0."""


def check_record(
    buf: memoryview, pos: int, limit: int, *, check_crc: bool = True, require_prop_crc: bool = False
) -> RecordCheck:
    """Validate the record at ``buf[pos:limit]`` (recovery's scan step, semantics.md A6). Never raises on bad
    bytes.

    Checks, in order: room for the 8-byte prefix, TOTALSIZE within ``[8, limit - pos]``, the magic (V1, V2 or
    BLANK), that the recomputed length equals TOTALSIZE, and with ``check_crc`` the body CRC and the
    ``__CRC32#`` record CRC when present (RocketMQ ``checkMessageAndReturnSize``); a record without that tail
    fails when ``require_prop_crc`` (RocketMQ ``forceVerifyPropCRC``).
    """
    if pos < 0 or limit - pos < PREFIX.size:
        return RecordCheck(CheckStatus.SHORT_BUFFER if limit - pos > 0 else CheckStatus.NO_DATA, 0)
    total, magic = PREFIX.unpack_from(buf, pos)
    if total == 0 and magic == 0:
        return RecordCheck(CheckStatus.NO_DATA, 0)
    if magic == BLANK_MAGIC_CODE:
        if total == limit - pos:
            return RecordCheck(CheckStatus.END_OF_FILE, total)
        return RecordCheck(CheckStatus.SHORT_BUFFER, 0)
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        return RecordCheck(CheckStatus.BAD_MAGIC, 0)
    if total < BODY_POSITION + 3 or total > limit - pos:
        return RecordCheck(CheckStatus.SHORT_BUFFER, 0)
    header = HEADER.unpack_from(buf, pos)
    if header[H_SYS_FLAG] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOSTADDRESS_V6):
        return RecordCheck(CheckStatus.UNSUPPORTED, 0)
    body_length = header[H_BODY_LENGTH]
    end = pos + total
    p = pos + BODY_POSITION + body_length
    if body_length < 0 or p + 1 > end:
        return RecordCheck(CheckStatus.LENGTH_MISMATCH, 0)
    if magic == MESSAGE_MAGIC_CODE:
        topic_length = buf[p]
        p += 1
    else:
        if p + 2 > end:
            return RecordCheck(CheckStatus.LENGTH_MISMATCH, 0)
        topic_length = _U16.unpack_from(buf, p)[0]
        p += 2
    p += topic_length
    if p + 2 > end:
        return RecordCheck(CheckStatus.LENGTH_MISMATCH, 0)
    properties_length = _U16.unpack_from(buf, p)[0]
    if p + 2 + properties_length != end:
        return RecordCheck(CheckStatus.LENGTH_MISMATCH, 0)
    if check_crc and not _crcs_match(
        buf, pos, end, body_length, header[H_BODY_CRC], properties_length, require_prop_crc
    ):
        return RecordCheck(CheckStatus.CRC_MISMATCH, 0)
    return RecordCheck(CheckStatus.VALID, total)


def _crcs_match(
    buf: memoryview,
    pos: int,
    end: int,
    body_length: int,
    stored_body_crc: int,
    properties_length: int,
    require_prop_crc: bool,
) -> bool:
    """:func:`check_record`'s CRC step for the well-formed record ``buf[pos:end]``: BODYCRC, then the
    ``__CRC32#`` record CRC when the properties end with it (required with ``require_prop_crc``)."""
    body_start = pos + BODY_POSITION
    if crc32(buf[body_start : body_start + body_length]) & 0x7FFFFFFF != stored_body_crc:
        return False
    stored = properties_crc_tail(buf, end - properties_length, end)
    if stored is None:
        return not require_prop_crc
    return crc32(buf[pos : end - CRC32_RESERVED_LEN]) & 0x7FFFFFFF == stored


def decode_record(
    buf: memoryview, pos: int, limit: int | None = None, *, check_crc: bool = False
) -> StoredRecord:
    """Decode the record at ``buf[pos:]`` with zero-copy body and properties slices.

    Raises :class:`CorruptRecordError` (with ``offset=pos``, a buffer position) when :func:`check_record` does
    not say VALID, including for the blank end-of-file record.
    """
    if limit is None:
        limit = len(buf)
    verdict = check_record(buf, pos, limit, check_crc=check_crc)
    if verdict.status is not CheckStatus.VALID:
        raise CorruptRecordError(f"no valid record at position {pos}: {verdict.status.value}", offset=pos)
    h = HEADER.unpack_from(buf, pos)
    body_length = h[H_BODY_LENGTH]
    p = pos + BODY_POSITION
    body = buf[p : p + body_length]
    p += body_length
    if h[H_MAGIC] == MESSAGE_MAGIC_CODE:
        topic_length = buf[p]
        p += 1
    else:
        topic_length = _U16.unpack_from(buf, p)[0]
        p += 2
    try:
        topic = bytes(buf[p : p + topic_length]).decode()
    except UnicodeDecodeError:
        raise CorruptRecordError(f"topic of the record at position {pos} is not UTF-8", offset=pos) from None
    p += topic_length
    properties_length = _U16.unpack_from(buf, p)[0]
    p += 2
    if properties_crc_tail(buf, p, p + properties_length) is not None:
        properties_length -= CRC32_RESERVED_LEN  # the reserved CRC property is not a user property
    return StoredRecord(
        total_size=h[H_TOTAL_SIZE],
        magic=h[H_MAGIC],
        body_crc=h[H_BODY_CRC],
        queue_id=h[H_QUEUE_ID],
        flag=h[H_FLAG],
        queue_offset=h[H_QUEUE_OFFSET],
        physical_offset=h[H_PHYSICAL_OFFSET],
        sys_flag=h[H_SYS_FLAG],
        born_timestamp=h[H_BORN_TIMESTAMP],
        born_host=(h[H_BORN_HOST], h[H_BORN_PORT]),
        store_timestamp=h[H_STORE_TIMESTAMP],
        store_host=(h[H_STORE_HOST], h[H_STORE_PORT]),
        reconsume_times=h[H_RECONSUME_TIMES],
        prepared_transaction_offset=h[H_PREPARED_TRANSACTION_OFFSET],
        body=body,
        topic=topic,
        properties_raw=buf[p : p + properties_length],
    )
