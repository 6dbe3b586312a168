"""Topic message types on the RocketMQ endpoint (reference rocketmq-grpc.md §8; proxy
``DefaultTopicMessageTypeValidator``, common ``TopicMessageType``).

A topic's type is its ``message.type`` property (``quasar.broker.topic_properties``, settable over admin
REST). A message's type is TRANSACTION when the client sends it as one, FIFO with a message group, DELAY with
a delivery timestamp, else NORMAL (``mapping.map_message``). A send whose type differs from the topic's is
refused with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (40014) unless the topic is MIXED; QueryRoute lists the
accepted types (MIXED: all four). A topic without the property accepts all four (the documented Quasar
default, so topics made by Pulsar clients keep taking every RocketMQ send, transactions included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.broker.topic_properties import MESSAGE_TYPE, MIXED, TOPIC_PROPERTIES

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.protocol import TopicName

__all__ = ["ALL_TYPES", "accepted_types", "check_message_type", "topic_message_type"]

ALL_TYPES = (
    definition.MessageType.NORMAL,
    definition.MessageType.FIFO,
    definition.MessageType.DELAY,
    definition.MessageType.TRANSACTION,
)
"""What a MIXED topic (or one without a type) accepts, in QueryRoute's order."""


def topic_message_type(service: BrokerService, topic: TopicName) -> str | None:
    """The topic's ``message.type`` (NORMAL, FIFO, DELAY, TRANSACTION, MIXED), None when unset. A partition
    has its partitioned topic's."""
    properties = service.topic_policy(topic, TOPIC_PROPERTIES)
    if not isinstance(properties, dict):
        return None
    value = properties.get(MESSAGE_TYPE)
    return value if isinstance(value, str) and value else None


def accepted_types(topic_type: str | None) -> tuple[int, ...]:
    """``MessageType`` values a topic of ``topic_type`` accepts (None or MIXED: all four)."""
    if topic_type is None or topic_type == MIXED or not hasattr(definition.MessageType, topic_type):
        return ALL_TYPES
    return (getattr(definition.MessageType, topic_type),)


def check_message_type(service: BrokerService, topic: TopicName, message_type: int) -> None:
    """Refuse a message of ``message_type`` (a ``MessageType`` value) that ``topic`` does not accept: raises
    RocketMQError MESSAGE_PROPERTY_CONFLICT_WITH_TYPE naming both types."""
    topic_type = topic_message_type(service, topic)
    if message_type in accepted_types(topic_type):
        return
    name = definition.MessageType.Name(message_type)
    raise RocketMQError(
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        f"current message type {name} does not match the accepted type {topic_type} of topic"
        f" {topic.local_name}",
    )
