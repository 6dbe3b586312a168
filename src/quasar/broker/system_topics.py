"""System topics: the broker's own bookkeeping topics, kept out of what users see and touch.

Pulsar hides its system topics (``SystemTopicNames.isSystemTopic``: ``__change_events``,
``__transaction_buffer_snapshot``, ``*__transaction_pending_ack``, ...) from the topic listings meant for users
(``GET /admin/v2/persistent/{tenant}/{ns}`` without ``includeSystemTopic=true``, the namespace's topic list and
``CommandGetTopicsOfNamespace``, which pattern subscriptions read: ``TopicList.filterSystemTopic``) and deletes
them with their namespace. RocketMQ keeps its ``RMQ_SYS_*`` topics internal likewise. Quasar's RocketMQ
transactions (``broker/rocketmq/transaction_store.py``) keep, per namespace, the half topic
``RMQ_SYS_TRANS_HALF_TOPIC`` with its op subscription ``RMQ_SYS_TRANS_OP_HALF`` and the given-up halves'
``TRANS_CHECK_MAX_TIME_TOPIC``; ``%DLQ%<group>`` / ``%RETRY%<group>`` topics are user topics (users read them).

- :func:`is_system_topic` / :func:`user_topics`: the names above, a partition of one included.
- :func:`check_subscription_allowed`: a Pulsar client may not subscribe to ``RMQ_SYS_TRANS_OP_HALF`` (acking
  there would resolve half messages); NotAllowedError (the client's ``NotAllowedException``).
- :func:`delete_system_topics`: what namespace deletion calls once no user topic is left: the namespace's
  system topics are deleted with it, unless the half topic still holds unresolved half messages: then
  :class:`PendingHalfMessagesError` naming how many, and nothing is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from quasar.broker.errors import BrokerError, NotAllowedError, TopicNotFoundError
from quasar.protocol import TopicName

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = [
    "RMQ_TRANS_CHECK_MAX_TIME_TOPIC",
    "RMQ_TRANS_HALF_TOPIC",
    "RMQ_TRANS_OP_HALF",
    "PendingHalfMessagesError",
    "check_subscription_allowed",
    "delete_system_topics",
    "is_system_topic",
    "user_topics",
]

RMQ_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""RocketMQ's half-message topic (one per namespace)."""
RMQ_TRANS_OP_HALF = "RMQ_SYS_TRANS_OP_HALF"
"""The op subscription on the half topic: a half acknowledged there is resolved."""
RMQ_TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
"""Where half messages go when their checks are exhausted."""

PULSAR_SYSTEM_TOPICS = frozenset({"__change_events", "__transaction_buffer_snapshot", "__transaction_log_"})
PENDING_ACK_SUFFIX = "__transaction_pending_ack"
RMQ_SYSTEM_PREFIX = "RMQ_SYS_"


class PendingHalfMessagesError(BrokerError):
    """The namespace's RocketMQ half topic still holds unresolved transactional messages (the admin API
    answers 409, as for a namespace with topics)."""


def _local(name: str | TopicName) -> str:
    topic = name if isinstance(name, TopicName) else TopicName.parse(name)
    return (
        TopicName.parse(topic.partitioned_topic_name).local_name if topic.is_partition else topic.local_name
    )


def is_system_topic(name: str | TopicName) -> bool:
    """``name`` (a full topic name, or its partition) is a system topic (module docstring). False for a name
    that does not parse."""
    try:
        local = _local(name)
    except ValueError:
        return False
    return (
        local in PULSAR_SYSTEM_TOPICS
        or local.endswith(PENDING_ACK_SUFFIX)
        or local.startswith(RMQ_SYSTEM_PREFIX)
        or local == RMQ_TRANS_CHECK_MAX_TIME_TOPIC
    )


def user_topics(names: Iterable[str]) -> list[str]:
    """``names`` without the system topics, order kept."""
    return [name for name in names if not is_system_topic(name)]


def check_subscription_allowed(topic: TopicName, subscription: str) -> None:
    """Raise NotAllowedError for a Pulsar client subscribing to the RocketMQ op subscription of a half
    topic (its acknowledgements would resolve half messages behind the transaction's back)."""
    if subscription == RMQ_TRANS_OP_HALF and _local(topic) == RMQ_TRANS_HALF_TOPIC:
        raise NotAllowedError(
            f"subscription {RMQ_TRANS_OP_HALF} of {topic.full_name} is reserved for RocketMQ transactions"
        )


async def pending_half_messages(service: BrokerService, namespace: str) -> int:
    """Half messages of ``namespace`` not yet resolved (the op subscription's backlog; 0 without the topic)."""
    name = TopicName.parse(f"persistent://{namespace}/{RMQ_TRANS_HALF_TOPIC}")
    try:
        topic = await service.get_or_create_topic(name, create=False)
    except TopicNotFoundError:
        return 0
    subscription = getattr(topic, "subscriptions", {}).get(RMQ_TRANS_OP_HALF)
    if subscription is None:
        return 0
    return int(subscription.cursor.number_of_entries_in_backlog)


async def delete_system_topics(service: BrokerService, namespace: str, topics: Iterable[str]) -> None:
    """Delete the system topics ``topics`` of ``namespace`` (forcefully: their clients are the broker's
    own). Raises PendingHalfMessagesError, deleting nothing, while half messages are unresolved."""
    names = [name for name in topics if is_system_topic(name)]
    if any(_local(name) == RMQ_TRANS_HALF_TOPIC for name in names):
        pending = await pending_half_messages(service, namespace)
        if pending:
            raise PendingHalfMessagesError(
                f"Cannot delete namespace {namespace}: {pending} RocketMQ transactional half message(s) are"
                f" not committed or rolled back yet ({RMQ_TRANS_HALF_TOPIC}); end or let the checks resolve"
                " them first"
            )
    for name in names:
        try:
            await service.delete_topic(TopicName.parse(name), force=True)
        except TopicNotFoundError:
            continue
