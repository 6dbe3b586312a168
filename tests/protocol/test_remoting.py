"""RemotingDecoder / encode_remoting_command: RocketMQ's remoting framing. Decoding tests run whole,
byte-at-a-time and with the input split at every third byte; hypothesis checks the round trip and that
arbitrary bytes either decode or raise RemoteProtocolError, nothing else."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.protocol import NEED_DATA, FrameTooLargeError, LocalProtocolError, MalformedFrameError
from quasar.protocol.errors import RemoteProtocolError
from quasar.protocol.remoting import (
    DEFAULT_MAX_REMOTING_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REMOTING_FRAME_HEADER,
    RemotingCommand,
    RemotingDecoder,
    RequestCode,
    ResponseCode,
    decode_json_object,
    encode_remoting_command,
)

MODES = ("whole", "bytewise", "chunks")


def feed(mode: str, data: bytes, decoder: RemotingDecoder | None = None) -> list[RemotingCommand]:
    decoder = decoder or RemotingDecoder()
    out: list[RemotingCommand] = []
    if mode == "whole":
        pieces = [data]
    elif mode == "bytewise":
        pieces = [data[i : i + 1] for i in range(len(data))]
    else:
        pieces = [data[i : i + 3] for i in range(0, len(data), 3)]
    for piece in pieces:
        decoder.receive_data(piece)
        while (command := decoder.next_command()) is not NEED_DATA:
            out.append(command)
    decoder.receive_data(b"")
    assert decoder.next_command() is NEED_DATA
    return out


def raw_frame(
    header: object, body: bytes = b"", *, serialize_type: int = 0, header_bytes: bytes | None = None
):
    data = header_bytes if header_bytes is not None else json.dumps(header).encode()
    return (
        REMOTING_FRAME_HEADER.pack(4 + len(data) + len(body), (serialize_type << 24) | len(data))
        + data
        + body
    )


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


# ------------------------------------------------------------------------------------------- layout --


def test_frame_header_is_eight_bytes() -> None:
    assert REMOTING_FRAME_HEADER.size == 8
    assert DEFAULT_MAX_REMOTING_FRAME_SIZE == 16 * 1024 * 1024


def test_encoded_layout_matches_the_table() -> None:
    command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 7, {"topic": "t"}, b"BODY")
    data = encode_remoting_command(command)
    length, type_and_length = struct.unpack_from(">iI", data)
    assert length == len(data) - 4
    assert type_and_length >> 24 == 0  # JSON
    header_length = type_and_length & 0xFFFFFF
    header = json.loads(data[8 : 8 + header_length])
    assert header["code"] == 105 and header["opaque"] == 7 and header["flag"] == 0
    assert header["extFields"] == {"topic": "t"} and header["language"] == "PYTHON"
    assert data[8 + header_length :] == b"BODY"


def test_codes_are_rocketmq_values() -> None:
    assert [int(c) for c in RequestCode] == [34, 103, 104, 105, 106, 322]
    assert [int(c) for c in ResponseCode] == [0, 1, 2, 3, 17]


def test_response_echoes_opaque_and_sets_the_flag() -> None:
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, 42, oneway=True)
    assert request.is_oneway and not request.is_response and request.flag == FLAG_ONEWAY
    response = request.response(ResponseCode.SYSTEM_ERROR, remark="no")
    assert response.opaque == 42 and response.is_response and response.flag == FLAG_RESPONSE
    assert response.code == ResponseCode.SYSTEM_ERROR and response.remark == "no"


# ------------------------------------------------------------------------------------------ decoding --


def test_several_commands_in_one_stream(mode: str) -> None:
    commands = [
        RemotingCommand.request(RequestCode.REGISTER_BROKER, 1, {"brokerName": "b"}, b'{"x":1}'),
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, 2),
        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, 3).response(body=b"\x00\xff"),
    ]
    data = b"".join(encode_remoting_command(c) for c in commands)
    assert feed(mode, data) == commands


def test_java_style_header_is_accepted(mode: str) -> None:
    header = {
        "code": 105,
        "extFields": {"topic": "TBW102"},
        "flag": 0,
        "language": "JAVA",
        "opaque": 9,
        "serializeTypeCurrentRPC": "JSON",
        "version": 453,
        "remark": None,
    }
    (command,) = feed(mode, raw_frame(header))
    assert command.code == 105 and command.language == "JAVA" and command.version == 453
    assert command.ext_fields == {"topic": "TBW102"} and command.remark is None and command.body == b""


def test_missing_optional_fields_default(mode: str) -> None:
    (command,) = feed(mode, raw_frame({"code": 0}))
    assert (command.opaque, command.flag, command.version, command.language) == (0, 0, 0, "")
    assert command.ext_fields == {}


def test_many_small_commands_in_one_receive() -> None:
    decoder = RemotingDecoder()
    one = encode_remoting_command(RemotingCommand.request(RequestCode.HEART_BEAT, 1))
    decoder.receive_data(one * 5000)
    count = 0
    while decoder.next_command() is not NEED_DATA:
        count += 1
    assert count == 5000 and decoder.buffered_size == 0


# --------------------------------------------------------------------------------------- malformed --


def test_oversized_length_is_refused_before_the_body_arrives() -> None:
    decoder = RemotingDecoder(max_frame_size=1024)
    decoder.receive_data(struct.pack(">i", 1025))
    with pytest.raises(FrameTooLargeError) as info:
        decoder.next_command()
    assert info.value.size == 1025 and info.value.max_size == 1024
    assert decoder.errored
    with pytest.raises(FrameTooLargeError):  # the error state keeps the error
        decoder.receive_data(b"more")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">i", -1), "too small"),
        (struct.pack(">i", 3) + b"abc", "too small"),
        (raw_frame({"code": 1}, serialize_type=1), "serialize type 1"),
        (struct.pack(">iI", 8, 5) + b"{}\x00\x00", "exceeds the frame length"),
        (raw_frame(None, header_bytes=b"\xff\xfe"), "not valid UTF-8 JSON"),
        (raw_frame(None, header_bytes=b"{not json"), "not valid UTF-8 JSON"),
        (raw_frame([1, 2]), "must be a JSON object"),
        (raw_frame({"opaque": 1}), "no 'code'"),
        (raw_frame({"code": "1"}), "'code' must be an integer"),
        (raw_frame({"code": True}), "'code' must be an integer"),
        (raw_frame({"code": 1.5}), "'code' must be an integer"),
        (raw_frame({"code": 2**31}), "does not fit an int32"),
        (raw_frame({"code": 0, "opaque": None, "flag": "x"}), "'flag' must be an integer"),
        (raw_frame({"code": 0, "language": 3}), "'language' must be a string"),
        (raw_frame({"code": 0, "remark": {}}), "'remark' must be a string"),
        (raw_frame({"code": 0, "extFields": []}), "'extFields' must be an object"),
        (raw_frame({"code": 0, "extFields": {"a": 1}}), "extFields 'a' must be a string"),
        (raw_frame(None, header_bytes=b'{"code": NaN}'), "not valid UTF-8 JSON"),
        (raw_frame(None, header_bytes=b"[" * 100_000 + b"]" * 100_000), "UTF-8 JSON"),
    ],
)
def test_malformed_frames_raise_remote_protocol_errors(data: bytes, message: str) -> None:
    decoder = RemotingDecoder()
    decoder.receive_data(data)
    with pytest.raises(MalformedFrameError, match=message):
        decoder.next_command()
    assert decoder.errored
    with pytest.raises(MalformedFrameError):
        decoder.next_command()


def test_stream_ending_inside_a_frame_is_an_error() -> None:
    decoder = RemotingDecoder()
    decoder.receive_data(encode_remoting_command(RemotingCommand(code=1))[:-1])
    assert decoder.next_command() is NEED_DATA
    decoder.receive_data(b"")
    with pytest.raises(MalformedFrameError, match="stream ended"):
        decoder.next_command()


def test_data_after_end_of_stream_is_a_local_error() -> None:
    decoder = RemotingDecoder()
    decoder.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"x")


@pytest.mark.parametrize("bad", [3, 0, -1, True, 4.0])
def test_max_frame_size_is_checked(bad: object) -> None:
    with pytest.raises(LocalProtocolError):
        RemotingDecoder(max_frame_size=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"code": "1"},
        {"code": 2**31},
        {"code": 0, "opaque": -(2**31) - 1},
        {"code": 0, "ext_fields": {"a": 1}},
        {"code": 0, "remark": 5},
        {"code": 0, "body": "text"},
        {"code": 0, "language": None},
    ],
)
def test_commands_with_bad_fields_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(LocalProtocolError):
        RemotingCommand(**kwargs)  # type: ignore[arg-type]


def test_decode_json_object() -> None:
    assert decode_json_object(b'{"a": [1]}', "body") == {"a": [1]}
    with pytest.raises(MalformedFrameError, match="REGISTER body must be a JSON object"):
        decode_json_object(b"[]", "REGISTER body")
    with pytest.raises(MalformedFrameError, match="body is not valid"):
        decode_json_object(b"", "body")


# ------------------------------------------------------------------------------------------ properties --

int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
commands = st.builds(
    RemotingCommand,
    code=int32,
    opaque=int32,
    flag=int32,
    language=st.text(max_size=10),
    version=int32,
    remark=st.none() | st.text(max_size=40),
    ext_fields=st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=5),
    body=st.binary(max_size=200),
)


@given(st.lists(commands, max_size=5), st.sampled_from(MODES))
@settings(max_examples=200, deadline=None)
def test_round_trip(items: list[RemotingCommand], mode: str) -> None:
    data = b"".join(encode_remoting_command(c) for c in items)
    assert feed(mode, data) == items


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_decode_or_raise_remote_protocol_error(data: bytes) -> None:
    decoder = RemotingDecoder(max_frame_size=4096)
    decoder.receive_data(data)
    decoder.receive_data(b"")
    try:
        while decoder.next_command() is not NEED_DATA:
            pass
    except RemoteProtocolError:
        assert decoder.errored


@given(commands, st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_corrupted_frames_decode_or_raise_remote_protocol_error(command, position, junk) -> None:
    data = bytearray(encode_remoting_command(command))
    position = min(position, len(data))
    data[position : position + len(junk)] = junk
    decoder = RemotingDecoder(max_frame_size=4096)
    decoder.receive_data(bytes(data))
    decoder.receive_data(b"")
    try:
        while decoder.next_command() is not NEED_DATA:
            pass
    except RemoteProtocolError:
        assert decoder.errored
