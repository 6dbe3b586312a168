"""The receive side of an incremental, sans-IO decoder (h11's ``receive_data`` / ``next_event`` shape): a
buffer of the bytes a peer sent with a read offset, the end-of-stream flag and the decoder's latched error.

Neutral ground: this module imports nothing of quasar (an import-linter contract keeps it so), so layers that
may not import each other share it: ``quasar.protocol`` (the Pulsar frame decoder and the RocketMQ remoting
decoder, through ``protocol._stream``, which supplies the protocol's errors) and ``quasar.replication`` (the
HA channel's decoders, ``replication.ha_protocol``).

A decoder subclass reads complete frames from ``_buffer[_offset:]``, calls :meth:`StreamBuffer._consumed`
past each one and :meth:`StreamBuffer._need_data` when a frame is incomplete; it names its own errors by
overriding :meth:`StreamBuffer._data_after_end` and :meth:`StreamBuffer._ended_mid_frame`, and latches an
error by storing it in ``_error`` (every later :meth:`StreamBuffer.receive_data` raises it again).
"""

from __future__ import annotations

import enum
from typing import Final, Literal

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
        self._error: Exception | None = None

    @property
    def buffered_size(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buffer) - self._offset

    @property
    def errored(self) -> bool:
        """True once the decoder latched an error; it then refuses further work."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the peer. ``b""`` marks the end of the stream.

        Raises:
            Exception: the decoder's latched error, raised again; or :meth:`_data_after_end`'s error for data
                after the end of the stream was signalled (``ValueError`` unless the decoder names its own).
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        if not data:
            self._eof = True
            return
        if self._eof:
            raise self._data_after_end("receive_data() called with data after end of stream")
        self._buffer += data

    def _data_after_end(self, message: str) -> Exception:
        """The error :meth:`receive_data` raises for data after the end of the stream (a decoder may latch it)."""
        return ValueError(message)

    def _ended_mid_frame(self, message: str) -> Exception:
        """The error :meth:`_need_data` raises when the stream ended inside a frame (a decoder may latch it)."""
        return ValueError(message)

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
        """NEED_DATA, or :meth:`_ended_mid_frame`'s error when the stream ended with ``available`` bytes of a
        frame buffered."""
        if self._eof and available:
            raise self._ended_mid_frame(f"stream ended in the middle of a frame ({available} bytes buffered)")
        return NEED_DATA
