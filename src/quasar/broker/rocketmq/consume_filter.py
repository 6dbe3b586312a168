"""Tag filters of RocketMQ consumer groups on the receive path (reference rocketmq-grpc.md §7).

A TAG expression is ``*`` or empty (every message), else tags joined by ``||`` (spaces around them ignored,
empty parts dropped): a message matches when its tag is one of them; an untagged message matches only ``*``
(the proxy's exact-tag check after the consume queue's hash filter, ``FilterUtils``). SQL92 expressions are
refused with ILLEGAL_FILTER_EXPRESSION until property filtering is supported, as a broker with
``enablePropertyFilter=false`` answers. Messages that do not match are acknowledged for the group (the proxy
auto-acks them), so they never come back.

(rmqpull's ``filter_expression.py`` parses the same grammar for pull by offset and adds the consume-queue tag
hash; this module is the receive path's, written before that one existed.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.protocol import parse_headers_and_payload
from quasar.protocol.errors import ProtocolError

__all__ = ["MAX_EXPRESSION_LENGTH", "TAGS_PROPERTY", "TagFilter", "parse_filter"]

TAGS_PROPERTY = "TAGS"
"""The Pulsar property holding a RocketMQ tag (``mapping.PROPERTY_TAGS``)."""
MAX_EXPRESSION_LENGTH = 4096


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed TAG expression: ``tags`` None means every message."""

    tags: frozenset[str] | None = None

    def matches(self, tag: str | None) -> bool:
        """Whether a message tagged ``tag`` (None: untagged) passes."""
        return self.tags is None or (tag is not None and tag in self.tags)

    def entry_may_match(self, data: memoryview) -> bool:
        """Cheap check on a stored entry before it is handed out: False only for a single (non-batch)
        message whose ``TAGS`` property does not match; batches are checked message by message later.
        An unparsable entry passes (the receive path skips it and says why)."""
        if self.tags is None:
            return True
        try:
            metadata = parse_headers_and_payload(data).metadata
        except ProtocolError:
            return True
        if metadata.HasField("num_messages_in_batch"):
            return True
        tag = next((kv.value for kv in metadata.properties if kv.key == TAGS_PROPERTY), None)
        return self.matches(tag)


EVERYTHING = TagFilter()


def parse_filter(expression: Any) -> TagFilter:
    """The filter of a ``FilterExpression`` message (None or unset: every message). Raises RocketMQError
    ILLEGAL_FILTER_EXPRESSION for SQL92, an unknown type or an expression longer than 4 KiB."""
    if expression is None:
        return EVERYTHING
    kind = expression.type
    text = expression.expression
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise RocketMQError(
            Code.ILLEGAL_FILTER_EXPRESSION,
            f"filter expression is longer than {MAX_EXPRESSION_LENGTH} characters",
        )
    if kind == definition.FilterType.SQL:
        raise RocketMQError(
            Code.ILLEGAL_FILTER_EXPRESSION,
            f"SQL92 filter {text[:100]!r} is not supported by this broker; use a TAG expression ('*' or 'A||B')",
        )
    if kind not in (definition.FilterType.TAG, definition.FilterType.FILTER_TYPE_UNSPECIFIED):
        raise RocketMQError(Code.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {kind}")
    text = text.strip()
    if not text or text == "*":
        return EVERYTHING
    tags = frozenset(part.strip() for part in text.split("||") if part.strip())
    if not tags:
        return EVERYTHING
    return TagFilter(tags)
