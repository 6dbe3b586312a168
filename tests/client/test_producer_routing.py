"""BoostHash, the official Python/C++ client's default partition-key hash (C++ ``BoostHash::makeHash``):
golden values taken from pulsar-client 3.13's ``libpulsar`` (C++ 4.2, Boost >= 1.82 string hash)."""

from __future__ import annotations

import pytest

from quasar.client.config import HashingScheme, ProducerConfig
from quasar.client.routing import _MULXP_K, _MULXP_Q, _MULXP_W0, MessageRouter, boost_hash

# key -> pulsar::BoostHash::makeHash(key), read from the official client's shared library
BOOST_VECTORS = [
    ("", 2133126054),
    ("a", 2135870748),
    ("ab", 133003382),
    ("abc", 1074445565),
    ("abcd", 246651746),
    ("abcde", 352230277),
    ("abcdefg", 1432135526),
    ("abcdefgh", 1534298190),
    ("abcdefghi", 853264110),
    ("hello", 1742291129),
    ("key-42", 1160830588),
    ("héllo", 1308733051),
    ("日本語", 18892553),
    ("😀", 683164379),
    ("x" * 1000, 66528558),
]


@pytest.mark.parametrize(("key", "expected"), BOOST_VECTORS)
def test_boost_hash_matches_the_official_client(key: str, expected: int):
    assert boost_hash(key) == expected
    assert boost_hash(key.encode()) == expected


def test_boost_hash_constants_are_boosts():
    product = _MULXP_Q * _MULXP_K  # mulx(0 + Q, K): low ^ high 64 bits of the 128-bit product
    assert (product ^ (product >> 64)) & (2**64 - 1) == _MULXP_W0


def test_boost_hash_is_the_default_and_the_other_schemes_stay_selectable():
    assert ProducerConfig().hashing_scheme == HashingScheme.BoostHash == 0
    assert HashingScheme.JavaStringHash == 1 and HashingScheme.Murmur3_32Hash == 2  # pulsar.HashingScheme
    assert MessageRouter(ProducerConfig()).choose(None, "hello", 13) == 1742291129 % 13
    java = MessageRouter(ProducerConfig(hashing_scheme=HashingScheme.JavaStringHash))
    assert java.choose(None, "hello", 13) == 99162322 % 13
    assert ProducerConfig(hashing_scheme=0).hashing_scheme is HashingScheme.BoostHash
