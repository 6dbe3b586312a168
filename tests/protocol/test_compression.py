"""Compression codecs are byte-compatible with the C++ client's formats (reference §7.3)."""

from __future__ import annotations

import zlib

import lz4.block
import pytest
import snappy
import zstandard

from quasar.protocol import CompressionError, CompressionType, compress, decompress

from ._helpers import varint

DATA = b"".join(b"message %d with some repetitive text; " % i for i in range(40))


@pytest.mark.parametrize("kind", list(CompressionType))
@pytest.mark.parametrize("data", [b"", b"x", DATA])
def test_round_trip(kind: CompressionType, data: bytes) -> None:
    compressed = compress(kind, data)
    assert decompress(kind, compressed, len(data)) == data
    assert decompress(kind, memoryview(compressed), len(data)) == data


def test_none_is_the_identity() -> None:
    assert compress(CompressionType.NONE, memoryview(DATA)) == DATA
    assert decompress(0, DATA, 0) == DATA  # Pulsar leaves uncompressed_size unset when not compressed


def test_lz4_is_a_raw_block_without_size_prefix_or_frame_header() -> None:
    compressed = compress(CompressionType.LZ4, DATA)
    assert compressed[:4] != bytes.fromhex("04224d18")  # not the LZ4 frame format
    assert lz4.block.compress(DATA, store_size=True)[4:] == compressed  # store_size would add a u32 prefix
    assert lz4.block.decompress(compressed, uncompressed_size=len(DATA)) == DATA


def test_zlib_has_the_zlib_header_and_adler32() -> None:
    compressed = compress(CompressionType.ZLIB, DATA)
    assert compressed[:2] == b"\x78\x9c"
    assert zlib.decompress(compressed, wbits=zlib.MAX_WBITS) == DATA
    assert int.from_bytes(compressed[-4:], "big") == zlib.adler32(DATA)


def test_zstd_is_a_standard_frame() -> None:
    compressed = compress(CompressionType.ZSTD, DATA)
    assert compressed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(compressed) == DATA


def test_zstd_frame_without_content_size_decodes() -> None:
    compressed = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(DATA)
    assert decompress(CompressionType.ZSTD, compressed, len(DATA)) == DATA


def test_snappy_is_a_raw_block_starting_with_the_length_varint() -> None:
    compressed = compress(CompressionType.SNAPPY, DATA)
    assert compressed.startswith(varint(len(DATA)))
    assert compressed[:4] != b"\xff\x06\x00\x00"  # not the snappy framing format
    assert snappy.uncompress(compressed) == DATA


@pytest.mark.parametrize(
    "kind", [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY]
)
def test_wrong_uncompressed_size_raises(kind: CompressionType) -> None:
    compressed = compress(kind, DATA)
    for size in (len(DATA) - 1, len(DATA) + 1, -1):
        with pytest.raises(CompressionError):
            decompress(kind, compressed, size)


@pytest.mark.parametrize(
    "kind", [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY]
)
def test_corrupt_input_raises(kind: CompressionType) -> None:
    with pytest.raises(CompressionError):
        decompress(kind, b"\xff" * 16 + b"garbage", 100)


def test_truncated_zlib_raises() -> None:
    with pytest.raises(CompressionError):
        decompress(CompressionType.ZLIB, compress(CompressionType.ZLIB, DATA)[:-6], len(DATA))


def test_unknown_type_raises() -> None:
    with pytest.raises(CompressionError):
        compress(9, DATA)
    with pytest.raises(CompressionError):
        decompress(9, DATA, len(DATA))
