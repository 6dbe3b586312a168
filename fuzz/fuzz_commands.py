"""(b) BaseCommand and MessageMetadata parsing, with the checks the decoder and the handlers rely on.

Input: the first byte picks the mode, the rest is the body.

- 0: the body is a serialized BaseCommand, wrapped in a correct frame header: the decoder must return a frame
  whose sub-message for its type is set and whose strings are valid UTF-8, or raise ``ProtocolError``. What a
  handler reads next is read too: topic names through ``TopicName.parse``, message ids through
  ``MessageId.from_pb``.
- 1: the body is a serialized MessageMetadata, put in a SEND frame with a correct checksum: when
  ``parse_headers_and_payload`` accepts the span, the decoder (both twins of the fast path) must accept the
  frame, and ``entry_dispatch_info`` (both twins) must read the same message count and delivery time as
  protobuf; when it refuses, the decoder must refuse too.
- 2: the body is a ``headers_and_payload`` span as stored: ``parse_headers_and_payload`` and both twins of
  ``entry_dispatch_info`` (same answers).
- 3: the body is a serialized MessageId (``MessageId.deserialize``) and, as UTF-8, a topic name.

Only ``ProtocolError`` (and its subclasses) may escape. Run: ``python fuzz/fuzz_commands.py --runs 1000000``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["quasar.protocol"]):
    from quasar.protocol import (
        NEED_DATA,
        FrameDecoder,
        MessageId,
        SendFrame,
        TopicName,
        _frames_c,  # type: ignore[attr-defined]
        _frames_py,  # type: ignore[attr-defined]
        num_messages,
        parse_headers_and_payload,
    )
    from quasar.protocol import decoder as decoder_module
    from quasar.protocol.checksum import crc32c
    from quasar.protocol.errors import MalformedFrameError, ProtocolError
    from quasar.protocol.frame import FRAME_HEADER
    from quasar.protocol.pb import BaseCommand

import _harness
import _seeds

_SEND_COMMAND = BaseCommand(type=BaseCommand.SEND)
_SEND_COMMAND.send.producer_id = 1
_SEND_COMMAND.send.sequence_id = 1
_SEND_BYTES = _SEND_COMMAND.SerializeToString()


def _one_frame(frame_bytes: bytes, twin: Any) -> Any:
    decoder_module._frames = twin
    decoder = FrameDecoder()
    decoder.receive_data(frame_bytes)
    frame = decoder.next_frame()
    if frame is NEED_DATA:
        raise AssertionError("a whole frame was not returned")
    return frame


def _read_like_a_handler(frame: Any) -> None:
    """What handlers read of any command: its body, topic names, message ids."""
    body = frame.body
    for descriptor, value in body.ListFields():
        if descriptor.name == "topic":
            try:
                TopicName.parse(value)
            except ProtocolError:
                pass
        elif descriptor.message_type is not None and descriptor.message_type.name == "MessageIdData":
            for message_id in value if descriptor.is_repeated else (value,):
                MessageId.from_pb(message_id)


def _command(body: bytes) -> None:
    frame_bytes = FRAME_HEADER.pack(len(body) + 4, len(body)) + body
    frame = _one_frame(frame_bytes, _frames_c)
    if frame.type in (BaseCommand.SEND, BaseCommand.MESSAGE):
        return  # a payload command needs a span: mode 1
    _read_like_a_handler(frame)


def _dispatch_info(twin: Any, span: bytes) -> Any:
    try:
        return twin.entry_dispatch_info(span)
    except ValueError as exc:
        return ("ValueError", str(exc))


def _metadata(body: bytes) -> None:
    size_and_metadata = len(body).to_bytes(4, "big") + body
    span = b"\x0e\x01" + crc32c(size_and_metadata).to_bytes(4, "big") + size_and_metadata
    frame_bytes = FRAME_HEADER.pack(4 + len(_SEND_BYTES) + len(span), len(_SEND_BYTES)) + _SEND_BYTES + span
    try:
        parsed = parse_headers_and_payload(span)
    except MalformedFrameError:
        parsed = None
    if parsed is None:
        for twin in (_frames_c, _frames_py):  # the generic path leaves metadata to the SEND handler
            if isinstance(_one_frame(frame_bytes, twin), SendFrame):
                raise AssertionError("the fast path accepted metadata parse_headers_and_payload refuses")
        return
    expected = (num_messages(parsed.metadata), parsed.metadata.deliver_at_time)
    for twin in (_frames_c, _frames_py):
        frame = _one_frame(frame_bytes, twin)
        if frame.checksum_ok is not True:
            raise AssertionError("a correct checksum was not recognised")
        if isinstance(frame, SendFrame) and frame.num_messages != expected[0]:
            raise AssertionError(f"fast path read {frame.num_messages} messages, protobuf {expected[0]}")
        info = _dispatch_info(twin, span)
        if info != expected:
            raise AssertionError(f"entry_dispatch_info {info!r} != protobuf's {expected!r}")


def _span(body: bytes) -> None:
    c_info, py_info = _dispatch_info(_frames_c, body), _dispatch_info(_frames_py, body)
    if c_info != py_info:
        raise AssertionError(f"entry_dispatch_info twins differ: {c_info!r} != {py_info!r}")
    parse_headers_and_payload(body)


def _ids(body: bytes) -> None:
    try:
        TopicName.parse(body.decode("utf-8", "surrogatepass"))
    except (ProtocolError, UnicodeDecodeError):
        pass
    MessageId.deserialize(body)


_MODES = (_command, _metadata, _span, _ids)


def test(data: bytes) -> None:
    if not data:
        return
    real = decoder_module._frames
    try:
        _MODES[data[0] % len(_MODES)](data[1:])
    finally:
        decoder_module._frames = real


def seeds() -> list[bytes]:
    out = [b"\x00" + frame[8:] for frame in [_seeds.connect(), *_seeds.client_frames()]]
    out += [b"\x01" + _seeds.metadata(num_messages_in_batch=3, deliver_at_time=5).SerializeToString()]
    out += [b"\x02" + span for span in _seeds.spans()]
    out += [b"\x03" + MessageId(1, 2, 3, 4).serialize(), b"\x03" + _seeds.TOPIC.encode()]
    return out


if __name__ == "__main__":
    _harness.run("fuzz_commands", test, (ProtocolError,), seeds)
