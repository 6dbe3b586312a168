"""Test helpers: a hand-rolled protobuf wire encoder (independent of the protobuf library), a pure-Python
CRC32C, and feeding a FrameDecoder three ways (whole, byte-at-a-time, with trailing bytes; h11 test_io.tr)."""

from __future__ import annotations

import struct

from quasar.protocol import NEED_DATA, Frame, FrameDecoder

# ----------------------------------------------------------------------------- protobuf wire format --


def varint(value: int) -> bytes:
    """Base-128 varint; negative values are sign-extended to 64 bits (10 bytes), as protobuf does."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def f_varint(number: int, value: int) -> bytes:
    """Field ``number`` with wire type 0 (varint: int32/int64/uint64/bool/enum)."""
    return varint(number << 3) + varint(value)


def f_bytes(number: int, value: bytes | str) -> bytes:
    """Field ``number`` with wire type 2 (length-delimited: string/bytes/sub-message)."""
    if isinstance(value, str):
        value = value.encode()
    return varint((number << 3) | 2) + varint(len(value)) + value


def f_double(number: int, value: float) -> bytes:
    """Field ``number`` with wire type 1 (fixed64 double)."""
    return varint((number << 3) | 1) + struct.pack("<d", value)


def base_command(command_type: int, sub_message: bytes) -> bytes:
    """BaseCommand: ``type`` (field 1) plus the sub-message in the field numbered like the type."""
    return f_varint(1, command_type) + f_bytes(command_type, sub_message)


def simple_frame(command: bytes) -> bytes:
    """``[totalSize][commandSize][command]`` built by hand."""
    return struct.pack(">II", len(command) + 4, len(command)) + command


def payload_frame(command: bytes, headers_and_payload: bytes) -> bytes:
    return (
        struct.pack(">II", 4 + len(command) + len(headers_and_payload), len(command))
        + command
        + headers_and_payload
    )


# ---------------------------------------------------------------------------------------- CRC32C --


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (reflected poly 0x82F63B78, init and final xor 0xFFFFFFFF); slow but independent."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def span(metadata: bytes, payload: bytes, *, checksum: bool = True) -> bytes:
    """``[0x0e01][crc][metadataSize][metadata][payload]`` built by hand."""
    rest = struct.pack(">I", len(metadata)) + metadata + payload
    if not checksum:
        return rest
    return struct.pack(">HI", 0x0E01, crc32c_reference(rest)) + rest


# ----------------------------------------------------------------------------- feeding a decoder --

MODES = ("whole", "bytewise", "trailing")
#: A prefix of a PING frame: never a complete frame, so it must stay buffered.
TRAILING = bytes.fromhex("0000000900000005")


def drain(decoder: FrameDecoder) -> list[Frame]:
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


def feed(mode: str, data: bytes, **decoder_kwargs: int) -> list[Frame]:
    """Decode ``data`` fed in ``mode``; for "trailing" also check the extra bytes stay buffered."""
    decoder = FrameDecoder(**decoder_kwargs)
    if mode == "whole":
        decoder.receive_data(data)
        frames = drain(decoder)
        assert decoder.buffered_size == 0
    elif mode == "bytewise":
        frames = []
        for i in range(len(data)):
            decoder.receive_data(data[i : i + 1])
            frames.extend(drain(decoder))
        assert decoder.buffered_size == 0
    elif mode == "trailing":
        decoder.receive_data(data + TRAILING)
        frames = drain(decoder)
        assert decoder.next_frame() is NEED_DATA
        assert decoder.buffered_size == len(TRAILING)
    else:  # pragma: no cover
        raise AssertionError(mode)
    return frames
