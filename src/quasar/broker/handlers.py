"""Command handlers of ServerCnx, one method per Pulsar command (reference/pulsar-protocol.md §6).

Every reply sets every ``required`` field (the C++ client drops the connection otherwise) and only uses types
the client handles (§3 "B→C handled"). Failures become ERROR / SEND_ERROR / *_RESPONSE error fields with the
ServerError code of the BrokerError raised; nothing escapes to the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

from quasar.broker import errors as codes
from quasar.broker.consumer import Consumer
from quasar.broker.errors import BrokerError, ConsumerBusyError
from quasar.broker.key_shared_dispatcher import KeySharedMeta
from quasar.broker.producer import Producer
from quasar.broker.subscription import SubType, ack_set_bits
from quasar.broker.topic import INITIAL_POSITION_EARLIEST
from quasar.errors import QuasarError
from quasar.ledger.position import Position
from quasar.protocol import CommandType, TopicName, commands, num_messages, parse_headers_and_payload
from quasar.protocol.errors import InvalidTopicNameError, ProtocolError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.protocol.decoder import Frame

NON_DURABLE_SEEK_GRACE_S = 60.0
"""Seconds a reader's subscription waits for the reader to re-subscribe after a SEEK."""

log = logging.getLogger(__name__)

MAX_PROTOCOL_VERSION = 20
SERVER_VERSION = "Quasar 0.1.0"
INT64_MAX = (1 << 63) - 1
_U64 = 1 << 64
_producer_names = itertools.count()

ACK_CUMULATIVE = 1
MODE_PERSISTENT, MODE_NON_PERSISTENT, MODE_ALL = 0, 1, 2


def signed64(value: int) -> int:
    """uint64 on the wire -> signed int64 (MessageId.earliest arrives as 2^64-1, reference §2)."""
    return value - _U64 if value >= 1 << 63 else value


def position_of(message_id: Any) -> Position:
    return Position(signed64(message_id.ledgerId), signed64(message_id.entryId))


class CommandHandlers:
    """Mixin holding the handlers; ServerCnx supplies the connection state and the write/close plumbing."""

    service: BrokerService
    config: BrokerConfig
    connected: bool
    client_version: str
    protocol_version: int
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]
    closed_producer_ids: set[int]
    closed_consumer_ids: set[int]
    remote_address: str

    # provided by ServerCnx
    def write(self, frame: bytes) -> None: ...
    def close(self, reason: str) -> None: ...
    def spawn(self, coro: Any) -> None: ...
    def detach_producer(self, producer: Producer) -> None: ...
    def detach_consumer(self, consumer: Consumer) -> None: ...

    # ------------------------------------------------------------------ dispatch
    def handle_frame(self, frame: Frame) -> None:
        """Route one decoded frame to its handler."""
        if not self.connected:
            if frame.type == CommandType.CONNECT:
                self._handle_connect(frame.command.connect)
            else:
                self.close(f"expected CONNECT as the first command, got type {frame.type}")
            return
        handler = _HANDLERS.get(frame.type)
        if handler is None:
            self._unsupported(frame)
            return
        handler(self, frame)

    def _unsupported(self, frame: Frame) -> None:
        name = (
            CommandType(frame.type).name if frame.type in CommandType._value2member_map_ else str(frame.type)
        )
        sub = _sub_message(frame)
        if sub is not None and sub.DESCRIPTOR.fields_by_name.get("request_id") is not None:
            self.write(
                commands.new_error(sub.request_id, codes.NOT_ALLOWED, f"command {name} is not supported")
            )
            return
        self.close(f"command {name} is not supported and has no request id to answer")

    def _reply_error(self, request_id: int, exc: Exception) -> None:
        code, message = _error_of(exc)
        self.write(commands.new_error(request_id, code, message))

    # ------------------------------------------------------------------ connection
    def _handle_connect(self, connect: Any) -> None:
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.connected = True
        self.write(
            commands.new_connected(SERVER_VERSION, self.protocol_version, self.config.max_message_size)
        )

    def _handle_connect_again(self, frame: Frame) -> None:
        self.close("CONNECT received twice on one connection")

    def _handle_ping(self, frame: Frame) -> None:
        self.write(commands.new_pong())

    def _handle_pong(self, frame: Frame) -> None:
        pass  # any received frame already cleared the keep-alive flag

    def _handle_auth_response(self, frame: Frame) -> None:
        pass  # this broker never sends AUTH_CHALLENGE; a stray response is harmless

    # ------------------------------------------------------------------ lookup
    def _handle_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitionMetadata
        try:
            topic = TopicName.parse(cmd.topic)
            partitions = self.service.partitions(topic)
        except Exception as exc:
            code, message = _error_of(exc)
            self.write(commands.new_partitioned_metadata_error(cmd.request_id, code, message))
            return
        self.write(commands.new_partitioned_metadata_response(cmd.request_id, partitions))

    def _handle_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookupTopic
        try:
            topic = TopicName.parse(cmd.topic)
            if not self.service.namespace_exists(topic.namespace_name):
                raise codes.NamespaceNotFoundError(f"Namespace {topic.namespace_name} does not exist")
        except Exception as exc:
            code, message = _error_of(exc)
            self.write(commands.new_lookup_error(cmd.request_id, code, message))
            return
        self.write(
            commands.new_lookup_response(cmd.request_id, self.service.broker_service_url, authoritative=True)
        )

    def _handle_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        mode = cmd.mode
        try:
            if not self.service.namespace_exists(cmd.namespace):
                raise codes.NamespaceNotFoundError(f"Namespace {cmd.namespace} does not exist")
            topics: list[str] = []
            if mode in (MODE_PERSISTENT, MODE_ALL):
                topics += self.service.list_topics(cmd.namespace, "persistent")
            if mode in (MODE_NON_PERSISTENT, MODE_ALL):
                topics += self.service.list_topics(cmd.namespace, "non-persistent")
        except Exception as exc:
            self._reply_error(cmd.request_id, exc)
            return
        self.write(commands.new_get_topics_of_namespace_response(cmd.request_id, topics))

    def _handle_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.getSchema
        self.write(commands.new_get_schema_error(cmd.request_id, codes.TOPIC_NOT_FOUND, "Schema not found"))

    # ------------------------------------------------------------------ producers
    def _handle_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        existing = self.producers.get(cmd.producer_id)
        if existing is not None:
            if existing.topic.name.full_name == cmd.topic:
                last_sequence_id = existing.topic.dedup.last_published_sequence_id(existing.producer_name)
                self.write(
                    commands.new_producer_success(cmd.request_id, existing.producer_name, last_sequence_id)
                )
            else:
                self.write(
                    commands.new_error(
                        cmd.request_id,
                        codes.SERVICE_NOT_READY,
                        "Producer is already present on the connection",
                    )
                )
            return
        try:
            topic = self.service.get_or_create_topic(TopicName.parse(cmd.topic))
            user_provided = bool(cmd.producer_name)
            name = cmd.producer_name if user_provided else self.service.generate_producer_name()
            producer = Producer(
                cmd.producer_id,
                name,
                topic,  # type: ignore[arg-type]
                self,  # type: ignore[arg-type]
                user_provided,
                access_mode=cmd.producer_access_mode,
                request_id=cmd.request_id,
            )
            if cmd.initial_subscription_name and topic.is_persistent:
                # Pulsar ServerCnx.handleProducer: create the producer's initial subscription at Earliest
                # (used by the client's dead-letter producer, DeadLetterPolicy.initialSubscriptionName).
                topic.get_or_create_subscription(
                    cmd.initial_subscription_name, durable=True, initial_position=INITIAL_POSITION_EARLIEST
                )
            ready = topic.add_producer(producer)
        except Exception as exc:
            self._reply_error(cmd.request_id, exc)
            return
        self.producers[cmd.producer_id] = producer
        self.closed_producer_ids.discard(cmd.producer_id)
        if not ready:  # WaitForExclusive on a busy topic: answered again once it holds the topic
            self.write(commands.new_producer_success(cmd.request_id, name, -1, producer_ready=False))
            return
        self.producer_ready(producer, topic.access.topic_epoch)

    def producer_ready(self, producer: Producer, topic_epoch: int) -> None:
        """PRODUCER_SUCCESS for a producer that may send now (with ``topic_epoch`` for exclusive modes)."""
        last_sequence_id = producer.topic.dedup.last_published_sequence_id(producer.producer_name)
        self.write(
            commands.new_producer_success(
                producer.request_id,
                producer.producer_name,
                last_sequence_id,
                topic_epoch=topic_epoch if producer.access_mode != 0 else None,
                producer_ready=True if producer.access_mode == 2 else None,
            )
        )

    def _handle_send(self, frame: Frame) -> None:
        cmd = frame.command.send
        producer = self.producers.get(cmd.producer_id)
        if producer is None:
            if cmd.producer_id in self.closed_producer_ids:
                log.debug("SEND for recently closed producer %d ignored", cmd.producer_id)
                return
            self.close(f"SEND for unknown producer id {cmd.producer_id}")
            return
        data = frame.headers_and_payload
        if data is None:
            self.close("SEND frame without metadata and payload")
            return
        if frame.checksum_ok is False:
            self.write(
                commands.new_send_error(
                    cmd.producer_id, cmd.sequence_id, codes.CHECKSUM_ERROR, "Checksum failed on the broker"
                )
            )
            return
        # Chunks are exempt (Pulsar isExceedMaximumMessageSize returns false for chunked publishes): the C++
        # client sizes a chunk's payload to max_message_size minus the metadata, so its headers and payload
        # slightly exceed it; the frame decoder still bounds the frame.
        if not cmd.is_chunk and len(data) > self.config.max_message_size:
            self.write(
                commands.new_send_error(
                    cmd.producer_id,
                    cmd.sequence_id,
                    codes.NOT_ALLOWED,
                    f"message of {len(data)} bytes exceeds max_message_size {self.config.max_message_size}",
                )
            )
            return
        try:
            count = num_messages(parse_headers_and_payload(data).metadata)
        except ProtocolError as exc:
            self.close(f"SEND with malformed message metadata: {exc}")
            return
        highest = cmd.highest_sequence_id if cmd.HasField("highest_sequence_id") else 0
        producer.publish(cmd.sequence_id, highest, count, data)

    def _handle_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        producer = self.producers.pop(cmd.producer_id, None)
        if producer is not None:
            self.detach_producer(producer)
            self.closed_producer_ids.add(cmd.producer_id)
        self.write(commands.new_success(cmd.request_id))

    # ------------------------------------------------------------------ consumers
    def _handle_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        existing = self.consumers.get(cmd.consumer_id)
        if existing is not None:
            if existing.subscription.name == cmd.subscription:
                self.write(commands.new_success(cmd.request_id))
            else:
                self.write(
                    commands.new_error(
                        cmd.request_id,
                        codes.SERVICE_NOT_READY,
                        "Consumer is already present on the connection",
                    )
                )
            return
        subscription = None
        try:
            if not cmd.subscription:
                raise codes.NotAllowedError("Empty subscription name")
            topic = self.service.get_or_create_topic(TopicName.parse(cmd.topic))
            durable = cmd.durable if cmd.HasField("durable") else True
            start = None
            if not durable and topic.is_persistent and cmd.HasField("start_message_id"):
                start = self._reader_start(topic, position_of(cmd.start_message_id), cmd.initialPosition)
            subscription = topic.get_or_create_subscription(
                cmd.subscription, durable=durable, initial_position=cmd.initialPosition, start_position=start
            )
            try:
                sub_type = SubType(cmd.subType)
            except ValueError:
                raise codes.NotAllowedError(f"unknown subscription type {cmd.subType}") from None
            consumer = Consumer(
                cmd.consumer_id,
                cmd.consumer_name,
                self,
                subscription,
                priority_level=cmd.priority_level,  # type: ignore[arg-type]
            )
            key_shared_meta = None
            if sub_type == SubType.KEY_SHARED and cmd.HasField("keySharedMeta"):
                meta = cmd.keySharedMeta
                key_shared_meta = KeySharedMeta(
                    meta.keySharedMode,
                    tuple((r.start, r.end) for r in meta.hashRanges),
                    meta.allowOutOfOrderDelivery,
                )
            self.service.check_consumer_limits(topic, subscription)
            subscription.add_consumer(consumer, sub_type, key_shared_meta)
        except Exception as exc:
            if subscription is not None:
                subscription.topic.remove_non_durable_if_idle(subscription)
            self._reply_error(cmd.request_id, exc)
            return
        self.consumers[cmd.consumer_id] = consumer
        self.closed_consumer_ids.discard(cmd.consumer_id)
        self.write(commands.new_success(cmd.request_id))

    @staticmethod
    def _reader_start(topic: Any, start: Position, initial_position: int) -> Position:
        """Where a reader's non-durable cursor starts (Pulsar NonDurableCursorImpl): (-1,-1) = first entry;
        an id past the last entry = after the last (or the first entry when initialPosition is Earliest)."""
        ledger = topic.ledger
        if start.ledger_id < 0 or start.entry_id < 0:
            return ledger.first_position
        last = ledger.last_confirmed_entry
        if start > last or start.ledger_id >= INT64_MAX:
            return ledger.first_position if initial_position == 1 else ledger.next_valid_position(last)
        if start < ledger.first_position:
            return ledger.first_position
        return start

    def _consumer(self, consumer_id: int, request_id: int | None, command: str) -> Consumer | None:
        consumer = self.consumers.get(consumer_id)
        if consumer is not None:
            return consumer
        if request_id is not None:
            self.write(
                commands.new_error(request_id, codes.CONSUMER_NOT_FOUND, f"Consumer {consumer_id} not found")
            )
        elif consumer_id in self.closed_consumer_ids:
            log.debug("%s for recently closed consumer %d ignored", command, consumer_id)
        else:
            self.close(f"{command} for unknown consumer id {consumer_id}")
        return None

    def _handle_flow(self, frame: Frame) -> None:
        cmd = frame.command.flow
        consumer = self._consumer(cmd.consumer_id, None, "FLOW")
        if consumer is not None:
            consumer.flow(cmd.messagePermits)
            consumer.subscription.schedule_dispatch()

    def _handle_ack(self, frame: Frame) -> None:
        cmd = frame.command.ack
        request_id = cmd.request_id if cmd.HasField("request_id") else None
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            if request_id is not None:
                self.write(
                    commands.new_ack_response(
                        cmd.consumer_id,
                        request_id,
                        codes.CONSUMER_NOT_FOUND,
                        f"Consumer {cmd.consumer_id} not found",
                    )
                )
            else:
                self._consumer(cmd.consumer_id, None, "ACK")
            return
        try:
            if consumer.subscription.persistent:  # non-persistent: acks change nothing (gotcha 3)
                self._apply_ack(consumer, cmd)
        except QuasarError as exc:
            # Pulsar logs acks it cannot apply; an ack receipt carries the error
            log.info("ack of consumer %d not applied: %s", cmd.consumer_id, exc)
            if request_id is not None:
                code, message = _error_of(exc)
                self.write(commands.new_ack_response(cmd.consumer_id, request_id, code, message))
            return
        if request_id is not None:
            self.write(commands.new_ack_response(cmd.consumer_id, request_id))

    @staticmethod
    def _apply_ack(consumer: Consumer, cmd: Any) -> None:
        """Apply one CommandAck. A message id whose ack_set still has bits set is a batch-index ack (PIP-54):
        bit i set = index i not yet acknowledged. Raises ``NotAllowedError`` for an ack_set longer than the
        delivered batch needs, and the cursor's errors for positions that name no entry."""
        subscription = consumer.subscription
        whole: list[Position] = []
        partial: list[tuple[Position, int]] = []
        for message_id in cmd.message_id:
            position = position_of(message_id)
            if message_id.ack_set and any(message_id.ack_set):
                if subscription.cursor.batch_ack_set(position) is None:
                    # first batch-index ack of this entry: the set must fit the delivered batch
                    count = consumer.pending_acks.get(position)
                    words = len(message_id.ack_set)
                    if count is not None and words > (count + 63) // 64:
                        raise codes.NotAllowedError(
                            f"ack_set of {words} words for a batch of {count} messages at {position}"
                        )
                partial.append((position, ack_set_bits(message_id.ack_set)))
            else:
                whole.append(position)
        if cmd.ack_type == ACK_CUMULATIVE:
            if partial and (not whole or partial[-1][0] > max(whole)):
                subscription.ack_cumulative(consumer, partial[-1][0], partial[-1][1])
            elif whole:
                subscription.ack_cumulative(consumer, max(whole))
            return
        if whole:
            subscription.ack_individual(consumer, whole)
        for position, bits in partial:
            subscription.ack_batch_index(consumer, position, bits)

    def _handle_redeliver(self, frame: Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        consumer = self._consumer(cmd.consumer_id, None, "REDELIVER_UNACKNOWLEDGED_MESSAGES")
        if consumer is not None:
            ids = [position_of(m) for m in cmd.message_ids] or None
            consumer.subscription.redeliver_unacknowledged(consumer, ids)

    def _handle_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        consumer = self.consumers.pop(cmd.consumer_id, None)
        if consumer is not None:
            self.detach_consumer(consumer)
            self.closed_consumer_ids.add(cmd.consumer_id)
        self.write(commands.new_success(cmd.request_id))

    def _handle_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        consumer = self._consumer(cmd.consumer_id, cmd.request_id, "UNSUBSCRIBE")
        if consumer is None:
            return
        subscription = consumer.subscription
        if any(c is not consumer for c in subscription.consumers):
            self._reply_error(
                cmd.request_id,
                ConsumerBusyError(f"Subscription {subscription.name} has other connected consumers"),
            )
            return

        async def unsubscribe() -> None:
            self.consumers.pop(cmd.consumer_id, None)
            self.closed_consumer_ids.add(cmd.consumer_id)
            subscription.remove_consumer(consumer)
            try:
                await subscription.topic.delete_subscription(subscription.name)
            except Exception as exc:
                self._reply_error(cmd.request_id, exc)
                return
            self.write(commands.new_success(cmd.request_id))

        self.spawn(unsubscribe())

    def _handle_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        consumer = self._consumer(cmd.consumer_id, cmd.request_id, "SEEK")
        if consumer is None:
            return
        subscription = consumer.subscription
        try:
            if not subscription.persistent:
                raise codes.NotAllowedError("Seek is not supported on non-persistent topics")
            ledger = subscription.topic.ledger
            if cmd.HasField("message_id"):
                target = position_of(cmd.message_id)
                if target.ledger_id < 0 or target.entry_id < 0:
                    target = ledger.first_position
                elif target > ledger.last_confirmed_entry:
                    target = ledger.next_valid_position(ledger.last_confirmed_entry)
            elif cmd.HasField("message_publish_time"):
                target = subscription.topic.find_position_by_publish_time(cmd.message_publish_time)
            else:
                raise codes.BrokerError(
                    "Message id and message publish time were not present", server_error=1
                )
        except Exception as exc:
            self._reply_error(cmd.request_id, exc)
            return
        # Pulsar PersistentSubscription.resetCursor: disconnect the consumers, move the cursor, answer SUCCESS;
        # the client re-subscribes and reads from the new position (reference §6.15).
        subscription.close_consumers()
        subscription.cursor.reset_cursor(target)
        if not subscription.durable:
            # A reader's subscription outlives the seek so that its re-subscribe finds the reset cursor: after a
            # seek by publish time the client re-subscribes from its old start id, not from the sought entry.
            # Dropped later if the reader never comes back.
            asyncio.get_running_loop().call_later(
                NON_DURABLE_SEEK_GRACE_S, subscription.topic.remove_non_durable_if_idle, subscription
            )
        self.write(commands.new_success(cmd.request_id))

    def _handle_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.getLastMessageId
        consumer = self._consumer(cmd.consumer_id, cmd.request_id, "GET_LAST_MESSAGE_ID")
        if consumer is None:
            return
        topic = consumer.subscription.topic
        try:
            ledger_id, entry_id, batch_index = topic.last_message_id()
            # consumer_mark_delete_position for every subscription, durable or not, when its ledger id is >= 0
            # (Pulsar ServerCnx); the C++ client compares it with the last id in an inclusive reader's
            # hasMessageAvailable.
            md = consumer.subscription.cursor.mark_delete_position
            mark_delete = (md.ledger_id, md.entry_id) if md.ledger_id >= 0 else None
        except Exception as exc:
            self._reply_error(cmd.request_id, exc)
            return
        self.write(
            commands.new_get_last_message_id_response(
                cmd.request_id, ledger_id, entry_id, topic.partition_index, batch_index, mark_delete
            )
        )

    def _handle_consumer_stats(self, frame: Frame) -> None:
        cmd = frame.command.consumerStats
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            self.write(
                commands.new_consumer_stats_error(
                    cmd.request_id, codes.CONSUMER_NOT_FOUND, f"Consumer {cmd.consumer_id} not found"
                )
            )
            return
        subscription = consumer.subscription
        self.write(
            commands.new_consumer_stats_response(
                cmd.request_id,
                consumer_name=consumer.consumer_name,
                available_permits=max(consumer.permits, 0),
                unacked_messages=consumer.unacked_messages,
                address=self.remote_address,
                connected_since=str(consumer.connected_since_ms),
                type=subscription.sub_type.name if subscription.sub_type is not None else "",
                msg_backlog=subscription.cursor.number_of_entries_in_backlog
                if subscription.persistent
                else 0,
            )
        )


def _sub_message(frame: Frame) -> Any:
    for descriptor, value in frame.command.ListFields():
        if descriptor.name != "type":
            return value
    return None


def _error_of(exc: Exception) -> tuple[int, str]:
    """(ServerError code, message) for an exception raised while handling a request."""
    if isinstance(exc, BrokerError):
        return exc.server_error, str(exc)
    if isinstance(exc, InvalidTopicNameError):
        return codes.INVALID_TOPIC_NAME, str(exc)
    if isinstance(exc, QuasarError):
        return codes.PERSISTENCE_ERROR if "ledger" in type(exc).__module__ else codes.UNKNOWN_ERROR, str(exc)
    log.error("unexpected error while handling a request", exc_info=exc)
    return codes.UNKNOWN_ERROR, f"internal error: {type(exc).__name__}"


_HANDLERS = {
    CommandType.CONNECT: CommandHandlers._handle_connect_again,
    CommandType.PING: CommandHandlers._handle_ping,
    CommandType.PONG: CommandHandlers._handle_pong,
    CommandType.AUTH_RESPONSE: CommandHandlers._handle_auth_response,
    CommandType.PARTITIONED_METADATA: CommandHandlers._handle_partitioned_metadata,
    CommandType.LOOKUP: CommandHandlers._handle_lookup,
    CommandType.GET_TOPICS_OF_NAMESPACE: CommandHandlers._handle_get_topics_of_namespace,
    CommandType.GET_SCHEMA: CommandHandlers._handle_get_schema,
    CommandType.PRODUCER: CommandHandlers._handle_producer,
    CommandType.SEND: CommandHandlers._handle_send,
    CommandType.CLOSE_PRODUCER: CommandHandlers._handle_close_producer,
    CommandType.SUBSCRIBE: CommandHandlers._handle_subscribe,
    CommandType.FLOW: CommandHandlers._handle_flow,
    CommandType.ACK: CommandHandlers._handle_ack,
    CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES: CommandHandlers._handle_redeliver,
    CommandType.CLOSE_CONSUMER: CommandHandlers._handle_close_consumer,
    CommandType.UNSUBSCRIBE: CommandHandlers._handle_unsubscribe,
    CommandType.SEEK: CommandHandlers._handle_seek,
    CommandType.GET_LAST_MESSAGE_ID: CommandHandlers._handle_get_last_message_id,
    CommandType.CONSUMER_STATS: CommandHandlers._handle_consumer_stats,
}
