"""quasar.buffers.StreamBuffer, the neutral receive buffer under the Pulsar, remoting and HA decoders."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quasar import buffers
from quasar.buffers import NEED_DATA, StreamBuffer
from quasar.protocol import NEED_DATA as PROTOCOL_NEED_DATA
from quasar.protocol import FrameDecoder, LocalProtocolError, MalformedFrameError
from quasar.protocol.remoting import RemotingDecoder
from quasar.replication.errors import HAProtocolError
from quasar.replication.ha_protocol import NEED_DATA as HA_NEED_DATA
from quasar.replication.ha_protocol import SlaveSideDecoder


class Lines(StreamBuffer):
    """A minimal decoder: newline-terminated frames."""

    __slots__ = ()

    def next_line(self) -> bytes | buffers.NeedData:
        end = self._buffer.find(b"\n", self._offset)
        if end < 0:
            return self._need_data(len(self._buffer) - self._offset)
        line = bytes(self._buffer[self._offset : end])
        self._consumed(end + 1)
        return line


def test_frames_across_chunks_and_compaction() -> None:
    decoder = Lines()
    decoder.receive_data(b"ab")
    assert decoder.next_line() is NEED_DATA and decoder.buffered_size == 2
    decoder.receive_data(b"c\nde")
    assert decoder.next_line() == b"abc" and decoder.buffered_size == 2
    big = b"x" * 70_000 + b"\n"
    decoder.receive_data(b"\n" + big + b"tail")
    assert decoder.next_line() == b"de" and decoder.next_line() == b"x" * 70_000
    # past 64 KiB of consumed prefix that is at least half the buffer, the prefix is dropped
    assert decoder._offset == 0 and bytes(decoder._buffer) == b"tail"
    decoder.receive_data(b"\n")
    assert decoder.next_line() == b"tail" and decoder.buffered_size == 0 and len(decoder._buffer) == 0


def test_end_of_stream_and_default_errors() -> None:
    decoder = Lines()
    decoder.receive_data(b"")
    assert decoder.next_line() is NEED_DATA  # ended between frames: clean
    with pytest.raises(ValueError, match="after end of stream"):
        decoder.receive_data(b"more")
    torn = Lines()
    torn.receive_data(b"half")
    torn.receive_data(b"")
    with pytest.raises(ValueError, match=r"ended in the middle of a frame \(4 bytes buffered\)"):
        torn.next_line()
    assert not torn.errored  # the base latches nothing by itself


def test_a_latched_error_is_raised_again() -> None:
    decoder = Lines()
    decoder._error = RuntimeError("bad frame")
    assert decoder.errored
    with pytest.raises(RuntimeError, match="bad frame"):
        decoder.receive_data(b"x")


def test_every_decoder_shares_the_sentinel_and_names_its_own_errors() -> None:
    assert PROTOCOL_NEED_DATA is NEED_DATA and HA_NEED_DATA is NEED_DATA
    makers: list[tuple[Callable[[], StreamBuffer], type[Exception], type[Exception]]] = [
        (FrameDecoder, LocalProtocolError, MalformedFrameError),
        (RemotingDecoder, LocalProtocolError, MalformedFrameError),
        (SlaveSideDecoder, HAProtocolError, HAProtocolError),
    ]
    for make, after_end, mid_frame in makers:
        ended = make()
        ended.receive_data(b"")
        with pytest.raises(after_end):
            ended.receive_data(b"late")
        torn = make()
        torn.receive_data(b"\x00\x00")
        torn.receive_data(b"")
        next_frame = getattr(torn, "next_command", None) or getattr(torn, "next_frame")  # noqa: B009
        with pytest.raises(mid_frame, match="ended in the middle"):
            next_frame()
        assert torn.errored  # each decoder latches its stream error
        with pytest.raises(mid_frame):
            next_frame()
