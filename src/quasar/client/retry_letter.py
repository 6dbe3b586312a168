"""Retry-letter topic: ``ConsumerConfig.retry_enable`` and ``reconsume_later`` (Java ``enableRetry`` /
``ConsumerImpl.reconsumeLater``, ``RetryMessageUtil``, ``ConsumerBuilderImpl.subscribeAsync``; semantics.md B5).

* Subscribe (:func:`retry_policy`, :func:`retry_topics`): the consumer's dead-letter policy gets its missing
  topics filled in from the first topic, ``<topic>-<subscription>-RETRY`` and ``<topic>-<subscription>-DLQ``
  (without a policy: ``max_redeliver_count = MAX_RECONSUMETIMES = 16``), and the retry-letter topic is added
  to the subscribed topics, so the consumer is a multi-topics consumer over the topic and its retry topic.
* ``reconsume_later(message, delay_ms, properties)`` (:class:`RetryLetterHandler`): a copy of the message
  (payload, partition key, ordering key, event time) with its properties, ``REAL_TOPIC`` and
  ``ORIGIN_MESSAGE_ID`` (kept from the first hop), the custom ``properties``, ``RECONSUMETIMES`` = previous + 1
  (1 on the first hop) and ``DELAY_TIME`` = ``delay_ms`` is published to the retry-letter topic with
  ``deliver_after=delay_ms`` (when > 0), or, once ``RECONSUMETIMES > max_redeliver_count``, to the
  dead-letter topic without delay. Then the original is acknowledged. If publishing fails the original is
  redelivered and the error raised (Java: ``redeliverUnacknowledgedMessages`` and a failed future).
* The retry producer (batching off, chunking on, as Java's) and the dead-letter producer (shared with
  :class:`~quasar.client.dead_letter.DeadLetterHandler`) are created on first use by each child consumer and
  closed with it.
* The delay is delayed delivery: the broker honours it on Shared subscriptions only (B6). Java accepts any
  subscription type for a retry consumer and so does Quasar; on the other types the copy comes back at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from .config import DeadLetterPolicy, check_properties
from .dead_letter import DeadLetterHandler, LazyProducer, copy_properties, send_copy
from .errors import ClientError
from .message import Message
from .op_send import full_topic

__all__ = [
    "DELAY_TIME",
    "MAX_RECONSUMETIMES",
    "RECONSUMETIMES",
    "RetryLetterHandler",
    "letter_handlers",
    "retry_policy",
    "retry_topics",
]

log = logging.getLogger("quasar.client")

#: Java ``RetryMessageUtil`` names and defaults.
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
MAX_RECONSUMETIMES = 16
RETRY_GROUP_TOPIC_SUFFIX = "-RETRY"
DLQ_GROUP_TOPIC_SUFFIX = "-DLQ"


def retry_policy(policy: DeadLetterPolicy | None, topic: str, subscription: str) -> DeadLetterPolicy:
    """The dead-letter policy of a ``retry_enable`` consumer (Java ``ConsumerBuilderImpl.subscribeAsync``).

    Args:
        policy: the configured policy, or None.
        topic: full name of the (first) subscribed topic.
        subscription: the subscription name.

    Returns:
        ``policy`` with an empty ``retry_letter_topic`` / ``dead_letter_topic`` set to
        ``<topic>-<subscription>-RETRY`` / ``-DLQ``; without a policy, one with those topics and
        ``max_redeliver_count = MAX_RECONSUMETIMES`` (16).
    """
    retry_topic = f"{topic}-{subscription}{RETRY_GROUP_TOPIC_SUFFIX}"
    dead_topic = f"{topic}-{subscription}{DLQ_GROUP_TOPIC_SUFFIX}"
    if policy is None:
        return DeadLetterPolicy(
            max_redeliver_count=MAX_RECONSUMETIMES,
            dead_letter_topic=dead_topic,
            retry_letter_topic=retry_topic,
        )
    return replace(
        policy,
        retry_letter_topic=policy.retry_letter_topic or retry_topic,
        dead_letter_topic=policy.dead_letter_topic or dead_topic,
    )


def letter_handlers(
    config: Any,
    topic: str,
    subscription: str,
    *,
    acknowledge: Callable[[Any], Awaitable[None]],
    redeliver: Callable[..., None],
    create_producer: Callable[..., Awaitable[Any]],
    tasks: Any,
    give_back: Callable[[int], None],
) -> tuple[DeadLetterHandler | None, RetryLetterHandler | None]:
    """The dead-letter and retry-letter handlers of a consumer with ``config`` (a ConsumerConfig): (None, None)
    without a dead-letter policy and without ``retry_enable``; the retry handler only with ``retry_enable``.
    The callables are the consumer's (its acknowledge, redeliver, the client's create_producer, its task owner
    and flow control's give_back)."""
    policy = config.dead_letter_policy
    if config.retry_enable:  # filled by AsyncClient.subscribe already; this covers a direct construction
        policy = retry_policy(policy, topic, subscription)
    if policy is None:
        return None, None
    dead_letter = DeadLetterHandler(
        policy, topic=topic, subscription=subscription, acknowledge=acknowledge, create_producer=create_producer,
        tasks=tasks, give_back=give_back,
    )  # fmt: skip
    if not config.retry_enable:
        return dead_letter, None
    retry = RetryLetterHandler(
        dead_letter, acknowledge=acknowledge, redeliver=redeliver, create_producer=create_producer
    )
    return dead_letter, retry


def retry_topics(topics: list[str], policy: DeadLetterPolicy) -> list[str]:
    """``topics`` plus the policy's retry-letter topic (once), all full names (Java adds it to the topic set)."""
    if policy.retry_letter_topic is None:
        raise ValueError("the dead-letter policy of a retry_enable consumer needs a retry_letter_topic")
    retry_topic = full_topic(policy.retry_letter_topic).full_name
    return list(dict.fromkeys([*topics, retry_topic]))


def _check_arguments(message: Any, delay_ms: Any, properties: Any) -> None:
    if not isinstance(message, Message):
        raise TypeError(f"reconsume_later needs the received Message, got {type(message).__name__}")
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool):
        raise TypeError(f"delay_ms must be an int (ms), got {type(delay_ms).__name__}")
    check_properties("properties", properties)


class RetryLetterHandler:
    """``reconsume_later`` of one single-topic consumer (one per child of a multi-topics consumer, as Java).

    Args:
        dead_letter: the consumer's :class:`DeadLetterHandler` (whose policy names the retry and dead-letter
            topics and ``max_redeliver_count``; its producer takes the messages past the limit).
        acknowledge: the consumer's ``acknowledge`` (the original is acked once its copy is stored).
        redeliver: the consumer's ``Acknowledger.redeliver`` (the original comes back when the copy fails).
        create_producer: ``AsyncClient.create_producer``.
    """

    def __init__(
        self,
        dead_letter: DeadLetterHandler,
        *,
        acknowledge: Callable[[Message], Awaitable[None]],
        redeliver: Callable[[list[tuple[int, int]]], None],
        create_producer: Callable[..., Awaitable[Any]],
    ) -> None:
        policy = dead_letter.policy
        if policy.retry_letter_topic is None:
            raise ValueError("the dead-letter policy of a retry_enable consumer needs a retry_letter_topic")
        self._acknowledge = acknowledge
        self._redeliver = redeliver
        self._create = create_producer
        self._dead_letter = dead_letter
        self.topic = policy.retry_letter_topic
        self.max_reconsume_times = policy.max_redeliver_count
        self._producer = LazyProducer(self._create_producer)

    async def _create_producer(self) -> Any:
        # Java: enableBatching(false), enableChunking(true), blockIfQueueFull(false)
        return await self._create(
            self.topic, batching_enabled=False, chunking_enabled=True, block_if_queue_full=False
        )

    async def reconsume_later(
        self, message: Message, delay_ms: int, properties: Mapping[str, str] | None = None
    ) -> None:
        """Send a copy of ``message`` to the retry-letter topic (or, past the limit, the dead-letter topic),
        then acknowledge it. See the module docstring; ``delay_ms`` < 0 counts as 0 (as Java).

        Raises:
            TypeError: bad arguments. ValueError: the message's ``RECONSUMETIMES`` is not an integer.
            ClientError: publishing or acknowledging failed (the message is redelivered).
        """
        _check_arguments(message, delay_ms, properties)
        delay_ms = max(0, delay_ms)
        copy = copy_properties(message)
        if properties:
            copy.update(properties)
        previous = copy.get(RECONSUMETIMES)
        if previous is None:
            times = 1
        else:
            try:
                times = int(previous) + 1
            except ValueError:
                raise ValueError(f"{RECONSUMETIMES} property must be an integer, got {previous!r}") from None
        copy[RECONSUMETIMES] = str(times)
        copy[DELAY_TIME] = str(delay_ms)
        try:
            if times > self.max_reconsume_times:
                await self._dead_letter.publish(message, copy)
                target = self._dead_letter.topic
            else:
                await send_copy(await self._producer.get(), message, copy, delay_ms)
                target = self.topic
            await self._acknowledge(message)
        except ClientError as exc:
            log.warning("reconsume_later of %s failed (%s); redelivering it", message.message_id(), exc)
            self._redeliver([message.entry.key])
            raise
        log.debug("reconsume_later: %s -> %s (%s=%d)", message.message_id(), target, RECONSUMETIMES, times)

    async def close(self) -> None:
        """Close the retry-letter producer (the dead-letter one is closed by its handler)."""
        await self._producer.close()
