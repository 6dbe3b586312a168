"""Sans-IO codec of RocketMQ's remoting frames (``RemotingCommand``), spoken by ``quasar nameserver``.

The name server, the broker's registrar and the client's ``nameserver://`` lookup all speak it; like the Pulsar
codec beside it this module has no sockets and no asyncio: :class:`RemotingDecoder` turns received bytes into
:class:`RemotingCommand` objects and :func:`encode_remoting_command` turns one back into bytes.

Frame layout (all integers big-endian; RocketMQ ``RemotingCommand.encode`` / ``RemotingCommand.decode``)::

    | Offset | Field          | Width          | Meaning                                                  |
    |--------|----------------|----------------|----------------------------------------------------------|
    | 0      | length         | i32            | bytes after this field: 4 + headerLength + body          |
    | 4      | serializeType  | u8             | 0 = JSON (the only one accepted), 1 = ROCKETMQ binary    |
    | 5      | headerLength   | u24            | length of the header                                     |
    | 8      | header         | headerLength   | a JSON object, UTF-8 (fields below)                      |
    | 8+h    | body           | rest           | opaque bytes; JSON for every command the name server has |

Header (a JSON object; RocketMQ ``RemotingCommand`` fields)::

    | Key       | JSON type       | Meaning                                                            |
    |-----------|-----------------|--------------------------------------------------------------------|
    | code      | int32           | request code (REGISTER_BROKER 103, ...) or response code (SUCCESS) |
    | language  | string          | the sender's language: "JAVA", "PYTHON", ...                       |
    | version   | int32           | the sender's version                                               |
    | opaque    | int32           | request id, echoed by the response                                 |
    | flag      | int32           | bit 0 = response, bit 1 = oneway (no response expected)           |
    | remark    | string / null   | error text of a response                                           |
    | extFields | object / null   | string -> string: the fields of the command's typed header         |

Unknown header keys (``serializeTypeCurrentRPC`` from Java peers) are ignored.

Limits are checked before anything is allocated: the length prefix against ``max_frame_size`` as soon as its
4 bytes arrive, the header length against the frame, then the header's JSON shape and types. Any violation
raises :class:`~quasar.protocol.errors.FrameTooLargeError` or
:class:`~quasar.protocol.errors.MalformedFrameError` (both ``RemoteProtocolError``) and leaves the decoder in
an error state: the connection must be closed.

Sources: reference/cluster.md §2; RocketMQ ``RemotingCommand``, ``RemotingCommandType``, ``RequestCode``,
``ResponseCode``, ``SerializeType``, ``NettyDecoder`` (``LengthFieldBasedFrameDecoder``, max 16 MiB).
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ._stream import NeedData, StreamBuffer
from .errors import FrameTooLargeError, LocalProtocolError, MalformedFrameError, ProtocolError

__all__ = [
    "DEFAULT_MAX_REMOTING_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "REMOTING_FRAME_HEADER",
    "RemotingCommand",
    "RemotingDecoder",
    "RequestCode",
    "ResponseCode",
    "decode_json_object",
    "encode_json",
    "encode_remoting_command",
]

#: ``[length i32][serializeType u8 + headerLength u24]``, the 8 bytes in front of every header.
REMOTING_FRAME_HEADER: Final = struct.Struct(">iI")
#: Default largest accepted ``length`` (bytes after the length field): 16 MiB (RocketMQ
#: ``NettySystemConfig.frameMaxLength``, ``com.rocketmq.remoting.frameMaxLength`` = 16777216).
DEFAULT_MAX_REMOTING_FRAME_SIZE: Final = 16 * 1024 * 1024
#: flag bit 0: the command is a response (RocketMQ ``RPC_TYPE``).
FLAG_RESPONSE: Final = 1
#: flag bit 1: the request wants no response (RocketMQ ``RPC_ONEWAY``).
FLAG_ONEWAY: Final = 2

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_SERIALIZE_JSON = 0
_HEADER_LENGTH_MAX = 0xFFFFFF
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_LANGUAGE = "PYTHON"


class RequestCode(enum.IntEnum):
    """Request codes the name server knows (RocketMQ ``RequestCode``)."""

    HEART_BEAT = 34
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    QUERY_DATA_VERSION = 322


class ResponseCode(enum.IntEnum):
    """Response codes (RocketMQ ``ResponseCode`` / ``RemotingSysResponseCode``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TOPIC_NOT_EXIST = 17


def _int32(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LocalProtocolError(f"{name} must be an int, got {type(value).__name__}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise LocalProtocolError(f"{name} {value} does not fit an int32")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RemotingCommand:
    """One remoting command: a request or a response (RocketMQ ``RemotingCommand``).

    Attributes:
        code: request code (:class:`RequestCode`) or response code (:class:`ResponseCode`); int32.
        opaque: request id (int32), echoed by the response.
        flag: bit 0 response, bit 1 oneway; int32.
        language: the sender's language name ("PYTHON" for Quasar).
        version: the sender's version (int32).
        remark: a response's error text, or None.
        ext_fields: the typed header's fields, str -> str.
        body: the body bytes (JSON for the name server's commands), empty when none.

    Raises:
        LocalProtocolError: a field has the wrong type or does not fit an int32.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = _LANGUAGE
    version: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def __post_init__(self) -> None:
        for name in ("code", "opaque", "flag", "version"):
            _int32(name, getattr(self, name))
        if not isinstance(self.language, str):
            raise LocalProtocolError(f"language must be a str, got {type(self.language).__name__}")
        if self.remark is not None and not isinstance(self.remark, str):
            raise LocalProtocolError(f"remark must be a str or None, got {type(self.remark).__name__}")
        if not isinstance(self.ext_fields, Mapping):
            raise LocalProtocolError(f"ext_fields must be a mapping, got {type(self.ext_fields).__name__}")
        for key, value in self.ext_fields.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise LocalProtocolError(f"ext_fields must map str to str, got {key!r}: {value!r}")
        if not isinstance(self.body, bytes):
            raise LocalProtocolError(f"body must be bytes, got {type(self.body).__name__}")

    @property
    def is_response(self) -> bool:
        """True for a response (flag bit 0)."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """True for a request that expects no response (flag bit 1)."""
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        opaque: int,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A request (RocketMQ ``createRequestCommand``); ``oneway`` sets flag bit 1."""
        return cls(
            code=code,
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=dict(ext_fields or {}),
            body=body,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        *,
        remark: str | None = None,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque, flag bit 0 set (RocketMQ ``createResponseCommand``)."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
        )


def encode_remoting_command(command: RemotingCommand) -> bytes:
    """Encode ``command`` as one frame ``[length][serializeType|headerLength][header JSON][body]``.

    Raises:
        LocalProtocolError: the header is longer than 2^24 - 1 bytes or the frame longer than 2^31 - 1.
    """
    header: dict[str, Any] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        header["remark"] = command.remark
    if command.ext_fields:
        header["extFields"] = dict(command.ext_fields)
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if len(header_bytes) > _HEADER_LENGTH_MAX:
        raise LocalProtocolError(f"header of {len(header_bytes)} bytes does not fit the 24-bit header length")
    length = 4 + len(header_bytes) + len(command.body)
    if length > _INT32_MAX:
        raise LocalProtocolError(f"frame of {length} bytes does not fit the int32 length field")
    prefix = REMOTING_FRAME_HEADER.pack(length, (_SERIALIZE_JSON << 24) | len(header_bytes))
    return b"".join((prefix, header_bytes, command.body))


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value`` (a body or a header value)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json_object(data: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    """Parse ``data`` as a JSON object (a header or a body), strictly: UTF-8, no NaN/Infinity, bounded nesting.

    Args:
        data: the bytes.
        what: what is parsed, for the error message ("header", "REGISTER_BROKER body", ...).

    Raises:
        MalformedFrameError: not UTF-8, not JSON, nested too deeply, or not an object.
    """
    try:
        value = json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant)  # bytes: a copy
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise MalformedFrameError(f"{what} is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedFrameError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _header_int(header: Mapping[str, Any], key: str, *, required: bool) -> int:
    value = header.get(key)
    if value is None:
        if required:
            raise MalformedFrameError(f"header has no '{key}'")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedFrameError(f"header '{key}' must be an integer, got {type(value).__name__}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise MalformedFrameError(f"header '{key}' {value} does not fit an int32")
    return value


def _command_from_header(header: Mapping[str, Any], body: bytes) -> RemotingCommand:
    code = _header_int(header, "code", required=True)
    opaque = _header_int(header, "opaque", required=False)
    flag = _header_int(header, "flag", required=False)
    version = _header_int(header, "version", required=False)
    language = header.get("language")
    if language is None:
        language = ""
    elif not isinstance(language, str):
        raise MalformedFrameError(f"header 'language' must be a string, got {type(language).__name__}")
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise MalformedFrameError(f"header 'remark' must be a string or null, got {type(remark).__name__}")
    ext = header.get("extFields")
    if ext is None:
        ext = {}
    elif not isinstance(ext, dict):
        raise MalformedFrameError(f"header 'extFields' must be an object, got {type(ext).__name__}")
    for key, value in ext.items():
        if not isinstance(value, str):
            raise MalformedFrameError(f"extFields '{key}' must be a string, got {type(value).__name__}")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=language,
        version=version,
        remark=remark,
        ext_fields=ext,
        body=body,
    )


class RemotingDecoder(StreamBuffer):
    """Turns a byte stream into :class:`RemotingCommand` objects. No sockets, no asyncio.

    Args:
        max_frame_size: the largest accepted ``length`` in bytes (the 4-byte length field not counted);
            default 16 MiB (RocketMQ's frame limit).

    Raises:
        LocalProtocolError: ``max_frame_size`` is below 4.
    """

    __slots__ = ("max_frame_size",)

    def __init__(self, max_frame_size: int = DEFAULT_MAX_REMOTING_FRAME_SIZE) -> None:
        if isinstance(max_frame_size, bool) or not isinstance(max_frame_size, int) or max_frame_size < 4:
            raise LocalProtocolError(
                f"max_frame_size must be an int of at least 4 bytes, got {max_frame_size!r}"
            )
        super().__init__()
        self.max_frame_size = max_frame_size

    def next_command(self) -> RemotingCommand | Literal[NeedData.NEED_DATA]:
        """Return the next complete command, or :data:`~quasar.protocol.NEED_DATA` if none is buffered.

        Raises:
            FrameTooLargeError: ``length`` above ``max_frame_size``.
            MalformedFrameError: a negative or too small length, a serialize type other than JSON, a header
                length past the frame, a header that is not a UTF-8 JSON object with the types above, or the
                stream ended inside a frame. The decoder then stays in the error state.
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        try:
            return self._next_command()
        except ProtocolError as exc:
            self._error = exc
            raise

    def _next_command(self) -> RemotingCommand | Literal[NeedData.NEED_DATA]:
        buffer = self._buffer
        offset = self._offset
        available = len(buffer) - offset
        if available < 4:
            return self._need_data(available)
        length: int = _I32.unpack_from(buffer, offset)[0]
        if length > self.max_frame_size:
            raise FrameTooLargeError(length, self.max_frame_size)
        if length < 4:
            raise MalformedFrameError(f"frame length {length} is too small to hold the header length field")
        if available < 4 + length:
            return self._need_data(available)
        type_and_length: int = _U32.unpack_from(buffer, offset + 4)[0]
        serialize_type = type_and_length >> 24
        header_length = type_and_length & _HEADER_LENGTH_MAX
        if serialize_type != _SERIALIZE_JSON:
            raise MalformedFrameError(f"serialize type {serialize_type} is not supported (only 0 = JSON)")
        if header_length > length - 4:
            raise MalformedFrameError(f"header length {header_length} exceeds the frame length {length} - 4")
        header_start = offset + 8
        header_end = header_start + header_length
        frame_end = offset + 4 + length
        header = decode_json_object(bytes(buffer[header_start:header_end]), "header")
        body = bytes(buffer[header_end:frame_end])
        self._consumed(frame_end)
        return _command_from_header(header, body)
