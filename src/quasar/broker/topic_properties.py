"""Topic properties (Pulsar ``PersistentTopics.updateProperties`` / ``getProperties`` /
``removeProperties``, PIP-180) and the one Quasar gives a meaning: ``message.type``, RocketMQ's topic
attribute (``TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE``, reference rocketmq-grpc.md §8).

Properties are a ``{str: str}`` map kept as the topic policy :data:`TOPIC_PROPERTIES` in the metadata store
(``BrokerService.set_topic_policy``: a partition inherits its partitioned topic's map). ``message.type`` is
one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED (:data:`MESSAGE_TYPES`); the RocketMQ endpoint accepts only
messages of that type on the topic (MIXED: all), answering MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (40014)
otherwise, and lists the accepted types in QueryRoute. **Unset** (every topic a Pulsar client or an older
Quasar created) means "no restriction": RocketMQ clients may send all four types there, as they could before
topic types existed — RocketMQ's own default is NORMAL, which a topic gets by setting it explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_PROPERTIES",
    "MESSAGE_TYPE",
    "MESSAGE_TYPES",
    "MIXED",
    "TOPIC_PROPERTIES",
    "merge_properties",
    "parse_properties",
]

TOPIC_PROPERTIES = "properties"
"""The topic policy key holding the properties map."""
MESSAGE_TYPE = "message.type"
"""The property naming the RocketMQ message type a topic accepts."""
MIXED = "MIXED"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", MIXED)
"""Values of ``message.type`` (RocketMQ ``TopicMessageType``; UNSPECIFIED is not settable)."""
MAX_PROPERTIES = 64
"""Properties a topic may hold at most."""
_MAX_TEXT = 1024
"""Longest property name or value (characters)."""


def parse_properties(body: Any) -> dict[str, str]:
    """A properties map from a request body (a JSON object of strings). ``message.type`` is normalised to
    upper case and must be one of :data:`MESSAGE_TYPES`. Raises ValueError naming the bad entry: not an
    object, a non-string or empty name, a non-string value, a name or value past 1024 characters, more than
    :data:`MAX_PROPERTIES` entries, an unknown message type."""
    if not isinstance(body, Mapping):
        raise ValueError("topic properties must be a JSON object of string values")
    if len(body) > MAX_PROPERTIES:
        raise ValueError(f"at most {MAX_PROPERTIES} topic properties, got {len(body)}")
    out: dict[str, str] = {}
    for name, value in body.items():
        if not isinstance(name, str) or not name.strip() or len(name) > _MAX_TEXT:
            raise ValueError(f"bad topic property name {name!r:.60}")
        if not isinstance(value, str) or len(value) > _MAX_TEXT:
            raise ValueError(
                f"topic property {name!r:.60} must be a string of at most {_MAX_TEXT} characters"
            )
        if name == MESSAGE_TYPE:
            value = value.strip().upper()
            if value not in MESSAGE_TYPES:
                raise ValueError(f"message.type must be one of {', '.join(MESSAGE_TYPES)}, got {value!r:.40}")
        out[name] = value
    return out


def merge_properties(current: Any, update: Mapping[str, str]) -> dict[str, str]:
    """``current`` (the stored map; anything else counts as empty) updated with ``update``. Raises ValueError
    when the result has more than :data:`MAX_PROPERTIES` entries."""
    merged = dict(current) if isinstance(current, Mapping) else {}
    merged.update(update)
    if len(merged) > MAX_PROPERTIES:
        raise ValueError(f"at most {MAX_PROPERTIES} topic properties, got {len(merged)}")
    return merged
