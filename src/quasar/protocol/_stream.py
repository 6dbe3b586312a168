"""The byte-stream side shared by the protocol's incremental decoders (h11's receive_data / next_event
shape): :class:`quasar.buffers.StreamBuffer` (neutral, shared with the replication layer's HA decoders) with
the protocol's errors.

Used by the Pulsar frame decoder (``decoder.FrameDecoder``) and the RocketMQ remoting decoder
(``remoting.RemotingDecoder``).
"""

from __future__ import annotations

from quasar.buffers import NEED_DATA, NeedData
from quasar.buffers import StreamBuffer as _NeutralStreamBuffer

from .errors import LocalProtocolError, MalformedFrameError

__all__ = ["NEED_DATA", "NeedData", "StreamBuffer"]


class StreamBuffer(_NeutralStreamBuffer):
    """:class:`quasar.buffers.StreamBuffer` raising the protocol's errors: ``receive_data`` raises
    LocalProtocolError for data after the end of the stream (a caller's mistake, not latched); a decoder
    reading a stream that ended inside a frame raises MalformedFrameError (latched by the decoder)."""

    __slots__ = ()

    def _data_after_end(self, message: str) -> Exception:
        return LocalProtocolError(message)

    def _ended_mid_frame(self, message: str) -> Exception:
        return MalformedFrameError(message)
