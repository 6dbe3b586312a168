"""Locate the parts of a payload command's ``headers_and_payload`` span (shared by decoder and metadata).

Layout of the bytes after the BaseCommand of a SEND / MESSAGE frame (all integers big-endian)::

    | Offset      | Field                    | Width   | Present                                      |
    |-------------|--------------------------|---------|----------------------------------------------|
    | 0           | magic 0x0e02             | u16     | optional, MESSAGE only (broker entry metadata)|
    | 2           | brokerEntryMetadataSize  | u32     | with 0x0e02                                  |
    | 6           | BrokerEntryMetadata      | n bytes | with 0x0e02                                  |
    | b           | magic 0x0e01             | u16     | optional (CRC32C, protocol_version >= 6)     |
    | b+2         | checksum                 | u32     | with 0x0e01; CRC32C of everything after it   |
    | c           | metadataSize             | u32     | always                                       |
    | c+4         | MessageMetadata          | m bytes | always                                       |
    | c+4+m       | payload                  | rest    | always (may be empty)                        |

Parse order as the C++ client (``ClientConnection::processIncomingBuffer``): broker entry metadata first,
then the checksum, then the metadata.
"""

from __future__ import annotations

import struct

from .errors import MalformedFrameError

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MAGIC_AND_U32 = struct.Struct(">HI")


def split_headers(view: memoryview) -> tuple[int, int, int | None, int, int, int]:
    """Find the header fields of ``view`` (the bytes after a SEND/MESSAGE BaseCommand).

    Returns ``(bem_start, bem_end, checksum, checksum_start, metadata_start, metadata_end)``: offsets into
    ``view``; ``bem_start == bem_end == -1`` without broker entry metadata; ``checksum`` is the stored u32 or
    None without the 0x0e01 magic; the checksum covers ``view[checksum_start:]``. The payload is
    ``view[metadata_end:]``.

    Raises:
        MalformedFrameError: a header or the metadata runs past the end of ``view``.
    """
    size = len(view)
    pos = 0
    bem_start = bem_end = -1
    checksum: int | None = None
    if size >= 2 and _U16.unpack_from(view, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
        if size < 6:
            raise MalformedFrameError("broker entry metadata header runs past the end of the frame")
        bem_size = _U32.unpack_from(view, 2)[0]
        bem_start = 6
        bem_end = 6 + bem_size
        if bem_end > size:
            raise MalformedFrameError(
                f"brokerEntryMetadataSize {bem_size} runs past the end of the frame ({size - 6} bytes left)"
            )
        pos = bem_end
    if size - pos >= 2 and _U16.unpack_from(view, pos)[0] == MAGIC_CRC32C:
        if size - pos < 6:
            raise MalformedFrameError("checksum header runs past the end of the frame")
        checksum = _MAGIC_AND_U32.unpack_from(view, pos)[1]
        pos += 6
    checksum_start = pos
    if size - pos < 4:
        raise MalformedFrameError("payload frame has no metadataSize field")
    metadata_size = _U32.unpack_from(view, pos)[0]
    metadata_start = pos + 4
    metadata_end = metadata_start + metadata_size
    if metadata_end > size:
        raise MalformedFrameError(
            f"metadataSize {metadata_size} runs past the end of the frame "
            f"({size - metadata_start} bytes left)"
        )
    return bem_start, bem_end, checksum, checksum_start, metadata_start, metadata_end
