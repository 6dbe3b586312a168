"""Partition routing of a partitioned producer: key hashes and the routing modes.

Sources: semantics.md B5 "Routing"; Java ``JavaStringHash``, ``Murmur3_32Hash``,
``RoundRobinPartitionMessageRouterImpl``, ``SinglePartitionMessageRouterImpl``; C++ ``RoundRobinMessageRouter``.

* A message with a partition key always goes to ``hash(key) % num_partitions`` (the hash is made
  non-negative with ``& 0x7FFFFFFF`` first, Java ``signSafeMod``).
* ``BoostHash`` (default, as the official Python/C++ client): C++ ``BoostHash::makeHash`` is
  ``boost::hash<std::string>()(key) & INT32_MAX``; :func:`boost_hash` reproduces the Boost >= 1.82 string hash
  (``mulxp1_hash`` over the UTF-8 bytes, 64-bit ``size_t``, seed 0) that pulsar-client 3.x wheels are built with
  (checked against ``pulsar.BoostHash::makeHash`` of pulsar-client 3.13 / C++ 4.2 and against the partitions it
  chooses, see tests/client/test_producer_routing_interop.py).
* ``JavaStringHash``: Java ``String.hashCode`` (``31*h + c`` over UTF-16 code units, int32 wrap-around)
  ``& INT_MAX``. ``Murmur3_32Hash``: ``murmur3_32(key.encode()) & INT_MAX`` (:mod:`quasar.protocol.hashing`).
* RoundRobinDistribution without a key, with batching on: the producer stays on one partition, starting at a
  random one, and moves to the next when the messages routed there since the last switch fill a batch
  (``batching_max_messages`` messages, or ``batching_max_allowed_size_in_bytes`` would be exceeded), as the C++
  ``RoundRobinMessageRouter`` (so consecutive full batches go to different partitions and are in flight
  together), or when ``batching_max_publish_delay_ms * partition_switch_frequency_by_publish_delay`` ms passed
  since the last switch (Java's time window). Without batching it is ``counter++ % n``.
* UseSinglePartition without a key: one partition chosen at random when the producer is created.
* CustomPartition: ``message_router(message, num_partitions) -> int``.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from typing import Any

from quasar.protocol.hashing import murmur3_32

from .config import HashingScheme, PartitionsRoutingMode, ProducerConfig
from .message import OutgoingMessage

__all__ = ["MessageRouter", "boost_hash", "java_string_hash", "murmur3_32_hash"]

_INT_MAX = 0x7FFFFFFF
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_MULXP_Q = 0x9E3779B97F4A7C15  # Boost hash_range (mulxp1): golden-ratio increment
_MULXP_K = 0xDF442D22CE4859B9  # multiplier
_MULXP_W0 = 0xE9B6294983B62ACE  # mulx(seed + _MULXP_Q, _MULXP_K) for seed 0
_unpack_u64s = struct.Struct("<Q").iter_unpack


def boost_hash(key: str | bytes) -> int:
    """C++ ``BoostHash``: ``boost::hash<std::string>`` of the key's UTF-8 bytes ``& INT32_MAX`` (non-negative).

    Boost >= 1.82 ``hash_range`` for char ranges on a 64-bit ``size_t`` (``mulxp1_hash``), seed 0, where
    ``mulx(x, y)`` is the 128-bit product's low 64 bits XOR its high 64 bits::

        w = mulx(seed + Q, K); h = w ^ n
        for each 8-byte little-endian word v: w += Q; h ^= mulx(v + w, K)
        tail (0-7 bytes) packed into v as Boost does; w += Q; h ^= mulx(v + w, K)
        return mulx(h + w, K)
    """
    data = key.encode("utf-8") if isinstance(key, str) else key
    n = len(data)
    w = _MULXP_W0
    h = w ^ n
    full = n & ~7
    if full:
        for (v,) in _unpack_u64s(data[:full]):
            w = (w + _MULXP_Q) & _U64
            r = ((v + w) & _U64) * _MULXP_K
            h ^= (r ^ (r >> 64)) & _U64
    m = n - full
    if m >= 4:
        v = int.from_bytes(data[n - 4 :], "little") << ((m - 4) * 8) | int.from_bytes(
            data[full : full + 4], "little"
        )
    elif m:
        x1 = (m - 1) & 2
        x2 = m >> 1
        v = data[full + x1] << (x1 * 8) | data[full + x2] << (x2 * 8) | data[full]
    else:
        v = 0
    w = (w + _MULXP_Q) & _U64
    r = ((v + w) & _U64) * _MULXP_K
    h ^= (r ^ (r >> 64)) & _U64
    r = ((h + w) & _U64) * _MULXP_K
    return (r ^ (r >> 64)) & _INT_MAX


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


def murmur3_32_hash(key: str | bytes) -> int:
    """Pulsar's ``Murmur3_32Hash`` routing hash: MurmurHash3 x86_32 (seed 0, :func:`quasar.protocol.hashing.murmur3_32`)
    of the key's UTF-8 bytes ``& Integer.MAX_VALUE``."""
    return murmur3_32(key.encode("utf-8") if isinstance(key, str) else key) & _INT_MAX


_HASHES: dict[HashingScheme, Callable[[str], int]] = {
    HashingScheme.BoostHash: boost_hash,
    HashingScheme.JavaStringHash: java_string_hash,
    HashingScheme.Murmur3_32Hash: murmur3_32_hash,
}


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
        self._custom_mode = self._mode == PartitionsRoutingMode.CustomPartition
        self._single_mode = self._mode == PartitionsRoutingMode.UseSinglePartition
        self._hash = _HASHES[config.hashing_scheme]
        self._custom = config.message_router
        self._batching = config.batching_enabled
        switch_ms = config.batching_max_publish_delay_ms * config.partition_switch_frequency_by_publish_delay
        self._switch_seconds = max(1, switch_ms) / 1000
        self._batch_messages = config.batching_max_messages
        self._batch_bytes = config.batching_max_allowed_size_in_bytes
        # seconds clock; time.monotonic itself unless a test injects a ms clock
        self._now: Callable[[], float] = time.monotonic if clock_ms is None else lambda: clock_ms() / 1000
        rng = rng or random.Random()
        self._start = rng.randrange(1 << 16)
        self._counter = self._start
        self._last_switch = self._now()
        self._routed = 0  # messages routed to the current partition since the last switch
        self._routed_bytes = 0

    def choose(self, message: Any, key: str | None, num_partitions: int, size: int = 0) -> int:
        """Partition index in ``[0, num_partitions)`` for a message with partition ``key`` (or None).

        Args:
            message: the OutgoingMessage (or its bare payload bytes), passed to a custom router.
            size: payload bytes (RoundRobinDistribution with batching counts them).

        Raises:
            ValueError: a custom router returned an index out of range or a non-int.
        """
        if self._custom_mode:
            assert self._custom is not None
            if isinstance(message, bytes):
                message = OutgoingMessage(message)
            index = self._custom(message, num_partitions)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < num_partitions:
                raise ValueError(
                    f"message_router returned {index!r}, not a partition in [0, {num_partitions})"
                )
            return index
        if key:
            return self._hash(key) % num_partitions
        if self._single_mode:
            return self._start % num_partitions
        if self._batching:
            now = self._now()
            routed_bytes = self._routed_bytes + size
            if (
                (0 < self._batch_messages <= self._routed)
                or (0 < self._batch_bytes < routed_bytes)
                or now - self._last_switch >= self._switch_seconds
            ):
                self._counter += 1
                self._last_switch = now
                self._routed = 1
                self._routed_bytes = size
            else:
                self._routed += 1
                self._routed_bytes = routed_bytes
            return self._counter % num_partitions
        index = self._counter % num_partitions
        self._counter += 1
        return index
