"""Bad input against a live broker: the offending connection gets the protocol's error or is closed with a
logged reason; every other connection keeps working and nothing stored is lost."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pulsar
import pytest

from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, commands
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.proto import PulsarApi_pb2 as pb

pytestmark = pytest.mark.interop

CHECKSUM_ERROR = 9
CONSUMER_NOT_FOUND = 13


class RawConnection:
    """A hand-driven Pulsar connection: sends frames we build, returns the frames the broker answers."""

    def __init__(self, service_url: str) -> None:
        host, port = service_url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder()
        self.send(commands.new_connect("raw-test", protocol_version=20))
        connected = self.expect(CommandType.CONNECTED)
        self.max_message_size = connected.command.connected.max_message_size

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_frame(self, timeout: float = 10.0):
        self.sock.settimeout(timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_DATA:
                return frame
            data = self.sock.recv(65536)
            if not data:
                return None  # closed by the broker
            self.decoder.receive_data(data)

    def expect(self, command_type: int):
        while True:
            frame = self.next_frame()
            assert frame is not None, f"connection closed while waiting for {CommandType(command_type).name}"
            if frame.type == CommandType.PING:
                self.send(commands.new_pong())
                continue
            assert frame.type == command_type, f"got {CommandType(frame.type).name}"
            return frame

    def is_closed_by_broker(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = self.next_frame(timeout=max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if frame is None:
                return True
        return False

    def create_producer(self, topic: str, producer_id: int = 1, request_id: int = 1) -> str:
        self.send(commands.new_producer(topic, producer_id, request_id))
        return self.expect(CommandType.PRODUCER_SUCCESS).command.producer_success.producer_name

    def close(self) -> None:
        self.sock.close()


def _metadata(producer_name: str, sequence_id: int) -> pb.MessageMetadata:
    md = pb.MessageMetadata()
    md.producer_name = producer_name
    md.sequence_id = sequence_id
    md.publish_time = int(time.time() * 1000)
    return md


def _topic() -> str:
    return f"persistent://public/default/bad-{uuid.uuid4().hex[:10]}"


def _assert_broker_healthy(broker, topic: str, expected: list[bytes]) -> None:
    """A fresh official client still works and sees exactly ``expected`` on ``topic`` (nothing lost)."""
    client = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        consumer = client.subscribe(
            topic, f"check-{uuid.uuid4().hex[:6]}", initial_position=pulsar.InitialPosition.Earliest
        )
        got = []
        while True:
            try:
                got.append(consumer.receive(timeout_millis=1000).data())
            except pulsar.Timeout:
                break
        assert got == expected
    finally:
        client.close()


def test_wrong_checksum_gets_send_error_and_connection_survives(broker, raw):
    topic = _topic()
    conn = raw()
    name = conn.create_producer(topic)
    good = encode_headers_and_payload(_metadata(name, 0), b"good")
    conn.send(commands.new_send(1, 0, good))
    conn.expect(CommandType.SEND_RECEIPT)
    bad = bytearray(encode_headers_and_payload(_metadata(name, 1), b"corrupted"))
    bad[-1] ^= 0xFF  # flip a payload byte: the CRC32C no longer matches
    conn.send(commands.new_send(1, 1, bytes(bad)))
    error = conn.expect(CommandType.SEND_ERROR).command.send_error
    assert error.error == CHECKSUM_ERROR and error.sequence_id == 1
    conn.send(commands.new_send(1, 2, encode_headers_and_payload(_metadata(name, 2), b"still-works")))
    assert conn.expect(CommandType.SEND_RECEIPT).command.send_receipt.sequence_id == 2
    conn.close()
    _assert_broker_healthy(broker, topic, [b"good", b"still-works"])


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x05\x00\x00\x00\x09\x08\x12",  # command size larger than the frame
        b"\x00\x00\x00\x08\x00\x00\x00\x04\xff\xff\xff\xff",  # not a protobuf BaseCommand
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a stray HTTP client: absurd frame size
    ],
    ids=["command-size-overflow", "not-protobuf", "http"],
)
def test_garbage_frame_closes_only_that_connection(broker, raw, garbage):
    topic = _topic()
    bystander = raw()
    name = bystander.create_producer(topic)
    conn = raw()
    conn.send(garbage)
    assert conn.is_closed_by_broker()
    bystander.send(commands.new_send(1, 0, encode_headers_and_payload(_metadata(name, 0), b"ok")))
    bystander.expect(CommandType.SEND_RECEIPT)
    bystander.close()
    _assert_broker_healthy(broker, topic, [b"ok"])


def test_truncated_frame_then_disconnect_loses_nothing(broker, raw):
    topic = _topic()
    conn = raw()
    name = conn.create_producer(topic)
    conn.send(commands.new_send(1, 0, encode_headers_and_payload(_metadata(name, 0), b"whole")))
    conn.expect(CommandType.SEND_RECEIPT)
    frame = commands.new_send(1, 1, encode_headers_and_payload(_metadata(name, 1), b"half" * 100))
    conn.send(frame[: len(frame) // 2])  # the rest never comes
    conn.close()
    _assert_broker_healthy(broker, topic, [b"whole"])


def test_frame_larger_than_max_message_size_closes_connection(broker, raw):
    conn = raw()
    too_big = conn.max_message_size + 64 * 1024
    conn.send(struct.pack(">II", too_big, 10) + b"\x00" * 64)
    assert conn.is_closed_by_broker()


def test_unknown_producer_and_consumer_ids(broker, raw):
    conn = raw()
    # unknown consumer with a request id: the protocol has an error reply
    conn.send(commands.new_get_last_message_id(42, 7))
    error = conn.expect(CommandType.ERROR).command.error
    assert error.request_id == 7 and error.error == CONSUMER_NOT_FOUND
    conn.send(commands.new_ack(42, [(1, 1)], 0, request_id=8))
    ack_response = conn.expect(CommandType.ACK_RESPONSE).command.ackResponse
    assert ack_response.request_id == 8 and ack_response.error == CONSUMER_NOT_FOUND
    # SEND for a producer that never existed: no reply can be matched, so the connection is closed
    conn.send(commands.new_send(99, 0, encode_headers_and_payload(_metadata("ghost", 0), b"x")))
    assert conn.is_closed_by_broker()


def test_unsupported_command_gets_error(broker, raw):
    conn = raw()
    cmd = pb.BaseCommand()
    cmd.type = pb.BaseCommand.NEW_TXN
    cmd.newTxn.request_id = 5
    cmd.newTxn.tc_id = 0
    from quasar.protocol.frame import encode_command

    conn.send(encode_command(cmd))
    error = conn.expect(CommandType.ERROR).command.error
    assert error.request_id == 5 and error.error == 22  # NotAllowedError: non-retryable for the client
    conn.send(commands.new_ping())
    conn.expect(CommandType.PONG)
