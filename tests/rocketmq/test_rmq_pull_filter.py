"""``java_string_hash`` against Java's ``String.hashCode()`` and the TAG expression parser (RocketMQ
``FilterAPI.build``), with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.broker.rocketmq.filter_expression import (
    FILTER_TYPE_SQL,
    FILTER_TYPE_TAG,
    IllegalFilterExpressionError,
    parse_filter_expression,
)
from quasar.broker.tag_hash import java_string_hash

# Values worked out by hand from Java's definition s[0]*31^(n-1) + ... + s[n-1] in 32-bit int arithmetic
KNOWN = {
    "": 0,
    "a": 97,
    "ab": 97 * 31 + 98,  # 3105
    "Aa": 2112,
    "BB": 2112,  # the classic collision: the store filter lets it through, the exact tag check drops it
    "TagA": ((84 * 31 + 97) * 31 + 103) * 31 + 65,  # 2598919
    "hello": 99162322,
    "\U0001f600": 0xD83D * 31 + 0xDE00,  # a non-BMP character hashes as its two UTF-16 surrogates: 1772899
    "polygenelubricants": -(2**31),  # wraps to Integer.MIN_VALUE
    "\u00e9t\u00e9": (0xE9 * 31 + 0x74) * 31 + 0xE9,
}


@pytest.mark.parametrize(("text", "expected"), sorted(KNOWN.items()))
def test_java_string_hash_known_values(text: str, expected: int):
    assert java_string_hash(text) == expected


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def _utf16_units(text: str) -> list[int]:
    units = []
    for char in text:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            units += [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
        else:
            units.append(code)
    return units


@given(st.text())
def test_java_string_hash_is_the_polynomial_over_utf16_units(text: str):
    units = _utf16_units(text)
    expected = _signed32(sum(unit * pow(31, len(units) - 1 - i, 2**32) for i, unit in enumerate(units)))
    assert java_string_hash(text) == expected
    assert -(2**31) <= java_string_hash(text) < 2**31


@given(st.text(), st.text())
def test_java_string_hash_of_a_concatenation(left: str, right: str):
    # Java: (a + b).hashCode() == a.hashCode() * 31^len(b) + b.hashCode() (mod 2^32)
    n = len(_utf16_units(right))
    combined = java_string_hash(left) * pow(31, n, 2**32) + java_string_hash(right)
    assert java_string_hash(left + right) == _signed32(combined)


def test_java_string_hash_refuses_non_strings():
    with pytest.raises(TypeError):
        java_string_hash(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("expression", ["", "*", "  *  ", "   "])
def test_star_and_blank_match_everything(expression: str):
    parsed = parse_filter_expression(expression)
    assert parsed.matches_all and parsed.tags is None and parsed.tag_hashes is None
    assert parsed.matches_hash(12345) and parsed.matches_tag(None) and parsed.matches_tag("x")


def test_tag_list_is_split_trimmed_and_hashed():
    parsed = parse_filter_expression(" TagA || TagB ||  || TagA", FILTER_TYPE_TAG)
    assert parsed.tags == {"TagA", "TagB"}
    assert parsed.tag_hashes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert parsed.matches_hash(java_string_hash("TagB")) and not parsed.matches_hash(java_string_hash("TagC"))
    assert parsed.matches_tag("TagA") and not parsed.matches_tag("TagC") and not parsed.matches_tag(None)
    # a hash collision passes the consume queue step and is dropped by the exact tag check
    collision = parse_filter_expression("Aa")
    assert collision.matches_hash(java_string_hash("BB")) and not collision.matches_tag("BB")
    assert parse_filter_expression("x", 0).tags == {"x"}  # FilterType UNSPECIFIED reads as TAG


@pytest.mark.parametrize(
    ("expression", "filter_type", "message"),
    [
        ("a > 1", FILTER_TYPE_SQL, "SQL92 filtering is not supported"),
        ("TagA", 7, "unknown filter type"),
        ("||", FILTER_TYPE_TAG, "names no tag"),
        (" || ||", FILTER_TYPE_TAG, "names no tag"),
        ("a" * 20_000, FILTER_TYPE_TAG, "the limit is"),
    ],
)
def test_bad_expressions_are_refused(expression: str, filter_type: int, message: str):
    with pytest.raises(IllegalFilterExpressionError, match=message):
        parse_filter_expression(expression, filter_type)


_TAG = st.text(st.characters(blacklist_characters="|", blacklist_categories=("Cs",)), min_size=1).filter(
    lambda tag: tag.strip() != "" and tag.strip() != "*"
)


@given(st.lists(_TAG, min_size=1, max_size=8), st.lists(st.sampled_from(["", " ", "  ", "\t"]), min_size=16))
def test_parser_round_trips_any_tag_list(tags: list[str], pads: list[str]):
    expression = "||".join(
        pads[i % len(pads)] + tag + pads[(i + 1) % len(pads)] for i, tag in enumerate(tags)
    )
    parsed = parse_filter_expression(expression)
    expected = {tag.strip() for tag in tags}
    assert parsed.tags == expected
    assert parsed.tag_hashes == {java_string_hash(tag) for tag in expected}
    for tag in expected:
        assert parsed.matches_tag(tag) and parsed.matches_hash(java_string_hash(tag))
