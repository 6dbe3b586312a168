"""Key_Shared selectors (semantics.md B3): Murmur3 hashing, consistent-hashing ring, hash-range split, STICKY."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.broker.errors import ConsumerAssignError
from quasar.broker.key_shared import (
    RANGE_SIZE,
    ConsistentHashingSelector,
    HashRangeAutoSplitSelector,
    HashRangeExclusiveSelector,
    ring_points,
    sticky_key_hash,
)
from quasar.protocol.hashing import murmur3_32, murmur3_32_suffixes


@dataclass(eq=False)
class FakeConsumer:
    consumer_name: str


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"hello", 0, 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
    ],
)
def test_murmur3_32_known_vectors(data, seed, expected):
    assert murmur3_32(data, seed) == expected


@given(st.binary(max_size=40), st.lists(st.binary(max_size=9), max_size=5), st.integers(0, 2**32 - 1))
def test_murmur3_over_suffixes_equals_the_hash_of_each_concatenation(prefix, suffixes, seed):
    assert murmur3_32_suffixes(prefix, suffixes, seed) == [murmur3_32(prefix + s, seed) for s in suffixes]


@given(st.text(max_size=30), st.integers(1, 120))
def test_ring_points_are_pulsars_name_plus_index_hashes(name, points):
    assert ring_points(name, points) == [sticky_key_hash(f"{name}{i}".encode()) for i in range(points)]


def test_sticky_key_hash_is_non_negative_int32():
    assert all(0 <= sticky_key_hash(f"k{i}".encode()) < 2**31 for i in range(200))


def test_consistent_hashing_moves_only_keys_of_the_new_consumer():
    selector = ConsistentHashingSelector(100)
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    selector.add_consumer(a)
    selector.add_consumer(b)
    hashes = [sticky_key_hash(f"key-{i}".encode()) for i in range(1000)]
    before = [selector.select(h) for h in hashes]
    assert {id(x) for x in before} == {id(a), id(b)}
    selector.add_consumer(c)
    after = [selector.select(h) for h in hashes]
    moved = [(x, y) for x, y in zip(before, after, strict=True) if x is not y]
    assert moved and all(y is c for _, y in moved)  # keys only move to the new consumer
    assert 150 < sum(y is c for y in after) < 550  # about a third each with 100 points per consumer
    selector.remove_consumer(c)
    assert [selector.select(h) for h in hashes] == before
    selector.remove_consumer(a)
    selector.remove_consumer(b)
    assert selector.select(hashes[0]) is None


@given(st.integers(1, 12), st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=50))
def test_auto_split_covers_every_slot(count, hashes):
    selector = HashRangeAutoSplitSelector()
    consumers = [FakeConsumer(f"c{i}") for i in range(count)]
    for consumer in consumers:
        selector.add_consumer(consumer)
    assert all(selector.select(h) in consumers for h in hashes)
    for consumer in consumers[:-1]:
        selector.remove_consumer(consumer)
        assert all(selector.select(h) is not consumer for h in hashes)
    assert all(selector.select(h) is consumers[-1] for h in hashes)


def test_auto_split_halves_the_largest_range():
    selector = HashRangeAutoSplitSelector()
    a, b = FakeConsumer("a"), FakeConsumer("b")
    selector.add_consumer(a)
    selector.add_consumer(b)
    assert selector.select(0) is b and selector.select(RANGE_SIZE // 2 - 1) is b
    assert selector.select(RANGE_SIZE // 2 + 1) is a and selector.select(RANGE_SIZE - 1) is a


def test_sticky_ranges_and_conflicts():
    selector = HashRangeExclusiveSelector()
    a, b = FakeConsumer("a"), FakeConsumer("b")
    selector.add_consumer(a, [(0, 99), (200, 299)])
    selector.add_consumer(b, [(100, 199)])
    assert selector.select(50) is a and selector.select(150) is b and selector.select(250) is a
    assert selector.select(300) is None
    assert selector.select(RANGE_SIZE + 150) is b  # slot = hash % 65536
    for bad in ([(150, 160)], [(299, 400)], [], [(5, 1)], [(0, RANGE_SIZE)], [(400, 500), (450, 460)]):
        with pytest.raises(ConsumerAssignError):
            selector.add_consumer(FakeConsumer("c"), bad)
    selector.remove_consumer(a)
    assert selector.select(50) is None
    selector.add_consumer(FakeConsumer("d"), [(0, 99)])
    assert selector.select(50).consumer_name == "d"


def test_failover_ring_spreads_topics_and_is_stable():
    from quasar.broker.dispatchers import failover_ring_pick

    a, b = FakeConsumer("a"), FakeConsumer("b")
    picks = [failover_ring_pick([a, b], f"persistent://public/default/t{i}") for i in range(200)]
    assert 40 < sum(p is a for p in picks) < 160  # both consumers get topics
    assert picks == [failover_ring_pick([a, b], f"persistent://public/default/t{i}") for i in range(200)]
    assert failover_ring_pick([a], "persistent://public/default/t0") is a
