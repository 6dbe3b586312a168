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
"""

from __future__ import annotations

import logging
from typing import Any

from quasar.protocol import TopicName

from .config import DeadLetterPolicy
from .errors import ClientError
from .message import Message

__all__ = ["DeadLetterHandler"]

log = logging.getLogger("quasar.client")

EntryKey = tuple[int, int]


class DeadLetterHandler:
    """Remembers messages at the redelivery limit and moves them to the dead-letter topic.

    Args:
        consumer: the single-topic :class:`~quasar.client.consumer.Consumer`.
        policy: the consumer's :class:`DeadLetterPolicy`.
    """

    def __init__(self, consumer: Any, policy: DeadLetterPolicy) -> None:
        self._consumer = consumer
        self.policy = policy
        base = TopicName.parse(consumer.topic).partitioned_topic_name
        self.topic = policy.dead_letter_topic or f"{base}-{consumer.subscription_name}-DLQ"
        self._possible: dict[EntryKey, list[Message]] = {}
        self._producer: Any = None

    def remember(self, messages: list[Message], redelivery_count: int) -> bool:
        """Called for each delivered entry. Returns True when the messages must not be delivered (they are
        beyond the limit and were handed to the dead-letter topic)."""
        if not messages or redelivery_count < self.policy.max_redeliver_count:
            return False
        entry = messages[0]._entry.key
        self._possible[entry] = messages
        if redelivery_count > self.policy.max_redeliver_count:
            self._consumer._tasks.spawn(self.divert([entry]), name=f"dead-letter {self.topic}")
            self._consumer._increase_permits(len(messages))
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
                if self._producer is None:
                    self._producer = await self._create_producer()
                for message in messages:
                    properties = dict(message.properties())
                    properties.setdefault("REAL_TOPIC", message.topic_name())
                    mid = message.message_id()
                    properties.setdefault(
                        "ORIGIN_MESSAGE_ID", f"{mid.ledger_id}:{mid.entry_id}:{mid.partition}"
                    )
                    await self._producer.send(
                        message.data(),
                        properties=properties,
                        partition_key=message.partition_key() or None,
                        event_timestamp=message.event_timestamp() or None,
                    )
                for message in messages:
                    await self._consumer.acknowledge(message)
                log.info("moved %d message(s) of entry %s to %s", len(messages), entry, self.topic)
            except ClientError as exc:
                log.warning("dead-letter publish to %s failed (%s); redelivering instead", self.topic, exc)
                rest.append(entry)
        return rest

    async def _create_producer(self) -> Any:
        """The dead-letter producer; with ``initial_subscription_name`` its PRODUCER command carries it."""
        context = self._consumer._context
        name = self.policy.initial_subscription_name
        if name is None:
            return await context.create_producer(self.topic)
        return await context.create_producer(self.topic, initial_subscription_name=name)

    async def close(self) -> None:
        """Close the dead-letter producer."""
        if self._producer is not None:
            await self._producer.close()
            self._producer = None
