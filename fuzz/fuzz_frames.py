"""(a) The frame splitter and decoder, compiled and pure, checked against each other on every input.

Input: any bytes, read as a stream a peer sent. The first byte picks how the stream is cut into
``receive_data`` calls (1 to 256 bytes per call, so frames straddle reads); the rest is the stream, followed by
end of stream. Three decoders read it: with the compiled SEND fast path (``_frames_c``), with its pure twin
(``_frames_py``), and with no fast path at all (every frame through upb). They must give the same frames
(type, command bytes, headers_and_payload, checksum_ok) and then the same error class and message, or both
NEED_DATA. Only ``ProtocolError`` may escape a decoder. On the same bytes the twins' ``parse_send`` (offsets
taken from the first frame header) and ``entry_dispatch_info`` must give equal results or the same error class.

Run: ``python fuzz/fuzz_frames.py --runs 1000000`` (README.md).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path
from typing import Any

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["quasar.protocol"]):
    from quasar.protocol import NEED_DATA, FrameDecoder, SendFrame, _frames_c, _frames_py  # type: ignore[attr-defined]
    from quasar.protocol import decoder as decoder_module
    from quasar.protocol.errors import ProtocolError

import _harness
import _seeds

MAX_FRAME_SIZE = 64 * 1024  # small, so FrameTooLargeError is reachable from short inputs


class _NoFastPath:
    @staticmethod
    def parse_send(*_args: object) -> None:
        return None


def _frame_summary(frame: Any) -> tuple[Any, ...]:
    command = frame.command.SerializeToString()
    span = None if frame.headers_and_payload is None else bytes(frame.headers_and_payload)
    fast = (
        (frame.producer_id, frame.sequence_id, frame.num_messages) if isinstance(frame, SendFrame) else None
    )
    return frame.type, command, span, frame.checksum_ok, fast


def _decode(twin: Any, chunks: list[bytes]) -> list[Any]:
    """Frames and the final error (class name and message) of one decoder over ``chunks`` then EOF."""
    decoder_module._frames = twin
    decoder = FrameDecoder(max_frame_size=MAX_FRAME_SIZE)
    out: list[Any] = []
    try:
        for chunk in [*chunks, b""]:
            decoder.receive_data(chunk)
            while (frame := decoder.next_frame()) is not NEED_DATA:
                out.append(_frame_summary(frame))
    except ProtocolError as exc:
        out.append((type(exc).__name__, str(exc)))
        try:  # the error is latched: the next call raises the same
            decoder.next_frame()
        except ProtocolError as again:
            if (type(again), str(again)) != (type(exc), str(exc)):
                raise AssertionError(f"latched error changed: {exc!r} then {again!r}") from None
        else:
            raise AssertionError("decoder accepted a call after an error") from None
    return out


def _call(function: Any, *args: Any) -> Any:
    try:
        return ("ok", function(*args))
    except (ValueError, TypeError) as exc:
        return ("error", type(exc).__name__)


def _fast(fast: Any) -> Any:
    """A fast-path result without the generic path's fields, for comparing with the no-fast-path decoder."""
    return tuple(item[:4] if isinstance(item, tuple) and len(item) == 5 else item for item in fast)


def test(data: bytes) -> None:
    if not data:
        return
    step = data[0] + 1
    stream = data[1:]
    chunks = [stream[i : i + step] for i in range(0, len(stream), step)]
    real = decoder_module._frames
    try:
        compiled = _decode(_frames_c, chunks)
        pure = _decode(_frames_py, chunks)
        generic = _decode(_NoFastPath, chunks)
    finally:
        decoder_module._frames = real
    if compiled != pure:
        raise AssertionError(f"decoder twins differ: {compiled!r} != {pure!r}")
    if _fast(compiled) != _fast(generic):
        raise AssertionError(f"fast path differs from the generic path: {compiled!r} != {generic!r}")
    if len(stream) >= 8:
        command_size = struct.unpack_from(">I", stream, 4)[0]
        end = min(8 + command_size, len(stream))
        for args in ((stream, 8, end, len(stream)), (stream, 0, len(stream) // 2, len(stream))):
            c_result, py_result = _call(_frames_c.parse_send, *args), _call(_frames_py.parse_send, *args)
            if c_result != py_result:
                raise AssertionError(f"parse_send twins differ on {args[1:]}: {c_result!r} != {py_result!r}")
    c_info, py_info = (
        _call(_frames_c.entry_dispatch_info, stream),
        _call(_frames_py.entry_dispatch_info, stream),
    )
    if c_info != py_info:
        raise AssertionError(f"entry_dispatch_info twins differ: {c_info!r} != {py_info!r}")


def seeds() -> list[bytes]:
    frames = [_seeds.connect(), *_seeds.client_frames()]
    return [bytes([255]) + frame for frame in frames] + [bytes([3]) + b"".join(frames)]


if __name__ == "__main__":
    _harness.run("fuzz_frames", test, (), seeds)
