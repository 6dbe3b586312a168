"""Key_Shared sticky-key consumer selectors (semantics.md B3 "Key_Shared", gotcha 5).

Every entry has a sticky key: ``ordering_key``, else ``partition_key`` of its MessageMetadata, else
``NONE_KEY`` (Pulsar ``Commands.peekStickyKey``; a batch is one entry, so it goes to one consumer). Its hash
is Murmur3-32 (seed 0, ``quasar.protocol.hashing.murmur3_32``) of the key bytes ``& 0x7FFFFFFF`` (Pulsar
``Murmur3_32Hash.makeHash``). Selectors:

- ``ConsistentHashingSelector`` (AUTO_SPLIT, broker default ``subscriptionKeySharedUseConsistentHashing=true``):
  a ring with ``points`` (100) points per consumer at ``murmur3(consumer_name + str(i))``; a key goes to the
  ring's ceiling of its hash (wrapping around) (``ConsistentHashingStickyKeyConsumerSelector``).
- ``HashRangeAutoSplitSelector`` (AUTO_SPLIT with consistent hashing off): the 65,536-slot range is split in
  halves as consumers join; a key goes to the ceiling of ``hash % 65536``
  (``HashRangeAutoSplitStickyKeyConsumerSelector``).
- ``HashRangeExclusiveSelector`` (STICKY): consumers declare inclusive ranges in 0..65535; overlaps are refused
  with ConsumerAssignError; a key whose slot nobody owns is not delivered
  (``HashRangeExclusiveStickyKeyConsumerSelector``).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from quasar.broker.errors import ConsumerAssignError
from quasar.protocol.hashing import murmur3_32, murmur3_32_suffixes

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer

__all__ = [
    "NONE_KEY",
    "RANGE_SIZE",
    "ConsistentHashingSelector",
    "HashRangeAutoSplitSelector",
    "HashRangeExclusiveSelector",
    "KeySharedMeta",
    "KeySharedMode",
    "StickyKeySelector",
    "new_selector",
    "ring_points",
    "sticky_key_hash",
]

RANGE_SIZE = 1 << 16
"""Hash-range slots of Key_Shared (Pulsar ``DEFAULT_RANGE_SIZE`` 65,536)."""
NONE_KEY = b"NONE_KEY"
"""Sticky key of an entry without ordering or partition key (Pulsar ``Commands.NONE_KEY``)."""


class KeySharedMode(enum.IntEnum):
    """``KeySharedMode`` of PulsarApi.proto (CommandSubscribe.keySharedMeta.keySharedMode)."""

    AUTO_SPLIT = 0
    STICKY = 1


@dataclass(frozen=True, slots=True)
class KeySharedMeta:
    """CommandSubscribe.keySharedMeta: ``mode`` (a KeySharedMode), inclusive ``hash_ranges`` in 0..65535
    (STICKY), ``allow_out_of_order_delivery``."""

    mode: int = KeySharedMode.AUTO_SPLIT
    hash_ranges: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    allow_out_of_order_delivery: bool = False


def sticky_key_hash(key: bytes) -> int:
    """Pulsar ``makeStickyKeyHash``: Murmur3-32 of the key & 0x7FFFFFFF (a non-negative int32)."""
    return murmur3_32(key) & 0x7FFFFFFF


def ring_points(consumer_name: str, points: int) -> list[int]:
    """The ``points`` ring points of a consumer, ``sticky_key_hash((consumer_name + str(i)).encode())`` for
    i in 0..points-1 (Pulsar's consistent-hashing and Failover rings), reading the name once."""
    hashes = murmur3_32_suffixes(consumer_name.encode(), (str(i).encode() for i in range(points)))
    return [h & 0x7FFFFFFF for h in hashes]


class StickyKeySelector(Protocol):
    """Maps a sticky-key hash to a consumer."""

    def add_consumer(self, consumer: Consumer, ranges: Sequence[tuple[int, int]] = ()) -> None: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def select(self, key_hash: int) -> Consumer | None: ...


class ConsistentHashingSelector:
    """A hash ring with ``points`` points per consumer (Pulsar's default, 100)."""

    def __init__(self, points: int = 100) -> None:
        if points <= 0:
            raise ValueError(f"points must be positive, got {points}")
        self._points = points
        self._ring: dict[int, list[Consumer]] = {}
        self._keys: list[int] = []

    def add_consumer(self, consumer: Consumer, ranges: Sequence[tuple[int, int]] = ()) -> None:
        for point in ring_points(consumer.consumer_name, self._points):
            holders = self._ring.get(point)
            if holders is None:
                self._ring[point] = [consumer]
                bisect.insort(self._keys, point)
            else:
                holders.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        for point in list(self._ring):
            holders = self._ring[point]
            if consumer in holders:
                holders.remove(consumer)
                if not holders:
                    del self._ring[point]
                    self._keys.pop(bisect.bisect_left(self._keys, point))

    def select(self, key_hash: int) -> Consumer | None:
        keys = self._keys
        if not keys:
            return None
        index = bisect.bisect_left(keys, key_hash)
        holders = self._ring[keys[index if index < len(keys) else 0]]
        # several consumers on one point (equal names): Pulsar picks by the hash among them
        return holders[key_hash % len(holders)]


class HashRangeAutoSplitSelector:
    """Split the largest range in halves for each new consumer; the removed consumer's range goes to the
    consumer owning the next range (Pulsar ``HashRangeAutoSplitStickyKeyConsumerSelector``)."""

    def __init__(self, range_size: int = RANGE_SIZE) -> None:
        self._range_size = range_size
        self._ends: list[int] = []  # sorted inclusive upper ends
        self._owners: dict[int, Consumer] = {}

    def add_consumer(self, consumer: Consumer, ranges: Sequence[tuple[int, int]] = ()) -> None:
        if not self._ends:
            self._ends.append(self._range_size)
            self._owners[self._range_size] = consumer
            return
        best_end, best_size, lower = self._ends[0], -1, -1
        previous = -1
        for end in self._ends:
            size = end - previous
            if size > best_size:
                best_end, best_size, lower = end, size, previous
            previous = end
        if best_size < 2:
            raise ConsumerAssignError("no hash range is left to split for a new consumer")
        middle = best_end - (best_end - lower) // 2
        bisect.insort(self._ends, middle)
        self._owners[middle] = consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        for end in [e for e, c in self._owners.items() if c is consumer]:
            index = self._ends.index(end)
            self._ends.pop(index)
            del self._owners[end]
            if index < len(self._ends):
                continue  # the next range (the ceiling) now covers these slots
            if self._ends:  # the removed range was the last: the one below takes its end over
                below = self._ends.pop()
                owner = self._owners.pop(below)
                self._ends.append(end)
                self._owners[end] = owner

    def select(self, key_hash: int) -> Consumer | None:
        if not self._ends:
            return None
        slot = key_hash % self._range_size
        index = bisect.bisect_left(self._ends, slot)
        return self._owners[self._ends[index if index < len(self._ends) else -1]]


class HashRangeExclusiveSelector:
    """STICKY: each consumer owns the inclusive ranges it declared (key_shared_meta.hashRanges)."""

    def __init__(self, range_size: int = RANGE_SIZE) -> None:
        self._range_size = range_size
        self._starts: list[int] = []
        self._ranges: dict[int, tuple[int, Consumer]] = {}  # start -> (end inclusive, consumer)

    def add_consumer(self, consumer: Consumer, ranges: Sequence[tuple[int, int]] = ()) -> None:
        """Raises ConsumerAssignError for no range, a range outside 0..range_size-1, or an overlap."""
        if not ranges:
            raise ConsumerAssignError("a STICKY Key_Shared consumer must declare hash ranges")
        ordered = sorted(ranges)
        for start, end in ordered:
            if not 0 <= start <= end < self._range_size:
                raise ConsumerAssignError(f"hash range [{start}, {end}] is outside 0..{self._range_size - 1}")
        for (_, end), (start, _) in itertools.pairwise(ordered):
            if start <= end:
                raise ConsumerAssignError(f"the declared hash ranges overlap at {start}")
        for start, end in ordered:
            for other_start, (other_end, other) in self._ranges.items():
                if start <= other_end and other_start <= end:
                    raise ConsumerAssignError(
                        f"Range conflict with consumer {other.consumer_name}: "
                        f"[{start}, {end}] overlaps [{other_start}, {other_end}]"
                    )
        for start, end in ordered:
            bisect.insort(self._starts, start)
            self._ranges[start] = (end, consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        for start in [s for s, (_, c) in self._ranges.items() if c is consumer]:
            del self._ranges[start]
            self._starts.remove(start)

    def select(self, key_hash: int) -> Consumer | None:
        slot = key_hash % self._range_size
        index = bisect.bisect_right(self._starts, slot) - 1
        if index < 0:
            return None
        end, consumer = self._ranges[self._starts[index]]
        return consumer if slot <= end else None


def new_selector(
    mode: int, *, use_consistent_hashing: bool = True, replica_points: int = 100
) -> StickyKeySelector:
    """The selector of a Key_Shared subscription in ``mode`` (a ``KeySharedMode``): STICKY declared ranges, else
    the consistent-hashing ring with ``replica_points`` points per consumer (broker
    ``subscriptionKeySharedUseConsistentHashing``), else the auto-split hash ranges. Raises ConsumerAssignError
    for an unknown mode."""
    if mode == KeySharedMode.STICKY:
        return HashRangeExclusiveSelector()
    if mode != KeySharedMode.AUTO_SPLIT:
        raise ConsumerAssignError(f"unknown Key_Shared mode {mode}")
    if use_consistent_hashing:
        return ConsistentHashingSelector(replica_points)
    return HashRangeAutoSplitSelector()
