"""RocketMQ filter expressions: TAG expressions parsed into a tag set and its hash set (RocketMQ
``FilterAPI.build``), and the two-step match the broker and proxy do.

A TAG expression is ``*`` or empty (every message) or tags joined by ``||`` (``"TagA || TagB"``: split on
``||``, each trimmed, empties dropped). Matching is RocketMQ's two steps: the consume queue's tag hash
(``tagsCode`` = Java ``String.hashCode()`` of the tag, :func:`java_string_hash`) decides first, without
reading the commit log (``ExpressionMessageFilter.isMatchedByConsumeQueue``), then the message's own tag must
equal one of the tags (the proxy's exact check, which drops hash collisions; an untagged message never
matches a tag list). SQL92 expressions (``FilterType.SQL``) are not supported: they are refused with
:class:`IllegalFilterExpressionError`, which the handlers answer with ILLEGAL_FILTER_EXPRESSION (40010).
"""

from __future__ import annotations

from dataclasses import dataclass

from quasar.broker.tag_hash import PROPERTY_TAGS, java_string_hash

__all__ = [
    "FILTER_TYPE_SQL",
    "FILTER_TYPE_TAG",
    "MATCH_ALL",
    "PROPERTY_TAGS",
    "IllegalFilterExpressionError",
    "TagFilter",
    "java_string_hash",
    "parse_filter_expression",
]

FILTER_TYPE_UNSPECIFIED = 0
FILTER_TYPE_TAG = 1
FILTER_TYPE_SQL = 2
"""``apache.rocketmq.v2.FilterType`` values (UNSPECIFIED is read as TAG, as the proxy does)."""

MAX_EXPRESSION_LENGTH = 16 * 1024
"""Longest expression accepted, in characters (the proxy bounds a request's properties at 16 KiB; an
expression is no bigger in practice). Longer ones are refused rather than split into a huge set."""

SUB_ALL = "*"


class IllegalFilterExpressionError(ValueError):
    """The expression cannot be used: SQL92, too long, or a tag list naming no tag."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed TAG expression. ``tags`` and ``tag_hashes`` are None for ``*`` (every message matches)."""

    expression: str
    tags: frozenset[str] | None
    tag_hashes: frozenset[int] | None

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def matches_hash(self, tag_hash: int) -> bool:
        """Step 1, on the consume queue unit: ``*`` or the unit's tag hash is one of the tags' hashes."""
        return self.tag_hashes is None or tag_hash in self.tag_hashes

    def matches_tag(self, tag: str | None) -> bool:
        """Step 2, on the message: ``*`` or its tag (None: untagged) is one of the tags."""
        return self.tags is None or (tag is not None and tag in self.tags)


MATCH_ALL = TagFilter(SUB_ALL, None, None)


def parse_filter_expression(expression: str, filter_type: int = FILTER_TYPE_TAG) -> TagFilter:
    """Parse ``expression`` of ``filter_type`` (``FilterType`` value: 0 or 1 = TAG, 2 = SQL).

    Returns a :class:`TagFilter`: ``*`` or blank → every message; ``"A||B"`` → tags {A, B} with their Java
    hashes. Raises :class:`IllegalFilterExpressionError` for SQL92 ("SQL92 filtering is not supported"), an
    unknown filter type, an expression over :data:`MAX_EXPRESSION_LENGTH` characters, or a tag list that
    names no tag once split and trimmed (``"||"``: RocketMQ would match nothing at all).
    """
    if filter_type == FILTER_TYPE_SQL:
        raise IllegalFilterExpressionError("SQL92 filtering is not supported; use a TAG expression")
    if filter_type not in (FILTER_TYPE_UNSPECIFIED, FILTER_TYPE_TAG):
        raise IllegalFilterExpressionError(f"unknown filter type {filter_type}")
    if not isinstance(expression, str):
        raise IllegalFilterExpressionError(
            f"filter expression must be a string, not {type(expression).__name__}"
        )
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise IllegalFilterExpressionError(
            f"filter expression is {len(expression)} characters long, the limit is {MAX_EXPRESSION_LENGTH}"
        )
    text = expression.strip()
    if not text or text == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(tag for tag in (part.strip() for part in text.split("||")) if tag)
    if not tags:
        raise IllegalFilterExpressionError(f"filter expression {expression!r} names no tag")
    return TagFilter(text, tags, frozenset(java_string_hash(tag) for tag in tags))
