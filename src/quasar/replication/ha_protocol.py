"""The HA channel's frames: a sans-IO codec (bytes in, frames out, like h11; no asyncio, no sockets).

One TCP connection, opened by the slave to the master's HA port (RocketMQ ``HAClient`` -> ``HAConnection``,
with RocketMQ 5 ``AutoSwitchHAConnection``'s handshake and epochs). All integers big-endian.

Slave -> master, first: HELLO ::

    magic            4   b"QHA1"
    group_len        u16 bytes of the group name (<= 255)
    group            ... UTF-8 broker group name (RocketMQ brokerName)
    broker_id        i32 the slave's broker id
    max_offset       i64 the slave's max commit log offset (bytes)
    n                u32 epoch entries (<= 10,000)
    n x (epoch i32, start_offset i64)

Master -> slave, first: HANDSHAKE ::

    magic            4   b"QHA1"
    status           i32 0 OK, 1 WRONG_GROUP, 2 NOT_MASTER (then the master closes)
    master_epoch     i32
    max_offset       i64 the master's max commit log offset (bytes)
    n                u32 epoch entries (<= 10,000)
    n x (epoch i32, start_offset i64)

Slave -> master, then: REPORT (RocketMQ HAClient's report, 8 bytes) ::

    max_offset       i64 the slave's max commit log offset (bytes)

Master -> slave, then: TRANSFER (32-byte header + body) ::

    offset           i64 physical commit log offset of the body's first byte
    epoch            i32 the epoch of the whole range (a transfer never crosses an epoch start)
    epoch_start      i64 that epoch's start offset
    confirm_offset   i64 the master's confirm offset (acked by the whole sync-state set)
    body_size        i32 bytes that follow (<= 64 MiB); 0 = heartbeat
    body             ... whole commit log records

Every length is checked against its limit before anything is allocated. Malformed input raises
:class:`~quasar.replication.errors.HAProtocolError`; the decoder then stays in the error state and raises it
again on every call (the caller closes the connection and logs the reason).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from quasar.buffers import NEED_DATA, NeedData, StreamBuffer
from quasar.replication.config import MAX_TRANSFER_BODY_SIZE
from quasar.replication.errors import HAProtocolError

__all__ = [
    "HA_MAGIC",
    "MAX_EPOCH_ENTRIES",
    "MAX_GROUP_NAME_BYTES",
    "NEED_DATA",
    "REPORT_SIZE",
    "TRANSFER_HEADER_SIZE",
    "EpochPair",
    "Handshake",
    "HandshakeStatus",
    "Hello",
    "MasterSideDecoder",
    "NeedData",
    "Report",
    "SlaveSideDecoder",
    "Transfer",
    "encode_handshake",
    "encode_hello",
    "encode_report",
    "encode_transfer",
    "encode_transfer_header",
]

HA_MAGIC: Final = b"QHA1"
MAX_GROUP_NAME_BYTES: Final = 255
MAX_EPOCH_ENTRIES: Final = 10_000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_REPORT = struct.Struct(">q")
_HELLO_FIXED = struct.Struct(">iq")  # broker_id, max_offset (after the group name)
_HANDSHAKE_FIXED = struct.Struct(">iiq")  # status, master_epoch, max_offset (after the magic)
_EPOCH_ENTRY = struct.Struct(">iq")  # epoch, start_offset
_TRANSFER_HEADER = struct.Struct(">qiqqi")  # offset, epoch, epoch_start, confirm_offset, body_size

REPORT_SIZE: Final = _REPORT.size  # 8
TRANSFER_HEADER_SIZE: Final = _TRANSFER_HEADER.size  # 32

EpochPair = tuple[int, int]
"""``(epoch, start_offset)``: one epoch file entry on the wire."""

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


class HandshakeStatus(enum.IntEnum):
    """The master's answer to HELLO."""

    #: the master ships from the slave's first REPORT
    OK = 0
    #: the slave named another broker group
    WRONG_GROUP = 1
    #: this broker is not (or no longer) the group's master
    NOT_MASTER = 2


def _check_epochs(epochs: Sequence[EpochPair]) -> None:
    if len(epochs) > MAX_EPOCH_ENTRIES:
        raise ValueError(f"at most {MAX_EPOCH_ENTRIES} epoch entries, got {len(epochs)}")
    for epoch, start in epochs:
        if not 0 <= epoch <= _I32_MAX or not 0 <= start <= _I64_MAX:
            raise ValueError(f"epoch entry out of range: ({epoch}, {start})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """Slave -> master, first frame. Raises ValueError on construction when a field is out of range."""

    group: str
    broker_id: int
    max_offset: int
    epochs: tuple[EpochPair, ...] = ()

    def __post_init__(self) -> None:
        if len(self.group.encode()) > MAX_GROUP_NAME_BYTES:
            raise ValueError(f"group name longer than {MAX_GROUP_NAME_BYTES} bytes: {self.group[:40]!r}...")
        if not -(2**31) <= self.broker_id <= _I32_MAX:
            raise ValueError(f"broker_id out of the i32 range: {self.broker_id}")
        if not 0 <= self.max_offset <= _I64_MAX:
            raise ValueError(f"max_offset out of range: {self.max_offset}")
        _check_epochs(self.epochs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Handshake:
    """Master -> slave, first frame. Raises ValueError on construction when a field is out of range."""

    status: HandshakeStatus
    master_epoch: int
    max_offset: int
    epochs: tuple[EpochPair, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.master_epoch <= _I32_MAX:
            raise ValueError(f"master_epoch out of range: {self.master_epoch}")
        if not 0 <= self.max_offset <= _I64_MAX:
            raise ValueError(f"max_offset out of range: {self.max_offset}")
        _check_epochs(self.epochs)


@dataclass(frozen=True, slots=True)
class Report:
    """Slave -> master: the slave's max commit log offset (bytes)."""

    max_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    """Master -> slave: ``body`` holds the commit log bytes from ``offset``; empty = heartbeat."""

    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    body: bytes = b""

    @property
    def end_offset(self) -> int:
        """``offset + len(body)``: the slave's max offset after appending it (bytes)."""
        return self.offset + len(self.body)


# -- encoding ---------------------------------------------------------------------------------------------


def _encode_epochs(epochs: Sequence[EpochPair]) -> bytes:
    pack = _EPOCH_ENTRY.pack
    return _U32.pack(len(epochs)) + b"".join(pack(epoch, start) for epoch, start in epochs)


def encode_hello(hello: Hello) -> bytes:
    """The bytes of a HELLO frame."""
    group = hello.group.encode()
    return b"".join(
        (
            HA_MAGIC,
            _U16.pack(len(group)),
            group,
            _HELLO_FIXED.pack(hello.broker_id, hello.max_offset),
            _encode_epochs(hello.epochs),
        )
    )


def encode_handshake(handshake: Handshake) -> bytes:
    """The bytes of a HANDSHAKE frame."""
    return b"".join(
        (
            HA_MAGIC,
            _HANDSHAKE_FIXED.pack(int(handshake.status), handshake.master_epoch, handshake.max_offset),
            _encode_epochs(handshake.epochs),
        )
    )


def encode_report(max_offset: int) -> bytes:
    """The 8 bytes of a REPORT frame. Raises struct.error for an offset outside i64."""
    return _REPORT.pack(max_offset)


def encode_transfer_header(
    offset: int, epoch: int, epoch_start: int, confirm_offset: int, body_size: int
) -> bytes:
    """The 32-byte TRANSFER header; the caller writes ``body_size`` body bytes after it (no copy of the
    body). Raises ValueError for a body above 64 MiB, struct.error for a field outside its integer range."""
    if not 0 <= body_size <= MAX_TRANSFER_BODY_SIZE:
        raise ValueError(f"TRANSFER body of {body_size} bytes (limit {MAX_TRANSFER_BODY_SIZE})")
    return _TRANSFER_HEADER.pack(offset, epoch, epoch_start, confirm_offset, body_size)


def encode_transfer(transfer: Transfer) -> bytes:
    """Header and body of a TRANSFER frame in one bytes object (tests; the master writes the two apart)."""
    header = encode_transfer_header(
        transfer.offset, transfer.epoch, transfer.epoch_start, transfer.confirm_offset, len(transfer.body)
    )
    return header + bytes(transfer.body)


# -- decoding ---------------------------------------------------------------------------------------------


class _Decoder(StreamBuffer):
    """:class:`quasar.buffers.StreamBuffer` whose errors are latched HAProtocolErrors (data after the end of
    the stream included); subclasses parse frames from ``_buffer[_offset:]``."""

    __slots__ = ()

    def _fail(self, reason: str) -> HAProtocolError:
        error = self._error = HAProtocolError(reason)
        return error

    def _data_after_end(self, message: str) -> Exception:
        return self._fail(message)

    def _ended_mid_frame(self, message: str) -> Exception:
        return self._fail(message)

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error.with_traceback(None)

    def _epochs_at(self, pos: int) -> tuple[tuple[EpochPair, ...], int] | None:
        """The epoch list at ``pos`` and the offset after it, or None when not all buffered."""
        buffer = self._buffer
        if len(buffer) < pos + 4:
            return None
        (n,) = _U32.unpack_from(buffer, pos)
        if n > MAX_EPOCH_ENTRIES:
            raise self._fail(f"{n} epoch entries (limit {MAX_EPOCH_ENTRIES})")
        pos += 4
        end = pos + n * _EPOCH_ENTRY.size
        if len(buffer) < end:
            return None
        epochs = tuple(_EPOCH_ENTRY.iter_unpack(memoryview(buffer)[pos:end]))
        for epoch, start in epochs:
            if epoch < 0 or start < 0:
                raise self._fail(f"negative epoch entry ({epoch}, {start})")
        return epochs, end

    def _check_magic(self, pos: int) -> None:
        magic = bytes(self._buffer[pos : pos + 4])
        if magic != HA_MAGIC:
            raise self._fail(f"bad magic {magic!r} (expected {HA_MAGIC!r})")


class MasterSideDecoder(_Decoder):
    """What the master reads: one :class:`Hello`, then :class:`Report` frames.

    ``next_frame()`` returns a frame or :data:`NEED_DATA`; raises HAProtocolError on malformed input (bad
    magic, a group name that is not UTF-8, more than 10,000 epoch entries, a negative offset, the stream
    ending mid-frame).
    """

    __slots__ = ("_hello_seen",)

    def __init__(self) -> None:
        super().__init__()
        self._hello_seen = False

    def next_frame(self) -> Hello | Report | NeedData:
        self._check_usable()
        return self._next_report() if self._hello_seen else self._next_hello()

    def _next_report(self) -> Report | NeedData:
        pos = self._offset
        if len(self._buffer) - pos < REPORT_SIZE:
            return self._need_data(len(self._buffer) - pos)
        (offset,) = _REPORT.unpack_from(self._buffer, pos)
        if offset < 0:
            raise self._fail(f"REPORT of a negative offset {offset}")
        self._consumed(pos + REPORT_SIZE)
        return Report(offset)

    def _next_hello(self) -> Hello | NeedData:
        buffer = self._buffer
        start = pos = self._offset
        available = len(buffer) - pos
        if available < 4 + _U16.size:
            if available:
                self._check_partial_magic(pos, available)
            return self._need_data(available)
        self._check_magic(pos)
        (group_len,) = _U16.unpack_from(buffer, pos + 4)
        if group_len > MAX_GROUP_NAME_BYTES:
            raise self._fail(f"group name of {group_len} bytes (limit {MAX_GROUP_NAME_BYTES})")
        pos += 6
        if len(buffer) < pos + group_len + _HELLO_FIXED.size:
            return self._need_data(available)
        try:
            group = bytes(buffer[pos : pos + group_len]).decode()
        except UnicodeDecodeError as exc:
            raise self._fail(f"group name is not UTF-8: {exc}") from None
        pos += group_len
        broker_id, max_offset = _HELLO_FIXED.unpack_from(buffer, pos)
        if max_offset < 0:
            raise self._fail(f"HELLO with a negative max offset {max_offset}")
        parsed = self._epochs_at(pos + _HELLO_FIXED.size)
        if parsed is None:
            return self._need_data(len(buffer) - start)
        epochs, end = parsed
        self._consumed(end)
        self._hello_seen = True
        return Hello(group=group, broker_id=broker_id, max_offset=max_offset, epochs=epochs)

    def _check_partial_magic(self, pos: int, available: int) -> None:
        seen = bytes(self._buffer[pos : pos + min(available, 4)])
        if not HA_MAGIC.startswith(seen):
            raise self._fail(f"bad magic {seen!r} (expected {HA_MAGIC!r})")


class SlaveSideDecoder(_Decoder):
    """What the slave reads: one :class:`Handshake`, then :class:`Transfer` frames.

    ``next_frame()`` returns a frame or :data:`NEED_DATA`; raises HAProtocolError on malformed input (bad
    magic, an unknown status, more than 10,000 epoch entries, a body above 64 MiB, a negative field, the
    stream ending mid-frame).
    """

    __slots__ = ("_handshake_seen",)

    def __init__(self) -> None:
        super().__init__()
        self._handshake_seen = False

    def next_frame(self) -> Handshake | Transfer | NeedData:
        self._check_usable()
        return self._next_transfer() if self._handshake_seen else self._next_handshake()

    def _next_handshake(self) -> Handshake | NeedData:
        buffer = self._buffer
        pos = self._offset
        available = len(buffer) - pos
        if available < 4 + _HANDSHAKE_FIXED.size:
            if available >= 4:
                self._check_magic(pos)
            return self._need_data(available)
        self._check_magic(pos)
        status, master_epoch, max_offset = _HANDSHAKE_FIXED.unpack_from(buffer, pos + 4)
        try:
            status = HandshakeStatus(status)
        except ValueError:
            raise self._fail(f"unknown HANDSHAKE status {status}") from None
        if master_epoch < 0 or max_offset < 0:
            raise self._fail(f"HANDSHAKE with a negative epoch {master_epoch} or offset {max_offset}")
        parsed = self._epochs_at(pos + 4 + _HANDSHAKE_FIXED.size)
        if parsed is None:
            return self._need_data(available)
        epochs, end = parsed
        self._consumed(end)
        self._handshake_seen = True
        return Handshake(status=status, master_epoch=master_epoch, max_offset=max_offset, epochs=epochs)

    def _next_transfer(self) -> Transfer | NeedData:
        buffer = self._buffer
        pos = self._offset
        available = len(buffer) - pos
        if available < TRANSFER_HEADER_SIZE:
            return self._need_data(available)
        offset, epoch, epoch_start, confirm_offset, size = _TRANSFER_HEADER.unpack_from(buffer, pos)
        if not 0 <= size <= MAX_TRANSFER_BODY_SIZE:
            raise self._fail(f"TRANSFER body of {size} bytes (limit 0..{MAX_TRANSFER_BODY_SIZE})")
        if offset < 0 or epoch < 0 or epoch_start < 0 or confirm_offset < 0:
            raise self._fail(
                f"TRANSFER with a negative field (offset {offset}, epoch {epoch}, "
                f"epoch start {epoch_start}, confirm {confirm_offset})"
            )
        end = pos + TRANSFER_HEADER_SIZE + size
        if len(buffer) < end:
            return self._need_data(available)
        body = bytes(buffer[pos + TRANSFER_HEADER_SIZE : end])
        self._consumed(end)
        return Transfer(
            offset=offset, epoch=epoch, epoch_start=epoch_start, confirm_offset=confirm_offset, body=body
        )
