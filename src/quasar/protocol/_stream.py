"""The byte-stream side shared by the protocol's incremental decoders (h11's receive_data / next_event
shape): a receive buffer with a read offset, end of stream, and a latched protocol error.

:class:`StreamBuffer` keeps the bytes a peer sent; a decoder subclass reads complete frames from
``_buffer[_offset:]`` and calls :meth:`StreamBuffer._consumed` past each one. Used by the Pulsar frame decoder
(``decoder.FrameDecoder``) and the RocketMQ remoting decoder (``remoting.RemotingDecoder``).
"""

from __future__ import annotations

import enum
from typing import Final, Literal

from .errors import LocalProtocolError, MalformedFrameError, ProtocolError

__all__ = ["NEED_DATA", "NeedData", "StreamBuffer"]

_COMPACT_THRESHOLD = 64 * 1024
"""Bytes of consumed prefix after which the buffer is compacted (when they are at least half of it)."""


class NeedData(enum.Enum):
    """Sentinel type of :data:`NEED_DATA`."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned by a decoder when no complete frame is buffered yet."""


class StreamBuffer:
    """Received bytes not yet decoded, the end-of-stream flag and the decoder's latched error."""

    __slots__ = ("_buffer", "_eof", "_error", "_offset")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._offset = 0
        self._eof = False
        self._error: ProtocolError | None = None

    @property
    def buffered_size(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buffer) - self._offset

    @property
    def errored(self) -> bool:
        """True once a protocol error was raised; the decoder then refuses further work."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer. ``b""`` marks the end of the stream.

        Raises:
            ProtocolError: the decoder is in the error state (the earlier error is raised again).
            LocalProtocolError: data after the end of the stream was signalled.
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("receive_data() called with data after end of stream")
        self._buffer += data

    def _consumed(self, frame_end: int) -> None:
        """Move the read offset past a returned frame; drop the consumed prefix when it is worth it."""
        buffer = self._buffer
        self._offset = frame_end
        if frame_end == len(buffer):
            del buffer[:]
            self._offset = 0
        elif frame_end >= _COMPACT_THRESHOLD and frame_end * 2 >= len(buffer):
            del buffer[:frame_end]
            self._offset = 0

    def _need_data(self, available: int) -> Literal[NeedData.NEED_DATA]:
        """NEED_DATA, or MalformedFrameError when the stream ended with ``available`` bytes of a frame."""
        if self._eof and available:
            raise MalformedFrameError(f"stream ended in the middle of a frame ({available} bytes buffered)")
        return NEED_DATA
