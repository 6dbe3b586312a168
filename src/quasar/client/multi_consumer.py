"""Consumers of several topics: partitioned topics, topic lists and regex patterns (Java
``MultiTopicsConsumerImpl`` / ``PatternMultiTopicsConsumerImpl``).

One single-topic :class:`Consumer` per topic or partition, all delivering into this consumer's receiver queue;
acks, nacks and seeks go to the child the message came from. Every ``partitions_update_interval_seconds`` the
partition counts are re-read and new partitions get consumers; a pattern consumer re-lists its namespace
(GET_TOPICS_OF_NAMESPACE) every ``pattern_auto_discovery_period`` seconds and subscribes to new matches.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine
from typing import Any

from quasar.protocol import MessageId, TopicName

from ._tasks import TaskOwner
from .config import ConsumerConfig
from .consumer import Consumer
from .context import ClientContext
from .errors import AlreadyClosedError, ClientError
from .message import Message
from .receiver_queue import ReceiverQueue

__all__ = ["MultiTopicsConsumer"]

log = logging.getLogger("quasar.client")


class MultiTopicsConsumer:
    """Consumer over several topics / partitions (create it with ``AsyncClient.subscribe``).

    Attributes:
        topics: full names of the (partitioned) topics; consumers: the child consumers.
        queue: the :class:`ReceiverQueue` every child delivers into.
    """

    def __init__(
        self,
        context: ClientContext,
        topics: list[str],
        subscription: str,
        config: ConsumerConfig,
        *,
        pattern: re.Pattern[str] | None = None,
        namespace: str | None = None,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        start_inclusive: bool = False,
    ) -> None:
        self._context = context
        self._state = "connecting"
        self._tasks = TaskOwner(f"multi-topic consumer {subscription}")
        self.topics = list(topics)
        self.subscription_name = subscription
        self.config = config
        self._pattern = pattern
        self._namespace = namespace
        self._durable = durable
        self._start_message_id = start_message_id
        self._start_inclusive = start_inclusive
        self.consumers: list[Consumer] = []
        self._partitions: dict[str, int] = {}
        self.queue = ReceiverQueue(f"consumer on {self.topic}")

    @property
    def topic(self) -> str:
        """The topics, comma-separated (or the pattern)."""
        return self._pattern.pattern if self._pattern is not None else ",".join(self.topics)

    async def start(self) -> None:
        """Subscribe every topic / partition (called by ``AsyncClient.subscribe``), then watch for new
        partitions and pattern matches in an owned task.

        Raises:
            what :meth:`Consumer.start` raises (the children already subscribed are closed again).
        """
        try:
            for topic in self.topics:
                await self._add_topic(topic)
        except BaseException:
            await self._close_children()
            raise
        self._state = "ready"
        self._tasks.spawn(self._watch(), name=f"discovery {self.subscription_name}")
        if self.config.message_listener is not None:
            self.start_listener(self.config.message_listener, self)

    def start_listener(self, listener: Any, target: Any) -> None:
        """Deliver every message to ``listener(target, message)`` in an owned task instead of ``receive``."""
        self._tasks.spawn(
            self.queue.listen(listener, target), name=f"message-listener {self.subscription_name}"
        )

    def _child_config(self, partitions: int) -> ConsumerConfig:
        size = self.config.receiver_queue_size
        if partitions > 1:
            size = min(
                size, max(1, self.config.max_total_receiver_queue_size_across_partitions // partitions)
            )
        from dataclasses import replace

        return replace(self.config, receiver_queue_size=size, message_listener=None)

    async def _add_topic(self, topic: str, known: int = 0) -> None:
        partitions = await self._context.lookup.get_partitioned_metadata(topic)
        parsed = TopicName.parse(topic)
        if partitions == 0:
            names = [(topic, -1)] if known == 0 and topic not in self._partitions else []
        else:
            names = [(parsed.partition(i).full_name, i) for i in range(known, partitions)]
        config = self._child_config(partitions)
        children = [
            Consumer(
                self._context,
                name,
                self.subscription_name,
                config,
                partition=index,
                durable=self._durable,
                start_message_id=self._start_message_id,
                start_inclusive=self._start_inclusive,
                sink=self.queue,
            )
            for name, index in names
        ]
        # registered before they start: a child's first message can reach the shared queue (and the
        # application, which may acknowledge it through this list) before every child has started
        self.consumers.extend(children)
        results = await asyncio.gather(*(c.start() for c in children), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for child, result in zip(children, results, strict=True):
            if isinstance(result, BaseException):
                self.consumers.remove(child)
        self._partitions[topic] = partitions
        if topic not in self.topics:
            self.topics.append(topic)
        if errors:
            raise errors[0]

    async def _watch(self) -> None:
        config = self._context.config
        interval = config.partitions_update_interval_seconds
        if self._pattern is not None:
            interval = min(interval, self.config.pattern_auto_discovery_period)
        while self._state == "ready":
            await asyncio.sleep(interval)
            try:
                if self._pattern is not None and self._namespace is not None:
                    for topic in await self._context.lookup.get_topics_of_namespace(self._namespace):
                        if topic not in self._partitions and self._pattern.fullmatch(topic):
                            log.info("pattern consumer %s: new topic %s", self.subscription_name, topic)
                            await self._add_topic(topic)
                for topic, known in list(self._partitions.items()):
                    if known > 0:
                        count = await self._context.lookup.get_partitioned_metadata(topic)
                        if count > known:
                            log.info("%s grew to %d partitions", topic, count)
                            await self._add_topic(topic, known)
            except ClientError as exc:
                log.info("topic discovery for %s failed: %s", self.subscription_name, exc)

    # ------------------------------------------------------------------------------ delegation --

    def child_of(self, message: Message | MessageId) -> tuple[Consumer, Message | MessageId]:
        """The child consumer a message came from, and the message.

        Raises:
            ValueError: a MessageId whose partition does not name exactly one child (pass the Message).
            TypeError: neither a Message nor a MessageId.
        """
        if isinstance(message, Message):
            return message.entry.consumer, message
        if isinstance(message, MessageId):
            matches = [c for c in self.consumers if c.partition == message.partition]
            if len(matches) == 1:
                return matches[0], message
            raise ValueError("pass the Message (not only its MessageId) to a multi-topic consumer")
        raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge on the child consumer the message came from."""
        self._check_open()
        child, target = self.child_of(message)
        await child.acknowledge(target)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Cumulative ack on the message's own topic/partition (as Java's multi-topic consumer)."""
        self._check_open()
        child, target = self.child_of(message)
        await child.acknowledge_cumulative(target)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Negative ack on the child consumer the message came from."""
        self._check_open()
        child, target = self.child_of(message)
        await child.negative_acknowledge(target)

    async def reconsume_later(
        self, message: Message, delay_ms: int, properties: dict[str, str] | None = None
    ) -> None:
        """:meth:`Consumer.reconsume_later` on the child consumer the message came from (Java
        ``MultiTopicsConsumerImpl.reconsumeLater``); a ``retry_enable`` consumer is one of these, over the
        topic and its retry-letter topic.

        Raises:
            TypeError: not a Message. ClientError: not subscribed with ``retry_enable=True``; publishing or
            ack errors (the message is then redelivered). AlreadyClosedError.
        """
        self._check_open()
        if not isinstance(message, Message):
            raise TypeError(f"reconsume_later needs the received Message, got {type(message).__name__}")
        child, _ = self.child_of(message)
        await child.reconsume_later(message, delay_ms, properties)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every unacked message of every child."""
        for child in self.consumers:
            child.redeliver_unacknowledged_messages()

    async def seek(self, target: MessageId | int) -> None:
        """Seek every child to a publish time (int ms), or the child of the id's partition to a MessageId."""
        self._check_open()
        children = self.consumers
        if isinstance(target, MessageId) and target.partition >= 0:
            children = [c for c in self.consumers if c.partition == target.partition]
        await asyncio.gather(*(c.seek(target) for c in children))

    async def get_last_message_id(self) -> MessageId:
        """Highest last message id over the children."""
        ids = await asyncio.gather(*(c.get_last_message_id() for c in self.consumers))
        return max(ids)

    async def unsubscribe(self) -> None:
        """Unsubscribe every child, then close."""
        self._check_open()
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers))
        await self.close()

    async def close(self) -> None:
        """Close every child consumer."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        self.queue.close()
        await self._tasks.aclose()
        await self._close_children()
        self._state = "closed"
        self._context.forget(self)

    async def _close_children(self) -> None:
        await asyncio.gather(*(c.close() for c in self.consumers), return_exceptions=True)

    @property
    def is_connected(self) -> bool:
        """True when every child is connected."""
        return all(c.is_connected for c in self.consumers)

    # ---------------------------------------------------------------------------------- receive --

    def receive(self, timeout_millis: int | None = None) -> Coroutine[Any, Any, Message]:
        """The next message of any child (awaitable); see :meth:`ReceiverQueue.receive`."""
        return self.queue.receive(timeout_millis)

    def receive_nowait(self) -> Message | None:
        """The next message if one is queued, else None (AlreadyClosedError when closed)."""
        return self.queue.receive_nowait()

    def batch_receive(
        self, max_num_messages: int = 100, timeout_ms: int = 100
    ) -> Coroutine[Any, Any, list[Message]]:
        """Up to ``max_num_messages`` messages (awaitable); see :meth:`ReceiverQueue.batch_receive`."""
        return self.queue.batch_receive(max_num_messages, timeout_ms)

    def __aiter__(self) -> MultiTopicsConsumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.queue.receive()
        except AlreadyClosedError:
            raise StopAsyncIteration from None

    def _check_open(self) -> None:
        if self._state in ("closing", "closed"):
            raise AlreadyClosedError(f"consumer on {self.topic} is closed")
