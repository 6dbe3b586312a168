"""QueryRoute and QueryAssignment (reference rocketmq-grpc.md §9; proxy ``RouteActivity``).

Queues are the topic's partitions (queue id = partition index; a non-partitioned topic is one queue, id 0),
all READ_WRITE, on one broker: ``Broker{name = the broker group (RocketMQSettings.broker_name), id 0 (the
master), endpoints = this listener}``. A topic accepts NORMAL, FIFO and DELAY messages (TRANSACTION is not
served yet; the py client refuses such a send locally when it validates the message type, as it does by
default). QueryAssignment answers as the proxy: one assignment with queue id -1 ("any queue of this broker")
for a normal group, one per queue for a FIFO group (``RocketMQContext.is_fifo_group``).
"""

from __future__ import annotations

from typing import Any

from quasar.broker.rocketmq.context import RocketMQContext, call_metadata
from quasar.broker.rocketmq.stubs import definition, service
from quasar.broker.rocketmq.validation import check_consumer_group

__all__ = ["ACCEPTED_MESSAGE_TYPES", "RouteActivity"]

ACCEPTED_MESSAGE_TYPES = (
    definition.MessageType.NORMAL,
    definition.MessageType.FIFO,
    definition.MessageType.DELAY,
)


class RouteActivity:
    """QueryRoute, QueryAssignment."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context

    def _queue(self, topic: Any, queue_id: int, broker: Any) -> Any:
        return definition.MessageQueue(
            topic=topic,
            id=queue_id,
            permission=definition.Permission.READ_WRITE,
            broker=broker,
            accept_message_types=ACCEPTED_MESSAGE_TYPES,
        )

    def _broker(self, requested_endpoints: Any) -> Any:
        context = self.context
        return definition.Broker(
            name=context.settings.broker_name, id=0, endpoints=context.endpoints(requested_endpoints)
        )

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        """The topic's queues. ILLEGAL_TOPIC for a bad name, TOPIC_NOT_FOUND when its namespace does not
        exist."""
        metadata = call_metadata(context)
        topic = self.context.topic_name(request.topic, metadata)
        queues = self.context.queue_count(topic)
        broker = self._broker(request.endpoints)
        return service.QueryRouteResponse(
            message_queues=[self._queue(request.topic, i, broker) for i in range(queues)]
        )

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """The queues a push consumer of ``group`` polls (module docstring). ILLEGAL_CONSUMER_GROUP,
        ILLEGAL_TOPIC, TOPIC_NOT_FOUND as their checks."""
        metadata = call_metadata(context)
        check_consumer_group(request.group.name)
        topic = self.context.topic_name(request.topic, metadata)
        queues = self.context.queue_count(topic)
        broker = self._broker(request.endpoints)
        ids = list(range(queues)) if self.context.is_fifo_group(topic, request.group.name) else [-1]
        return service.QueryAssignmentResponse(
            assignments=[
                definition.Assignment(message_queue=self._queue(request.topic, i, broker)) for i in ids
            ]
        )
