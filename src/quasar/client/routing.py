"""Partition routing of a partitioned producer: key hashes and the routing modes.

Sources: semantics.md B5 "Routing"; Java ``JavaStringHash``, ``Murmur3_32Hash``,
``RoundRobinPartitionMessageRouterImpl``, ``SinglePartitionMessageRouterImpl``; C++ ``RoundRobinMessageRouter``.

* A message with a partition key always goes to ``hash(key) % num_partitions`` (the hash is made
  non-negative with ``& 0x7FFFFFFF`` first, Java ``signSafeMod``).
* ``JavaStringHash``: Java ``String.hashCode`` (``31*h + c`` over UTF-16 code units, int32 wrap-around)
  ``& INT_MAX``. ``Murmur3_32Hash``: MurmurHash3 x86_32, seed 0, over the key's UTF-8 bytes, ``& INT_MAX``.
* RoundRobinDistribution without a key: with batching on the partition changes per time window of
  ``batching_max_publish_delay_ms * partition_switch_frequency_by_publish_delay`` ms, starting at a random
  partition (Java); without batching it is ``counter++ % n``.
* UseSinglePartition without a key: one partition chosen at random when the producer is created.
* CustomPartition: ``message_router(message, num_partitions) -> int``.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from typing import Any

from .config import HashingScheme, PartitionsRoutingMode, ProducerConfig

__all__ = ["MessageRouter", "java_string_hash", "murmur3_32_hash"]

_INT_MAX = 0x7FFFFFFF
_U32 = 0xFFFFFFFF


def java_string_hash(key: str) -> int:
    """Java ``String.hashCode() & Integer.MAX_VALUE`` (UTF-16 code units; non-negative int32)."""
    h = 0
    if key.isascii():
        for ch in key.encode("ascii"):
            h = (31 * h + ch) & _U32
    else:
        data = key.encode("utf-16-be", "surrogatepass")
        for (unit,) in struct.iter_unpack(">H", data):
            h = (31 * h + unit) & _U32
    return h & _INT_MAX


def murmur3_32_hash(key: str | bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of the UTF-8 bytes of ``key`` ``& Integer.MAX_VALUE`` (Pulsar ``Murmur3_32Hash``)."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    length = len(data)
    h = seed & _U32
    c1, c2 = 0xCC9E2D51, 0x1B873593
    rounded = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:rounded]):
        k = (k * c1) & _U32
        k = ((k << 15) | (k >> 17)) & _U32
        k = (k * c2) & _U32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _U32
        h = (h * 5 + 0xE6546B64) & _U32
    tail = data[rounded:]
    k = 0
    if len(tail) == 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * c1) & _U32
        k = ((k << 15) | (k >> 17)) & _U32
        k = (k * c2) & _U32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _U32
    h ^= h >> 16
    return h & _INT_MAX


class MessageRouter:
    """Chooses the partition of each message of a partitioned producer.

    Args:
        config: the producer configuration (routing mode, hashing scheme, batching window, custom router).
        clock_ms: milliseconds clock (injectable for tests).
        rng: random source for the start partition (injectable for tests).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        clock_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._mode = config.message_routing_mode
        self._hash = (
            java_string_hash if config.hashing_scheme == HashingScheme.JavaStringHash else murmur3_32_hash
        )
        self._custom = config.message_router
        self._batching = config.batching_enabled
        self._switch_ms = max(
            1, config.batching_max_publish_delay_ms * config.partition_switch_frequency_by_publish_delay
        )
        self._clock_ms = clock_ms or (lambda: time.monotonic_ns() // 1_000_000)
        rng = rng or random.Random()
        self._start = rng.randrange(1 << 16)
        self._counter = self._start

    def choose(self, message: Any, key: str | None, num_partitions: int) -> int:
        """Partition index in ``[0, num_partitions)`` for a message with partition ``key`` (or None).

        Raises:
            ValueError: a custom router returned an index out of range or a non-int.
        """
        if self._mode == PartitionsRoutingMode.CustomPartition:
            assert self._custom is not None
            index = self._custom(message, num_partitions)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < num_partitions:
                raise ValueError(
                    f"message_router returned {index!r}, not a partition in [0, {num_partitions})"
                )
            return index
        if key:
            return self._hash(key) % num_partitions
        if self._mode == PartitionsRoutingMode.UseSinglePartition:
            return self._start % num_partitions
        if self._batching:
            return (self._clock_ms() // self._switch_ms + self._start) % num_partitions
        index = self._counter % num_partitions
        self._counter += 1
        return index
