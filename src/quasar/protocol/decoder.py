"""Incremental, sans-IO decoder of Pulsar frames: bytes in, :class:`Frame` objects out (h11 style).

The caller owns the socket: it passes whatever arrived to :meth:`FrameDecoder.receive_data` and then drains
:meth:`FrameDecoder.next_frame` until it returns :data:`NEED_DATA`. The frame layout is in
:mod:`quasar.protocol.frame`.

Buffering strategy: received bytes are appended to one ``bytearray`` and frames are cut at a read offset, so
many small frames per ``receive_data`` cost O(total bytes); the consumed prefix is dropped only when it is
large and at least half of the buffer (amortised O(1) per byte). A frame's length prefix is checked against
``max_frame_size`` as soon as its 4 bytes arrive, before the body is buffered. For SEND and MESSAGE the bytes
after the command are copied once into their own ``bytes`` object; ``Frame.headers_and_payload`` is a
memoryview of that copy, so it stays valid whatever the decoder does next and can be stored or forwarded
without further copies.

SEND fast path (the broker's publish path): every frame is first offered to ``_frames.parse_send`` (compiled
``_frames_c``, or its twin ``_frames_py`` under ``QUASAR_PURE_PYTHON=1``), which reads a plain, valid SEND
straight from the buffer — CommandSend, payload headers, CRC-32C, and a validated MessageMetadata — and
returns a :class:`SendFrame` without any protobuf object. It declines everything else (other commands,
unusual fields, anything malformed), which then takes the generic path below, unchanged; so both paths give
the same frames and the same errors (tests/protocol/test_frames_twins.py).

Errors: any violation raises a :class:`~quasar.protocol.errors.RemoteProtocolError` subclass and leaves the
decoder in an error state in which every further call raises the same error; the connection must be closed. A
CRC mismatch is *not* an error here (``Frame.checksum_ok`` is False): the broker answers SEND_ERROR
ChecksumError and keeps the connection (Java ``Producer.verifyChecksum``), a client drops the message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Literal

from google.protobuf.message import DecodeError, Message

from quasar.native import load_twin

from ._layout import split_headers
from ._pb import FIELD_FOR_TYPE, HAS_STRINGS, find_invalid_utf8, message_type_of, missing_required_fields
from ._stream import NEED_DATA, NeedData, StreamBuffer
from .checksum import crc32c
from .enums import CommandType
from .errors import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedFrameError,
    RemoteProtocolError,
)
from .frame import DEFAULT_MAX_MESSAGE_SIZE, MESSAGE_SIZE_FRAME_PADDING
from .proto.PulsarApi_pb2 import BaseCommand

__all__ = ["NEED_DATA", "Frame", "FrameDecoder", "NeedData", "SendFrame"]

_frames = load_twin("quasar.protocol._frames")

_U32 = struct.Struct(">I")
_PAYLOAD_TYPES: Final = frozenset((CommandType.SEND, CommandType.MESSAGE))
_COMMAND_TYPES: Final = {int(t): t for t in CommandType}
_HAS_STRING_FIELDS: Final = {
    t: HAS_STRINGS[message_type_of(BaseCommand.DESCRIPTOR.fields_by_name[f]).full_name]
    for t, f in FIELD_FOR_TYPE.items()
}


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    Attributes:
        type: the ``BaseCommand.Type`` value (a :class:`~quasar.protocol.enums.CommandType` member).
        command: the parsed BaseCommand; its sub-message for ``type`` is set (see :attr:`body`).
        headers_and_payload: SEND and MESSAGE only: every byte after the command, verbatim
            (``[0x0e02 bem]? [0x0e01 crc]? [metadataSize][metadata][payload]``) — what a broker stores and
            later appends to MESSAGE; None for other commands.
        checksum_ok: SEND and MESSAGE only: True/False when the 0x0e01 magic is present and the CRC32C over
            the rest matches / does not match; None when there is no checksum (or no payload).
    """

    type: int
    command: BaseCommand
    headers_and_payload: memoryview | None = None
    checksum_ok: bool | None = None

    @property
    def body(self) -> Message:
        """The command's sub-message, e.g. ``CommandSend`` for SEND (``command.send``)."""
        body: Message = getattr(self.command, FIELD_FOR_TYPE[self.type])
        return body


class SendFrame(Frame):
    """A SEND frame read by the fast path (``_frames.parse_send``): the fields the broker's publish path needs,
    without a protobuf object (:attr:`command` is parsed only if something asks for it). Only plain, valid
    SENDs take this form; any other SEND comes out as a plain :class:`Frame` (same meaning, parsed by upb).

    Attributes (besides :class:`Frame`'s):
        producer_id, sequence_id: CommandSend's required fields (u64).
        highest_sequence_id: CommandSend.highest_sequence_id, 0 when absent (u64).
        is_chunk: CommandSend.is_chunk.
        num_messages: messages in the entry: MessageMetadata.num_messages_in_batch when present, else 1 (the
            metadata was validated as the generic path does: required fields present, strings UTF-8).
    """

    __slots__ = (
        "_command_bytes",
        "highest_sequence_id",
        "is_chunk",
        "num_messages",
        "producer_id",
        "sequence_id",
    )

    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    is_chunk: bool
    num_messages: int
    headers_and_payload: memoryview
    _command_bytes: bytes

    def __init__(
        self, fields: tuple[int, int, int, bool, int, bool | None], command_bytes: bytes, span: memoryview
    ) -> None:
        # Frame is frozen: its fields are set once, here, as dataclasses do it
        setattr_ = object.__setattr__
        setattr_(self, "type", CommandType.SEND)
        _FRAME_COMMAND.__set__(self, None)
        setattr_(self, "headers_and_payload", span)
        setattr_(self, "checksum_ok", fields[5])
        setattr_(self, "producer_id", fields[0])
        setattr_(self, "sequence_id", fields[1])
        setattr_(self, "highest_sequence_id", fields[2])
        setattr_(self, "is_chunk", fields[3])
        setattr_(self, "num_messages", fields[4])
        setattr_(self, "_command_bytes", command_bytes)

    @property
    def command(self) -> BaseCommand:
        """The BaseCommand, parsed from the frame's command bytes on first use."""
        command: BaseCommand | None = _FRAME_COMMAND.__get__(self)
        if command is None:
            command = BaseCommand.FromString(self._command_bytes)
            _FRAME_COMMAND.__set__(self, command)
        return command


_FRAME_COMMAND: Final = Frame.__dict__["command"]  # Frame's slot for ``command``, under SendFrame's property


class FrameDecoder(StreamBuffer):
    """Turns a byte stream into :class:`Frame` objects. No sockets, no asyncio.

    Args:
        max_frame_size: the largest accepted ``totalSize`` in bytes (the 4-byte length prefix not counted).
            Default 5 MiB + 10 KiB: the Java broker's ``maxMessageSize + MESSAGE_SIZE_FRAME_PADDING``.

    Raises:
        LocalProtocolError: ``max_frame_size`` is below 8.
    """

    __slots__ = ("_max_frame_size",)

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + MESSAGE_SIZE_FRAME_PADDING) -> None:
        super().__init__()
        self.max_frame_size = max_frame_size

    @property
    def max_frame_size(self) -> int:
        """Largest accepted totalSize in bytes; may be changed between frames (as the Java client does after
        CONNECTED: ``max_message_size + 10 KiB``)."""
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if value < 8:
            raise LocalProtocolError(f"max_frame_size must be at least 8 bytes, got {value}")
        self._max_frame_size = value

    def next_frame(self) -> Frame | SendFrame | Literal[NeedData.NEED_DATA]:
        """Return the next complete frame, or :data:`NEED_DATA` if none is buffered yet.

        Raises:
            FrameTooLargeError: a frame's totalSize exceeds ``max_frame_size``.
            MalformedFrameError: commandSize larger than the frame, an unparsable BaseCommand, missing
                required fields, a type without its sub-message, invalid UTF-8 in a string field, bytes
                after a command that carries no payload, a payload header running past the frame, a SEND
                carrying broker entry metadata (0x0e02: only a broker adds it, to MESSAGE), or the stream
                ended in the middle of a frame.
            After any of these the decoder is in the error state: every later call raises the same error.
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        try:
            return self._next_frame()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _next_frame(self) -> Frame | SendFrame | Literal[NeedData.NEED_DATA]:
        buffer = self._buffer
        offset = self._offset
        available = len(buffer) - offset
        if available < 4:
            return self._need_data(available)
        total_size = _U32.unpack_from(buffer, offset)[0]
        if total_size > self._max_frame_size:
            raise FrameTooLargeError(total_size, self._max_frame_size)
        if total_size < 4:
            raise MalformedFrameError(f"totalSize {total_size} is too small to hold the commandSize field")
        if available < 4 + total_size:
            return self._need_data(available)
        command_start = offset + 8
        command_size = _U32.unpack_from(buffer, offset + 4)[0]
        command_end = command_start + command_size
        frame_end = offset + 4 + total_size
        if command_end > frame_end:
            raise MalformedFrameError(f"commandSize {command_size} exceeds totalSize {total_size} - 4")

        fields = _frames.parse_send(buffer, command_start, command_end, frame_end)
        if fields is not None:  # a plain, valid SEND: no protobuf object, no second pass over the metadata
            view = memoryview(buffer)
            try:
                command_bytes = bytes(view[command_start:command_end])
                span = memoryview(bytes(view[command_end:frame_end]))  # the one copy of a payload
            finally:
                view.release()
            self._consumed(frame_end)
            return SendFrame(fields, command_bytes, span)

        command = BaseCommand()
        rest: bytes | None = None
        view = memoryview(buffer)
        try:
            try:
                # protobuf parses any buffer without a copy; types-protobuf's stub says bytes only
                command.ParseFromString(view[command_start:command_end])  # type: ignore[arg-type]
            except DecodeError as exc:
                raise MalformedFrameError(f"unparsable BaseCommand: {exc}") from exc
            if command_end < frame_end:
                rest = bytes(view[command_end:frame_end])  # the one copy of a payload
        finally:
            view.release()

        self._consumed(frame_end)
        command_type = self._check_command(command)
        if command_type in _PAYLOAD_TYPES:
            if rest is None:
                raise MalformedFrameError(f"{command_type.name} frame without metadata and payload")
            span = memoryview(rest)
            layout = split_headers(span)
            if layout[0] >= 0 and command_type == CommandType.SEND:
                # only a broker adds it (frame.py: "MESSAGE only"); stored as sent, a producer's copy reached
                # consumers as if the broker had stamped it
                raise MalformedFrameError(
                    "SEND with broker entry metadata (0x0e02), which only a broker adds"
                )
            stored_crc = layout[2]
            checksum_ok = None if stored_crc is None else crc32c(span[layout[3] :]) == stored_crc
            return Frame(command_type, command, span, checksum_ok)
        if rest is not None:
            raise MalformedFrameError(
                f"{len(rest)} unexpected bytes after a {command_type.name} command, which carries no payload"
            )
        return Frame(command_type, command)

    @staticmethod
    def _check_command(command: BaseCommand) -> CommandType:
        if not command.HasField("type"):
            raise MalformedFrameError("BaseCommand without a known type (missing or unknown Type value)")
        command_type = _COMMAND_TYPES[command.type]
        field = FIELD_FOR_TYPE[command_type]
        message: Message = command  # the generated HasField takes literal names; this name is computed
        if not message.HasField(field):
            raise MalformedFrameError(f"{command_type.name} command without its '{field}' sub-message")
        if not command.IsInitialized():
            missing = missing_required_fields(command)
            raise MalformedFrameError(f"{command_type.name} command is missing required fields: {missing}")
        if _HAS_STRING_FIELDS[command_type]:
            bad = find_invalid_utf8(getattr(command, field))
            if bad is not None:
                raise MalformedFrameError(f"{command_type.name} field '{bad}' is not valid UTF-8")
        return command_type
