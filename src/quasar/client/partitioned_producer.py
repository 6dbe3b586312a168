"""Producer of a partitioned topic: one :class:`Producer` per partition, a :class:`MessageRouter` in front.

Java ``PartitionedProducerImpl`` / C++ ``PartitionedProducerImpl``: PARTITIONED_METADATA gives N, partition
``i`` is the topic ``<topic>-partition-<i>``, every message is routed (see :mod:`quasar.client.routing`) and
handed to that partition's producer. The partition count is re-read every
``partitions_update_interval_seconds``; new partitions get producers (partitions never shrink in Pulsar).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from quasar.protocol import MessageId, TopicName

from ._tasks import TaskOwner
from .config import ProducerConfig
from .context import ClientContext
from .errors import AlreadyClosedError, ClientError
from .message import OutgoingMessage, make_outgoing
from .op_send import Future
from .producer import Producer
from .routing import MessageRouter

__all__ = ["PartitionedProducer"]

log = logging.getLogger("quasar.client")


class PartitionedProducer:
    """Producer of a partitioned topic (create it with ``AsyncClient.create_producer``).

    Attributes:
        topic: the partitioned topic's full name. producers: the per-partition producers, by index.
    """

    def __init__(
        self, context: ClientContext, topic: TopicName, config: ProducerConfig, num_partitions: int
    ) -> None:
        self._context = context
        self._topic = topic
        self.topic = topic.full_name
        self.config = config
        self.router = MessageRouter(config)
        self.producers: list[Producer] = []
        self._num_partitions = num_partitions
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._tasks = TaskOwner(f"partitioned producer {self.topic}")

    async def start(self) -> None:
        """Create and connect one producer per partition (called by ``AsyncClient.create_producer``), then
        watch the partition count in an owned task.

        Raises:
            what :meth:`Producer.start` raises (the producers already created are closed again).
        """
        await self._add_partitions(self._num_partitions)
        self._tasks.spawn(self._watch_partitions(), name=f"partitions {self.topic}")

    async def _add_partitions(self, count: int) -> None:
        new = [
            Producer(self._context, self._topic.partition(i).full_name, self.config, partition=i)
            for i in range(len(self.producers), count)
        ]
        results = await asyncio.gather(*(p.start() for p in new), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in new), return_exceptions=True)
            raise errors[0]
        self.producers.extend(new)
        self._num_partitions = len(self.producers)

    async def _watch_partitions(self) -> None:
        interval = self._context.config.partitions_update_interval_seconds
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                count = await self._context.lookup.get_partitioned_metadata(self.topic)
                if count > len(self.producers):
                    log.info("%s grew to %d partitions", self.topic, count)
                    await self._add_partitions(count)
            except ClientError as exc:
                log.info("partition update of %s failed: %s", self.topic, exc)

    @property
    def producer_name(self) -> str:
        """Name of the first partition's producer."""
        return self.producers[0].producer_name if self.producers else ""

    @property
    def last_sequence_id(self) -> int:
        """Highest sequence id acknowledged on any partition (-1 if none)."""
        return max((p.last_sequence_id for p in self.producers), default=-1)

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Route and publish one message, wait for its receipt (arguments as :meth:`Producer.send`)."""
        return await (await self.send_async(content, **kwargs))

    async def send_async(self, content: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Route and queue one message; waits only for room in that partition's pending queue."""
        if self._closed:
            raise AlreadyClosedError(f"producer on {self.topic} is closed")
        future: asyncio.Future[MessageId] = Future(loop=self._loop)
        producers = self.producers
        if kwargs or content.__class__ is not bytes:
            message = make_outgoing(content, **kwargs)
            size = len(message.payload)
            producer = producers[self.router.choose(message, message.partition_key, len(producers), size)]
            await producer.admit()
            producer.send_admitted(message, future)
            return future
        producer = producers[self.router.choose(content, None, len(producers), len(content))]
        if not producer.try_admit():
            await producer.admit()
        producer.send_admitted_payload(content, future)
        return future

    def send_nowait(self, content: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Route and queue one message without waiting (ProducerQueueIsFullError when full)."""
        return self.send_message_nowait(make_outgoing(content, **kwargs))

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Route and queue an already validated :class:`OutgoingMessage` without waiting."""
        if self._closed:
            raise AlreadyClosedError(f"producer on {self.topic} is closed")
        index = self.router.choose(message, message.partition_key, len(self.producers), len(message.payload))
        return self.producers[index].send_message_nowait(message)

    async def flush(self) -> None:
        """Flush every partition's producer."""
        await asyncio.gather(*(p.flush() for p in self.producers))

    async def close(self) -> None:
        """Close every partition's producer."""
        if self._closed:
            return
        self._closed = True
        await self._tasks.aclose()
        await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)
        self._context.forget(self)
