"""Payload compression codecs, byte-compatible with the C++ client (reference/pulsar-protocol.md §7.3).

| CompressionType | Wire format (C++ ``CompressionCodec*.cc``)                  | Python library             |
|-----------------|-------------------------------------------------------------|----------------------------|
| NONE   (0)      | payload as is                                               | -                          |
| LZ4    (1)      | raw LZ4 block, no frame header, no size prefix              | ``lz4.block``              |
| ZLIB   (2)      | zlib stream: 2-byte header (``78 9c``) + deflate + adler32  | ``zlib``                   |
| ZSTD   (3)      | zstd frame (magic ``28 b5 2f fd``), level 3                 | ``zstandard``              |
| SNAPPY (4)      | raw snappy block (varint uncompressed length first)         | ``snappy`` (python-snappy) |

The whole (batch) payload is compressed; ``MessageMetadata.uncompressed_size`` carries the original length,
which raw LZ4 needs to decode and which every codec's output is checked against (the C++ consumer discards
a message whose decompressed size differs: UncompressedSizeCorruption).
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.block
import snappy
import zstandard

from .errors import CompressionError

__all__ = ["CompressionType", "compress", "decompress"]

#: zstd level used by the C++ client (``ZSTD_compress(..., 3)``).
ZSTD_LEVEL = 3


class CompressionType(IntEnum):
    """``CompressionType`` of PulsarApi.proto (``MessageMetadata.compression``)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


_zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def _check_type(compression: int) -> CompressionType:
    try:
        return CompressionType(compression)
    except ValueError:
        raise CompressionError(f"unknown compression type {compression}") from None


def compress(compression: CompressionType | int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` the way the C++ producer does.

    Args:
        compression: the codec.
        data: the uncompressed payload.

    Returns:
        The compressed bytes (``bytes(data)`` for NONE); put ``len(data)`` in ``uncompressed_size``.

    Raises:
        CompressionError: unknown compression type.
    """
    kind = _check_type(compression)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.ZLIB:
        return zlib.compress(data)
    if kind is CompressionType.ZSTD:
        return _zstd_compressor.compress(data)
    # lz4 and python-snappy ship no type information: their results are typed here
    compressed: bytes
    if kind is CompressionType.LZ4:
        compressed = lz4.block.compress(data, store_size=False)
    else:
        compressed = snappy.compress(bytes(data))
    return compressed


def _snappy_length(data: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block starts with (a little-endian base-128 varint of at most
    5 bytes); -1 when there is none."""
    value = 0
    for index, byte in enumerate(bytes(data[:5])):
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value
    return -1


def decompress(compression: CompressionType | int, data: bytes | memoryview, uncompressed_size: int) -> bytes:
    """Decompress a payload produced by any Pulsar client.

    Args:
        compression: the codec from ``MessageMetadata.compression``.
        data: the compressed payload.
        uncompressed_size: ``MessageMetadata.uncompressed_size`` in bytes; the result must have exactly this
            length (for NONE it is not checked: Pulsar does not set it for uncompressed payloads).

    Returns:
        The uncompressed bytes.

    Bounded: no codec allocates more than ``uncompressed_size`` bytes (plus one for zlib), whatever the
    compressed bytes declare (a ZSTD frame header's content size or a SNAPPY length prefix is checked
    against it first), so callers bound the memory by checking ``uncompressed_size`` before calling.

    Raises:
        CompressionError: unknown type, negative size, corrupt input, a declared length or an output of
            another length.
    """
    kind = _check_type(compression)
    if kind is CompressionType.NONE:
        return bytes(data)
    if uncompressed_size < 0:
        raise CompressionError(f"negative uncompressed_size {uncompressed_size}")
    result: bytes
    try:
        if kind is CompressionType.LZ4:
            result = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif kind is CompressionType.ZLIB:
            decompressor = zlib.decompressobj()
            result = decompressor.decompress(data, uncompressed_size + 1)
            if not decompressor.eof:
                raise CompressionError("zlib stream is truncated or longer than uncompressed_size")
        elif kind is CompressionType.ZSTD:
            # a frame that states its content size is inflated to that size whatever max_output_size says:
            # check it first, so a 16 kB frame cannot announce gigabytes
            declared = zstandard.frame_content_size(data)
            if declared not in (-1, uncompressed_size):
                raise CompressionError(
                    f"ZSTD frame declares {declared} bytes, expected uncompressed_size {uncompressed_size}"
                )
            result = _zstd_decompressor.decompress(data, max_output_size=uncompressed_size)
        else:
            declared = _snappy_length(data)  # the buffer is allocated at this size before anything is read
            if declared != uncompressed_size:
                raise CompressionError(
                    f"SNAPPY block declares {declared} bytes, expected uncompressed_size {uncompressed_size}"
                )
            result = snappy.uncompress(bytes(data))
    except CompressionError:
        raise
    except Exception as exc:  # each library has its own error type (LZ4BlockError, zlib.error, ZstdError...)
        raise CompressionError(f"{kind.name} payload does not decompress: {exc}") from exc
    if len(result) != uncompressed_size:
        raise CompressionError(
            f"{kind.name} payload decompressed to {len(result)} bytes, expected uncompressed_size "
            f"{uncompressed_size}"
        )
    return result
