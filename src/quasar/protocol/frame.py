"""Pulsar frame layout and pure frame encoders.

Simple command frame (every command except SEND and MESSAGE)::

    | Offset | Field        | Width       | Meaning                                               |
    |--------|--------------|-------------|-------------------------------------------------------|
    | 0      | totalSize    | u32 BE      | bytes after this field: 4 + commandSize               |
    | 4      | commandSize  | u32 BE      | length of the serialized BaseCommand                  |
    | 8      | BaseCommand  | commandSize | protobuf (proto2)                                     |

Payload command frame (SEND from a producer, MESSAGE from the broker)::

    | Offset | Field                    | Width       | Meaning                                         |
    |--------|--------------------------|-------------|-------------------------------------------------|
    | 0      | totalSize                | u32 BE      | bytes after this field, payload included        |
    | 4      | commandSize              | u32 BE      | length of the BaseCommand                       |
    | 8      | BaseCommand              | commandSize | CommandSend / CommandMessage                    |
    | ...    | magic 0x0e02             | u16 BE      | optional, MESSAGE only: broker entry metadata   |
    |        | brokerEntryMetadataSize  | u32 BE      |   with 0x0e02                                   |
    |        | BrokerEntryMetadata      | n           |   with 0x0e02                                   |
    | ...    | magic 0x0e01             | u16 BE      | optional: CRC32C present                        |
    |        | checksum                 | u32 BE      |   CRC32C of every byte after this field         |
    | ...    | metadataSize             | u32 BE      | length of MessageMetadata                       |
    |        | MessageMetadata          | m           | protobuf                                        |
    |        | payload                  | rest        | totalSize - 4 - commandSize - headers - 4 - m   |

Everything after the BaseCommand is the ``headers_and_payload`` span. A broker stores the span of a SEND
verbatim and appends it, unchanged, to each MESSAGE command it dispatches (Java
``Commands.serializeCommandMessageWithSize``), so the checksum stays valid end to end.

Sources: reference/pulsar-protocol.md §1; Pulsar ``Commands.java`` (``serializeWithSize``,
``serializeCommandSendWithSize``, ``DEFAULT_MAX_MESSAGE_SIZE``, ``MESSAGE_SIZE_FRAME_PADDING``);
C++ ``Commands.cc`` (``writeMessageWithSize``, ``newSend``).
"""

from __future__ import annotations

import struct

from google.protobuf.message import EncodeError

from ._layout import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C
from .checksum import crc32c
from .errors import LocalProtocolError
from .proto.PulsarApi_pb2 import BaseCommand, MessageMetadata

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "FRAME_HEADER",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "MESSAGE_SIZE_FRAME_PADDING",
    "encode_command",
    "encode_headers_and_payload",
    "encode_payload_command",
]

#: Default max message size (bytes) a broker advertises in CONNECTED: 5 MiB (Java ``Commands``).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Bytes allowed on top of the max message size for command and headers (Java ``Commands``): 10 KiB.
MESSAGE_SIZE_FRAME_PADDING = 10 * 1024

#: ``[totalSize u32][commandSize u32]``, the 8 bytes in front of every BaseCommand.
FRAME_HEADER = struct.Struct(">II")
_CHECKSUM_HEADER = struct.Struct(">HI")  # [magic 0x0e01][crc32c]
_U32 = struct.Struct(">I")
_U32_MAX = 0xFFFFFFFF


def _serialize(cmd: BaseCommand) -> bytes:
    try:
        return cmd.SerializeToString()
    except EncodeError as exc:  # a required field is missing
        raise LocalProtocolError(str(exc)) from exc


def encode_command(cmd: BaseCommand) -> bytes:
    """Encode a simple command frame ``[totalSize][commandSize][BaseCommand]``.

    Args:
        cmd: a BaseCommand with ``type`` and its sub-message set.

    Returns:
        The whole frame, ready to write.

    Raises:
        LocalProtocolError: a ``required`` field of ``cmd`` is not set (the C++ client would drop the
            connection on such a frame).
    """
    body = _serialize(cmd)
    size = len(body)
    return FRAME_HEADER.pack(size + 4, size) + body


def encode_payload_command(
    cmd: BaseCommand, headers_and_payload: bytes | memoryview
) -> list[bytes | memoryview]:
    """Encode a payload command frame (SEND or MESSAGE) without copying the payload.

    Args:
        cmd: the BaseCommand (CommandSend / CommandMessage).
        headers_and_payload: the bytes after the command, ``[0x0e01][crc][metadataSize][metadata][payload]``
            (optionally preceded by broker entry metadata) — e.g. a memoryview of a stored entry.

    Returns:
        ``[header, headers_and_payload]``: ``header`` is ``totalSize + commandSize + BaseCommand`` and the
        span is returned untouched, so ``transport.writelines(...)`` sends it without a copy.

    Raises:
        LocalProtocolError: a required field is missing, or the frame would exceed 4 GiB.
    """
    body = _serialize(cmd)
    size = len(body)
    total = 4 + size + len(headers_and_payload)
    if total > _U32_MAX:
        raise LocalProtocolError(f"frame of {total} bytes does not fit the u32 totalSize field")
    return [FRAME_HEADER.pack(total, size) + body, headers_and_payload]


def encode_headers_and_payload(
    metadata: MessageMetadata | bytes, payload: bytes | memoryview, *, checksum: bool = True
) -> bytes:
    """Build ``[0x0e01][crc32c u32][metadataSize u32][metadata][payload]`` (the bytes after a SEND command).

    This is what a producer sends after CommandSend and what the broker stores verbatim.

    Args:
        metadata: a MessageMetadata (required fields producer_name, sequence_id, publish_time set) or its
            serialized bytes.
        payload: the message payload (possibly a compressed batch), not interpreted.
        checksum: with False the magic and CRC are left out (as a client does for a broker below
            protocol_version 6); the result then starts at metadataSize.

    Returns:
        The span as one ``bytes`` object (one copy of the payload).

    Raises:
        LocalProtocolError: ``metadata`` lacks a required field.
    """
    if isinstance(metadata, MessageMetadata):
        try:
            metadata = metadata.SerializeToString()
        except EncodeError as exc:
            raise LocalProtocolError(str(exc)) from exc
    size_and_metadata = _U32.pack(len(metadata)) + metadata
    if not checksum:
        return b"".join((size_and_metadata, payload))
    crc = crc32c(payload, crc32c(size_and_metadata))
    return b"".join((_CHECKSUM_HEADER.pack(MAGIC_CRC32C, crc), size_and_metadata, payload))
