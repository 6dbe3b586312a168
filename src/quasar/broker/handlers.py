"""Command handlers of ServerCnx, one method per Pulsar command (reference/pulsar-protocol.md §6).

Every reply sets every ``required`` field (the C++ client drops the connection otherwise) and only uses types
the client handles (§3 "B→C handled"). Failures become ERROR / SEND_ERROR / *_RESPONSE error fields with the
ServerError code of the BrokerError raised; nothing escapes to the event loop.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from quasar.broker import errors as codes
from quasar.broker.consumer import Consumer
from quasar.broker.consumer_handlers import ConsumerHandlers
from quasar.broker.errors import error_of
from quasar.broker.producer import Producer
from quasar.broker.topic import INITIAL_POSITION_EARLIEST
from quasar.protocol import CommandType, TopicName, commands, num_messages, parse_headers_and_payload
from quasar.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.protocol.decoder import Frame

log = logging.getLogger(__name__)

MAX_PROTOCOL_VERSION = 20
SERVER_VERSION = "Quasar 0.1.0"
_producer_names = itertools.count()

MODE_PERSISTENT, MODE_NON_PERSISTENT, MODE_ALL = 0, 1, 2


class CommandHandlers(ConsumerHandlers):
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
    pending_producer_ids: set[int]
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
        code, message = error_of(exc)
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
            code, message = error_of(exc)
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
            code, message = error_of(exc)
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
        if cmd.producer_id in self.pending_producer_ids:
            self.write(
                commands.new_error(
                    cmd.request_id, codes.SERVICE_NOT_READY, "Producer is already being created on the connection"
                )
            )
            return
        # loading the topic reads (and for a new topic writes) metadata: off the frame path, as Pulsar's
        # handleProducer chains futures; the id is reserved meanwhile so a retried PRODUCER is refused
        self.pending_producer_ids.add(cmd.producer_id)
        self.closed_producer_ids.discard(cmd.producer_id)  # present again after the wait: closed meanwhile
        self.spawn(self._create_producer(cmd))

    async def _create_producer(self, cmd: Any) -> None:
        try:
            await self._create_producer_now(cmd)
        finally:
            self.pending_producer_ids.discard(cmd.producer_id)

    async def _create_producer_now(self, cmd: Any) -> None:
        try:
            topic = await self.service.get_or_create_topic(TopicName.parse(cmd.topic))
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
                await topic.get_or_create_subscription(
                    cmd.initial_subscription_name, durable=True, initial_position=INITIAL_POSITION_EARLIEST
                )
            ready = topic.add_producer(producer)
        except Exception as exc:
            self._reply_error(cmd.request_id, exc)
            return
        if cmd.producer_id in self.closed_producer_ids:  # CLOSE_PRODUCER arrived while it was being created
            self.detach_producer(producer)
            self.write(commands.new_error(cmd.request_id, codes.SERVICE_NOT_READY, "Producer was closed"))
            return
        self.producers[cmd.producer_id] = producer
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
        elif cmd.producer_id in self.pending_producer_ids:
            self.closed_producer_ids.add(cmd.producer_id)
        self.write(commands.new_success(cmd.request_id))


def _sub_message(frame: Frame) -> Any:
    for descriptor, value in frame.command.ListFields():
        if descriptor.name != "type":
            return value
    return None


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
