"""QueryRoute and QueryAssignment (reference rocketmq-grpc.md §9; proxy ``RouteActivity``).

Queues are the topic's partitions (queue id = partition index; a non-partitioned topic is one queue, id 0),
all READ_WRITE, each on ``Broker{name = its broker group, id 0 (the master), endpoints = that master's
RocketMQ endpoint}`` (``RocketMQContext.queue_brokers``: standalone, this broker for all). The queues'
``accept_message_types`` follow the topic's ``message.type`` (``message_type.py``: one type, or all four for
MIXED and for a topic without one); the py client refuses locally a send of another type when it validates
the message type, as it does by default. QueryAssignment answers as the proxy: one
assignment with queue id -1 ("any queue of this broker") per broker group for a normal group, one per queue
for a FIFO group (``RocketMQContext.consumer_groups``); FORBIDDEN "no readable queue" when no queue can be
reached.
"""

from __future__ import annotations

from typing import Any

from quasar.broker.auth import PermissionDeniedError
from quasar.broker.rocketmq.context import RocketMQContext, call_metadata, is_tls_call
from quasar.broker.rocketmq.message_type import ALL_TYPES, accepted_types, topic_message_type
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition, service
from quasar.broker.rocketmq.validation import check_consumer_group
from quasar.protocol import TopicName

__all__ = ["ACCEPTED_MESSAGE_TYPES", "RouteActivity"]

ACCEPTED_MESSAGE_TYPES = ALL_TYPES
"""What a topic without a ``message.type`` accepts (``message_type.py``)."""


class RouteActivity:
    """QueryRoute, QueryAssignment."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context

    def _queue(
        self, topic: Any, queue_id: int, broker: Any, accepted: tuple[int, ...] = ACCEPTED_MESSAGE_TYPES
    ) -> Any:
        return definition.MessageQueue(
            topic=topic,
            id=queue_id,
            permission=definition.Permission.READ_WRITE,
            broker=broker,
            accept_message_types=accepted,
        )

    def _check_lookup(self, topic: TopicName, context: Any) -> None:
        """FORBIDDEN for a role that may neither produce nor consume on the topic (Pulsar's lookup check)."""
        try:
            self.context.service.security.check_lookup(self.context.role(context), topic)
        except PermissionDeniedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        """The topic's queues. ILLEGAL_TOPIC for a bad name, TOPIC_NOT_FOUND when its namespace does not
        exist, FORBIDDEN without lookup permission."""
        metadata = call_metadata(context)
        topic = self.context.topic_name(request.topic, metadata)
        self._check_lookup(topic, context)
        queues = self.context.queue_count(topic)
        brokers = await self.context.queue_brokers(topic, queues, request.endpoints, tls=is_tls_call(context))
        accepted = accepted_types(topic_message_type(self.context.service, topic))
        return service.QueryRouteResponse(
            message_queues=[self._queue(request.topic, i, broker, accepted) for i, broker in brokers]
        )

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """The queues a push consumer of ``group`` polls (module docstring). ILLEGAL_CONSUMER_GROUP,
        ILLEGAL_TOPIC, TOPIC_NOT_FOUND as their checks, FORBIDDEN without a reachable queue."""
        metadata = call_metadata(context)
        check_consumer_group(request.group.name)
        topic = self.context.topic_name(request.topic, metadata)
        self._check_lookup(topic, context)
        queues = self.context.queue_count(topic)
        brokers = await self.context.queue_brokers(topic, queues, request.endpoints, tls=is_tls_call(context))
        if not brokers:
            raise RocketMQError(Code.FORBIDDEN, f"no readable queue of topic {request.topic.name}")
        if self.context.consumer_groups.is_fifo_group(topic, request.group.name):
            chosen = brokers
        else:  # one "any queue" assignment per broker group
            chosen = list({broker.name: (-1, broker) for _, broker in brokers}.values())
        assignments = [
            definition.Assignment(message_queue=self._queue(request.topic, i, b)) for i, b in chosen
        ]
        return service.QueryAssignmentResponse(assignments=assignments)
