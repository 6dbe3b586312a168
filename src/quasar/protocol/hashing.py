"""Hash functions fixed by Pulsar's wire behaviour (pure functions of bytes; no I/O).

``murmur3_32`` is MurmurHash3 x86 32-bit as Guava's ``Hashing.murmur3_32`` computes it, which Pulsar uses
for Key_Shared hash ranges, the Failover consumer ring and the ``Murmur3_32Hash`` routing scheme (where the
result is then masked with ``Integer.MAX_VALUE``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["murmur3_32", "murmur3_32_suffixes"]

_MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def murmur3_32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` with ``seed``: an unsigned 32-bit int (0 <= h < 2**32)."""
    data = bytes(data)
    rounded = len(data) & ~3
    return _finish(_mix_blocks(seed & _MASK32, data[:rounded]), data[rounded:], len(data))


def murmur3_32_suffixes(prefix: bytes, suffixes: Iterable[bytes], seed: int = 0) -> list[int]:
    """``[murmur3_32(prefix + s, seed) for s in suffixes]``, reading ``prefix`` once: its whole 4-byte
    blocks are mixed a single time and each suffix only adds its own few bytes. Pulsar hashes
    ``consumer_name + str(i)`` for each of a consumer's ring points; this keeps that hash while costing
    O(len(prefix) + total suffix length) instead of O(points x len(prefix))."""
    prefix = bytes(prefix)
    rounded = len(prefix) & ~3
    state = _mix_blocks(seed & _MASK32, prefix[:rounded])
    rest = prefix[rounded:]
    results = []
    for suffix in suffixes:
        tail = rest + suffix
        whole = len(tail) & ~3
        results.append(_finish(_mix_blocks(state, tail[:whole]), tail[whole:], len(prefix) + len(suffix)))
    return results


def _mix_blocks(h: int, blocks: bytes) -> int:
    """The hash state after mixing ``blocks`` (a multiple of 4 bytes) into state ``h``."""
    for (k,) in struct.iter_unpack("<I", blocks):
        k = (k * _C1) & _MASK32
        k = ((k << 15) | (k >> 17)) & _MASK32
        k = (k * _C2) & _MASK32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _MASK32
        h = (h * 5 + 0xE6546B64) & _MASK32
    return h


def _finish(h: int, tail: bytes, length: int) -> int:
    """Mix the last 0..3 bytes ``tail`` into ``h`` and finalise for a message of ``length`` bytes."""
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
    h ^= length & _MASK32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h
