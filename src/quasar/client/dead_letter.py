"""Dead-letter policy of a consumer (Java ``ConsumerImpl`` DLQ path, C++ ``ConsumerImpl::processPossibleToDLQ``;
semantics.md B5 "Dead letter queue").

* A message whose broker ``redelivery_count >= max_redeliver_count`` is still delivered but remembered; when it
  is negatively acked (or its ack times out) it is published to the dead-letter topic and acked instead of
  being redelivered.
* A message with ``redelivery_count > max_redeliver_count`` goes to the dead-letter topic without delivery.
* The dead-letter topic defaults to ``<topic>-<subscription>-DLQ`` (``<topic>`` = the partitioned topic's name
  for a partition); the copy keeps payload, key, event time and properties and adds ``REAL_TOPIC`` and
  ``ORIGIN_MESSAGE_ID`` (Java ``RetryMessageUtil``).
* ``initial_subscription_name`` (Java ``DeadLetterPolicy.initialSubscriptionName``, C++
  ``DeadLetterPolicy::initialSubscriptionName``): the dead-letter producer is created with
  ``CommandProducer.initial_subscription_name``, so the broker creates that durable subscription on the
  dead-letter topic (at Earliest) before the first message is moved: nothing dead-lettered before a consumer
  of the dead-letter topic subscribes is lost.
* The dead-letter producer is created on first use (once, under concurrent first uses) and closed with the
  consumer; :mod:`quasar.client.retry_letter` (``reconsume_later``) reuses it, its message copy and its lazy
  producer for the retry-letter topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quasar.protocol import TopicName

from ._tasks import TaskOwner
from .config import DeadLetterPolicy
from .errors import AlreadyClosedError, ClientError
from .message import Message

__all__ = ["DeadLetterHandler", "LazyProducer", "copy_properties", "send_copy"]

log = logging.getLogger("quasar.client")

EntryKey = tuple[int, int]

#: Java ``RetryMessageUtil.SYSTEM_PROPERTY_REAL_TOPIC`` / ``PROPERTY_ORIGIN_MESSAGE_ID``
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


def copy_properties(message: Message) -> dict[str, str]:
    """The properties of a dead-letter / retry-letter copy of ``message`` (Java ``ConsumerImpl.getPropertiesMap``):
    its own properties plus ``REAL_TOPIC`` (the topic it came from) and ``ORIGIN_MESSAGE_ID``
    (``"ledger:entry:partition"``), both kept when already present, so they name the first hop."""
    properties = message.properties()
    properties.setdefault(REAL_TOPIC, message.topic_name())
    mid = message.message_id()
    properties.setdefault(ORIGIN_MESSAGE_ID, f"{mid.ledger_id}:{mid.entry_id}:{mid.partition}")
    return properties


async def send_copy(
    producer: Any, message: Message, properties: dict[str, str], deliver_after_ms: int | None = None
) -> Any:
    """Publish a copy of ``message`` (payload, partition key, ordering key, event time) with ``properties``
    through ``producer``; ``deliver_after_ms`` > 0 sets the delayed-delivery time. Returns the MessageId.

    Raises:
        ClientError: the send failed (SendTimeoutError, BrokerResponseError, ...).
    """
    kwargs: dict[str, Any] = {}
    if deliver_after_ms:
        kwargs["deliver_after"] = deliver_after_ms
    return await producer.send(
        message.data(),
        properties=properties,
        partition_key=message.partition_key() or None,
        ordering_key=message.ordering_key() or None,
        event_timestamp=message.event_timestamp() or None,
        **kwargs,
    )


class LazyProducer:
    """A producer created on first :meth:`get` (once, even when several tasks ask at the same time).

    Args:
        create: coroutine function returning the producer (``AsyncClient.create_producer(...)``).
    """

    def __init__(self, create: Callable[[], Awaitable[Any]]) -> None:
        self._create = create
        self._producer: Any = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self) -> Any:
        """The producer, created now if needed.

        Raises:
            ClientError: creating it failed (the next call tries again). AlreadyClosedError: after
            :meth:`close`.
        """
        if self._producer is None:
            async with self._lock:
                if self._closed:
                    raise AlreadyClosedError("the consumer owning this producer is closed")
                if self._producer is None:
                    self._producer = await self._create()
        return self._producer

    async def close(self) -> None:
        """Close the producer if it was created; later :meth:`get` calls raise AlreadyClosedError."""
        async with self._lock:
            self._closed = True
            producer, self._producer = self._producer, None
        if producer is not None:
            await producer.close()


class DeadLetterHandler:
    """Remembers messages at the redelivery limit and moves them to the dead-letter topic.

    Args:
        policy: the consumer's :class:`DeadLetterPolicy`.
        topic / subscription: the consumer's topic (partition) and subscription (the default DLQ name).
        acknowledge: the consumer's ``acknowledge`` (a moved message is acked).
        create_producer: ``AsyncClient.create_producer``.
        tasks: the consumer's task owner (moves of messages beyond the limit run there).
        give_back: the consumer's ``FlowControl.give_back`` (a message moved without delivery frees a permit).
    """

    def __init__(
        self,
        policy: DeadLetterPolicy,
        *,
        topic: str,
        subscription: str,
        acknowledge: Callable[[Message], Awaitable[None]],
        create_producer: Callable[..., Awaitable[Any]],
        tasks: TaskOwner,
        give_back: Callable[[int], None],
    ) -> None:
        self.policy = policy
        base = TopicName.parse(topic).partitioned_topic_name
        self.topic = policy.dead_letter_topic or f"{base}-{subscription}-DLQ"
        self._acknowledge = acknowledge
        self._create = create_producer
        self._tasks = tasks
        self._give_back = give_back
        self._possible: dict[EntryKey, list[Message]] = {}
        self._producer = LazyProducer(self._create_producer)

    def remember(self, messages: list[Message], redelivery_count: int) -> bool:
        """Called for each delivered entry. Returns True when the messages must not be delivered (they are
        beyond the limit and were handed to the dead-letter topic)."""
        if not messages or redelivery_count < self.policy.max_redeliver_count:
            return False
        entry = messages[0].entry.key
        self._possible[entry] = messages
        if redelivery_count > self.policy.max_redeliver_count:
            self._tasks.spawn(self.divert([entry]), name=f"dead-letter {self.topic}")
            self._give_back(len(messages))
            return True
        return False

    async def divert(self, entries: list[EntryKey]) -> list[EntryKey]:
        """Publish the remembered messages of ``entries`` to the dead-letter topic and ack them.

        Returns:
            The entries that were not remembered (to be redelivered normally) or failed to publish.
        """
        rest: list[EntryKey] = []
        for entry in entries:
            messages = self._possible.pop(entry, None)
            if not messages:
                rest.append(entry)
                continue
            try:
                for message in messages:
                    await self.publish(message, copy_properties(message))
                for message in messages:
                    await self._acknowledge(message)
                log.info("moved %d message(s) of entry %s to %s", len(messages), entry, self.topic)
            except ClientError as exc:
                log.warning("dead-letter publish to %s failed (%s); redelivering instead", self.topic, exc)
                rest.append(entry)
        return rest

    async def publish(self, message: Message, properties: dict[str, str]) -> Any:
        """Publish a copy of ``message`` with ``properties`` to the dead-letter topic (no ack); the
        producer is created on first use. Returns the MessageId.

        Raises:
            ClientError: creating the producer or sending failed.
        """
        return await send_copy(await self._producer.get(), message, properties)

    async def _create_producer(self) -> Any:
        """The dead-letter producer; with ``initial_subscription_name`` its PRODUCER command carries it."""
        name = self.policy.initial_subscription_name
        if name is None:
            return await self._create(self.topic)
        return await self._create(self.topic, initial_subscription_name=name)

    async def close(self) -> None:
        """Close the dead-letter producer."""
        await self._producer.close()
