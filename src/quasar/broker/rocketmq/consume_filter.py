"""Tag filters of RocketMQ consumer groups on the receive and pull paths (reference rocketmq-grpc.md §7): the
``FilterExpression`` of a request parsed with :mod:`~quasar.broker.rocketmq.filter_expression` (one grammar
for both paths), and the cheap check a popped entry gets before it is handed out.

On the receive path, messages that do not match are acknowledged for the group (the proxy auto-acks them), so
they never come back; pull by offset skips them by the consume queue's tag hash.
"""

from __future__ import annotations

from typing import Any

from quasar.broker.rocketmq.filter_expression import (
    MATCH_ALL,
    PROPERTY_TAGS,
    IllegalFilterExpressionError,
    TagFilter,
    parse_filter_expression,
)
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.protocol import parse_headers_and_payload
from quasar.protocol.errors import ProtocolError

__all__ = ["TagFilter", "entry_may_match", "parse_filter"]


def parse_filter(expression: Any) -> TagFilter:
    """The filter of a request's ``FilterExpression`` message (None: every message). Raises RocketMQError
    ILLEGAL_FILTER_EXPRESSION for SQL92, an unknown type, an over-long expression or one naming no tag
    (``filter_expression.parse_filter_expression``)."""
    if expression is None:
        return MATCH_ALL
    try:
        return parse_filter_expression(expression.expression, expression.type)
    except IllegalFilterExpressionError as exc:
        raise RocketMQError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None


def entry_may_match(tag_filter: TagFilter, data: memoryview) -> bool:
    """Cheap check on a stored entry (``[u32 metadataSize][MessageMetadata][payload]``) before it is handed
    out: False only for a single (non-batch) message whose ``TAGS`` property does not match; batches are
    checked message by message later. An unparsable entry passes (the receive path skips it and says why)."""
    if tag_filter.matches_all:
        return True
    try:
        metadata = parse_headers_and_payload(data).metadata
    except ProtocolError:
        return True
    if metadata.HasField("num_messages_in_batch"):
        return True
    tag = next((kv.value for kv in metadata.properties if kv.key == PROPERTY_TAGS), None)
    return tag_filter.matches_tag(tag)
