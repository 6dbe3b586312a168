"""Hash functions fixed by Pulsar's wire behaviour (pure functions of bytes; no I/O).

``murmur3_32`` is MurmurHash3 x86 32-bit as Guava's ``Hashing.murmur3_32`` computes it, which Pulsar uses
for Key_Shared hash ranges, the Failover consumer ring and the ``Murmur3_32Hash`` routing scheme (where the
result is then masked with ``Integer.MAX_VALUE``).
"""

from __future__ import annotations

import struct

__all__ = ["murmur3_32"]

_MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def murmur3_32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` with ``seed``: an unsigned 32-bit int (0 <= h < 2**32)."""
    data = bytes(data)
    length = len(data)
    h = seed & _MASK32
    rounded = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:rounded]):
        k = (k * _C1) & _MASK32
        k = ((k << 15) | (k >> 17)) & _MASK32
        k = (k * _C2) & _MASK32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _MASK32
        h = (h * 5 + 0xE6546B64) & _MASK32
    tail = data[rounded:]
    k = 0
    if len(tail) == 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * _C1) & _MASK32
        k = ((k << 15) | (k >> 17)) & _MASK32
        k = (k * _C2) & _MASK32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h
