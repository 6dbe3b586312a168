"""SendMessage (reference rocketmq-grpc.md §5, §8; proxy ``SendMessageActivity``): validate and map each
message (``mapping.map_message``), pick its queue, and publish it through the broker's normal producer path.

Publishing: every (client, topic partition) pair gets a broker ``Producer`` (``quasar.broker.producer``) made
the first time the client sends there — the same object a Pulsar client's PRODUCER creates, so a RocketMQ send
goes through the same checks (write refusals of a full disk or a masterless group, terminated topics, the
backlog quota, ``max_producers_per_topic``), deduplication, counters (topic stats list the producer, named
``rocketmq-<client id>``), and store path as a Pulsar SEND. Its "connection" is a :class:`_ProducerLink`
turning receipts into futures. The producer belongs to the client's registry record and is closed with it
(NotifyClientTermination, end of the Telemetry stream, idle expiry); sequence ids continue from the topic's
last persisted one for that name, as a reconnecting Pulsar producer does.

Queue choice (the request names none) among the queues this broker writes (``RocketMQContext.local_queues``:
all of them standalone, its group's in a cluster): a message group picks ``consistentHash(group.hashCode(),
queues)`` (Guava, as the proxy), so a group's messages stay on one queue in order; other messages go round
robin. A
message whose type the topic does not accept (``message_type.py``) is MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; a
TRANSACTION message is stored as a half message instead (``transaction.py``; its offset is the half queue's).
The answer's ``offset`` is the entry's consume-queue offset, ``message_id`` and ``transaction_id`` the client's
id. Several messages in one request (the py client never does it) are published one after the other; their
entries' codes give the top-level status (MULTIPLE_RESULTS when they differ). All must name one topic
(MESSAGE_CORRUPTED otherwise, or when there are none).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from quasar.broker.auth import PermissionDeniedError
from quasar.broker.producer import Producer
from quasar.broker.rocketmq.clients import ClientRecord
from quasar.broker.rocketmq.context import CallMetadata, RocketMQContext, call_metadata
from quasar.broker.rocketmq.mapping import MappedMessage, consistent_hash, java_string_hash, map_message
from quasar.broker.rocketmq.message_type import check_message_type
from quasar.broker.rocketmq.status import Code, RocketMQError, code_of, new_status, ok_status
from quasar.broker.rocketmq.stubs import definition, service
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import ServerError

__all__ = ["SendActivity"]

log = logging.getLogger(__name__)

_OK = ok_status()
"""The OK status every successful entry and response copies."""

_SEND_ERRORS = {
    ServerError.TopicTerminatedError: Code.FORBIDDEN,
    ServerError.NotAllowedError: Code.FORBIDDEN,
    ServerError.ServiceNotReady: Code.TOO_MANY_REQUESTS,
    ServerError.TooManyRequests: Code.TOO_MANY_REQUESTS,
    ServerError.PersistenceError: Code.INTERNAL_SERVER_ERROR,
}


class _ProducerLink:
    """The ``ProducerConnection`` of one RocketMQ producer: receipts resolve the futures of :meth:`publish`."""

    non_persistent_pending = 0
    max_non_persistent_pending = 1000

    def __init__(self, registry_key: str, record: ClientRecord) -> None:
        self._key = registry_key
        self._record = record
        self._waiting: dict[int, asyncio.Future[Position]] = {}
        self.producer: Producer | None = None
        self.topic: Any = None
        """The topic of :attr:`producer` (kept after the producer is closed, for the answer's offset)."""
        self.next_sequence_id = 0

    def publish(self, mapped: MappedMessage) -> asyncio.Future[Position]:
        """Publish ``mapped`` through the producer; the future gets the entry's position or a RocketMQError."""
        producer = self.producer
        assert producer is not None
        sequence_id = self.next_sequence_id
        self.next_sequence_id += 1
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._waiting[sequence_id] = future
        data = memoryview(mapped.entry(producer.producer_name, sequence_id))
        producer.publish(
            sequence_id, sequence_id, 1, data, properties=mapped.store_properties, tag_hash=mapped.tag_hash
        )
        return future

    # ProducerConnection
    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None:
        future = self._waiting.pop(sequence_id, None)
        if future is not None and not future.done():
            future.set_result(position)

    def send_send_error(self, producer_id: int, sequence_id: int, error: ServerError, message: str) -> None:
        future = self._waiting.pop(sequence_id, None)
        if future is not None and not future.done():
            future.set_exception(RocketMQError(_SEND_ERRORS.get(error, Code.INTERNAL_SERVER_ERROR), message))

    def close_producer(self, producer: Producer) -> None:
        """Fenced (a store refusing writes, the backlog quota, topic unload): fail what waits, drop the
        producer; the next send makes a new one."""
        self.close()
        self._fail_all(
            Code.TOO_MANY_REQUESTS, "the broker closed the producer (the store refuses writes now?)"
        )

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        return None

    def refuse_producer(self, producer: Producer, error: Any) -> None:
        return None

    def publish_completed(self) -> None:
        return None

    def _fail_all(self, code: int, message: str) -> None:
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(RocketMQError(code, message))

    def close(self) -> None:
        """Detach the producer from its topic (ClientResource)."""
        if self._record.resources.get(self._key) is self:
            del self._record.resources[self._key]
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.closed = True
            producer.topic.remove_producer(producer)
        self._fail_all(Code.INTERNAL_SERVER_ERROR, "the client's producer was closed")


class SendActivity:
    """SendMessage."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context

    async def SendMessage(self, request: Any, context: Any) -> Any:
        metadata = call_metadata(context)
        messages = request.messages
        if not messages:
            raise RocketMQError(Code.MESSAGE_CORRUPTED, "no message to send")
        if len(messages) > 1 and len({(m.topic.resource_namespace, m.topic.name) for m in messages}) > 1:
            raise RocketMQError(Code.MESSAGE_CORRUPTED, "all messages of one request must name one topic")
        record = self.context.clients.touch(metadata.client_id)
        role = self.context.role(context)
        response = service.SendMessageResponse()
        if len(messages) == 1:  # what the clients send: errors become the response's status
            message = messages[0]
            offset = await self._send_one(message, metadata, record, role)
            message_id = message.system_properties.message_id
            response.entries.add(status=_OK, offset=offset, message_id=message_id, transaction_id=message_id)
            response.status.CopyFrom(_OK)
            return response
        for message in messages:
            entry = response.entries.add()
            try:
                entry.offset = await self._send_one(message, metadata, record, role)
                entry.message_id = entry.transaction_id = message.system_properties.message_id
                entry.status.CopyFrom(_OK)
            except RocketMQError as exc:
                entry.status.CopyFrom(new_status(exc.code, exc.message))
        codes = {e.status.code for e in response.entries}
        if len(codes) == 1:
            response.status.CopyFrom(response.entries[0].status)
        else:
            response.status.CopyFrom(new_status(Code.MULTIPLE_RESULTS, "entries have different results"))
        return response

    async def _send_one(
        self, message: Any, metadata: CallMetadata, record: ClientRecord, role: str | None
    ) -> int:
        """Publish one message; returns its queue offset. Raises RocketMQError."""
        ctx = self.context
        mapped = map_message(message, max_body_size=ctx.settings.max_body_size)
        topic = ctx.topic_name(message.topic, metadata)
        queues = ctx.queue_count(topic)
        check_message_type(ctx.service, topic, mapped.message_type)  # rmqtx: the topic's message.type
        local = ctx.local_queues(topic, queues)
        if not local:
            raise RocketMQError(
                Code.FORBIDDEN, f"no writable queue of topic {topic.local_name} on this broker"
            )
        if mapped.message_group:
            queue_id = local[consistent_hash(java_string_hash(mapped.message_group), len(local))]
        else:
            queue_id = local[ctx.next_queue(topic, len(local))]
        partition = ctx.queue_topic(topic, queue_id, queues)
        try:
            ctx.service.security.check_produce(role, partition)
        except PermissionDeniedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None
        if mapped.message_type == definition.MessageType.TRANSACTION:  # rmqtx: a half message
            namespace = message.topic.resource_namespace or metadata.namespace
            return int(
                await ctx.transaction_service().prepare(mapped, partition, queue_id, namespace, message)
            )
        try:
            link = await self._link(record, partition, metadata)
            written = link.topic
            position = await link.publish(mapped)
        except RocketMQError:
            raise
        except Exception as exc:  # noqa: BLE001 - the broker's own errors: topic loading, admission, the store
            code = code_of(exc)
            if code == Code.INTERNAL_SERVER_ERROR:
                log.warning("RocketMQ send to %s failed: %r", partition.full_name, exc)
            raise RocketMQError(code, f"send to {partition.full_name} failed: {exc}") from None
        ledger = getattr(written, "ledger", None)  # the topic the entry went through
        offset = ledger.table.offset_of(position) if ledger is not None else None
        return -1 if offset is None else offset

    async def _link(
        self, record: ClientRecord, partition: TopicName, metadata: CallMetadata
    ) -> _ProducerLink:
        """The client's producer on ``partition``, attached on first use. Raises the broker's errors."""
        key = f"producer:{partition.full_name}"
        existing = record.resources.get(key)
        if isinstance(existing, _ProducerLink) and existing.producer is not None:
            return existing
        service_ = self.context.service
        refusal = service_.read_only or service_.write_refusal()
        if refusal is not None:
            raise RocketMQError(Code.TOO_MANY_REQUESTS, refusal)
        topic = await service_.get_or_create_topic(partition)
        if not topic.is_persistent:
            raise RocketMQError(Code.FORBIDDEN, f"{partition.full_name} is not a persistent topic")
        existing = record.resources.get(key)  # another send of this client attached one meanwhile
        if isinstance(existing, _ProducerLink) and existing.producer is not None:
            return existing
        link = _ProducerLink(key, record)
        name = f"rocketmq-{metadata.client_id}"
        producer = Producer(producer_id=0, producer_name=name, topic=topic, cnx=link, user_provided_name=True)
        if not topic.add_producer(producer):  # Shared access: never waits
            raise RocketMQError(
                Code.TOO_MANY_REQUESTS, f"{partition.full_name} is held by an exclusive producer"
            )
        link.producer = producer
        link.topic = topic
        link.next_sequence_id = topic.dedup.last_published_sequence_id(name) + 1
        if record.resources.get(key) is not None:
            record.resources[key].close()
        record.resources[key] = link
        if self.context.clients.get(record.client_id) is not record:  # the client went meanwhile
            link.close()
            raise RocketMQError(Code.INTERNAL_SERVER_ERROR, "the client terminated during the send")
        return link
