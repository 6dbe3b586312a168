"""int64 wire values and batch-index ack sets (``CommandAck.message_id[].ack_set``, ``MessageIdData.ack_set``).

Pulsar sends an ack set as ``repeated int64``: the words of a ``java.util.BitSet`` of the batch indexes still
to acknowledge, least-significant word first (bit i of word w = index 64*w + i). Python holds such a set as
one non-negative int; these helpers convert between that int and the signed words of the wire.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["INT64_MAX", "ack_set_bits", "ack_set_words", "to_int64"]

INT64_MAX = (1 << 63) - 1
_U64 = 1 << 64
_WORD = _U64 - 1


def to_int64(value: int) -> int:
    """An unsigned 64-bit value as Java's signed long (``2**64 - 1`` -> ``-1``); smaller values unchanged."""
    return value - _U64 if value > INT64_MAX else value


def ack_set_words(bits: int, size: int = 0) -> list[int]:
    """The bit set ``bits`` (>= 0) as signed int64 words, least significant first.

    ``size`` (batch size, items) pads to ``ceil(size / 64)`` words, at least one, as the Java client's
    ``BitSet.toLongArray`` of a batch of that size; with ``size`` 0 trailing zero words are dropped.
    """
    if bits < 0:
        raise ValueError(f"an ack set is a non-negative bit set, got {bits}")
    count = max((bits.bit_length() + 63) // 64, (size + 63) // 64, 1 if size else 0)
    # one conversion through bytes: linear in the set's length (shifting the whole int per word is quadratic)
    return list(struct.unpack(f"<{count}q", bits.to_bytes(8 * count, "little")))


def ack_set_bits(words: Iterable[int]) -> int:
    """Wire ack-set words (int64, possibly negative) as one non-negative bit set.

    Linear in the number of words (one pass through bytes); a word is taken modulo 2**64, so unsigned words
    read the same."""
    values = [word & _WORD for word in words]
    return int.from_bytes(struct.pack(f"<{len(values)}Q", *values), "little")
