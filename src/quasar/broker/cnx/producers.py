"""Producer commands: PRODUCER, SEND and CLOSE_PRODUCER (reference/pulsar-protocol.md §6), plus the
broker-initiated replies of a producer (PRODUCER_SUCCESS once a waiting producer holds the topic,
CLOSE_PRODUCER on fencing or backlog quota).

PRODUCER loads its topic (metadata reads, for a new topic writes) in a task the connection owns, as Pulsar's
``handleProducer`` chains futures: the producer id is reserved meanwhile, so a retried PRODUCER with that id is
refused with ServiceNotReady, and a CLOSE_PRODUCER that arrives before the task ends wins (the producer is
dropped and the PRODUCER answered ServiceNotReady). SEND is the publish hot path: one dictionary look-up for
the producer, the size and checksum checks, and ``Producer.publish``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quasar.broker.access_modes import ProducerAccessMode
from quasar.broker.cnx.ports import HandlerTable, ProducerPort
from quasar.broker.cnx.string_limits import check_producer_strings
from quasar.broker.errors import (
    BrokerError,
    NotAllowedError,
    ProducerBusyError,
    ServiceNotReadyError,
    server_error_of,
)
from quasar.broker.producer import Producer
from quasar.broker.schema.wire import schema_info_of, version_bytes
from quasar.errors import QuasarError
from quasar.protocol import (
    CommandType,
    SendFrame,
    TopicName,
    commands,
    num_messages,
    parse_headers_and_payload,
)
from quasar.protocol.enums import InitialPosition, ServerError
from quasar.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from quasar.protocol.decoder import Frame
    from quasar.protocol.pb import CommandProducer

__all__ = ["ProducerCommands"]

log = logging.getLogger(__name__)


class ProducerCommands:
    """The producers of one connection: their commands, and the replies a producer needs later."""

    def __init__(self, cnx: ProducerPort) -> None:
        self._cnx = cnx
        self._producers = cnx.producers
        self._by_id = cnx.producers.active  # the SEND path looks producers up here directly
        self._max_message_size = cnx.config.max_message_size

    def handlers(self) -> HandlerTable:
        """This family's commands: ``CommandType`` -> bound handler, merged into the connection's table."""
        return {
            CommandType.PRODUCER: self.handle_producer,
            CommandType.SEND: self.handle_send,
            CommandType.CLOSE_PRODUCER: self.handle_close_producer,
        }

    # ------------------------------------------------------------------ PRODUCER
    def handle_producer(self, frame: Frame) -> None:
        """PRODUCER: answered at once for an id already in use, else created in a task (module docstring)."""
        cmd = frame.command.producer
        try:
            check_producer_strings(cmd, self._cnx.config)
        except NotAllowedError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        existing = self._producers.get(cmd.producer_id)
        if existing is not None:
            if existing.topic.name.full_name == cmd.topic:  # a retry of the same PRODUCER: idempotent
                last_sequence_id = existing.topic.dedup.last_published_sequence_id(existing.producer_name)
                self._cnx.write(
                    commands.new_producer_success(
                        cmd.request_id, existing.producer_name, last_sequence_id, existing.schema_version
                    )
                )
            else:
                self._reply_error(
                    cmd.request_id, ServiceNotReadyError("Producer is already present on the connection")
                )
            return
        if cmd.producer_id in self._producers.pending:
            self._reply_error(
                cmd.request_id, ServiceNotReadyError("Producer is already being created on the connection")
            )
            return
        self._producers.reserve(cmd.producer_id)
        self._cnx.spawn(self._create_producer(cmd))

    async def _create_producer(self, cmd: CommandProducer) -> None:
        try:
            producer, ready = await self._new_producer(cmd)
        except QuasarError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        finally:
            self._producers.release(cmd.producer_id)
        if self._producers.was_closed(cmd.producer_id):  # CLOSE_PRODUCER arrived while it was being created
            self.detach(producer)
            self._reply_error(cmd.request_id, ServiceNotReadyError("Producer was closed"))
            return
        self._producers.add(cmd.producer_id, producer)
        if not ready:  # WaitForExclusive on a busy topic: answered again once it holds the topic
            self._cnx.write(
                commands.new_producer_success(
                    cmd.request_id, producer.producer_name, -1, producer.schema_version, producer_ready=False
                )
            )
            return
        self.producer_ready(producer, producer.topic.access.topic_epoch)

    async def _new_producer(self, cmd: CommandProducer) -> tuple[Producer, bool]:
        """Load the topic and attach a producer to it; the flag is False while it waits for exclusive access.
        Raises PermissionDeniedError (no produce permission), the BrokerErrors of ``add_producer`` and the
        topic's loading errors."""
        service = self._cnx.service
        refusal = service.read_only or service.write_refusal()
        if refusal is not None:
            raise ServiceNotReadyError(refusal)
        name = TopicName.parse(cmd.topic)
        service.security.check_produce(self._cnx.role, name)
        topic = await service.get_or_create_topic(name)
        schema = schema_info_of(cmd.schema) if cmd.HasField("schema") else None
        schema_version = await service.schemas.add_producer_schema(topic.name, schema)
        try:
            access_mode = ProducerAccessMode(cmd.producer_access_mode)
        except ValueError:
            raise ProducerBusyError(f"unknown producer access mode {cmd.producer_access_mode}") from None
        user_provided = bool(cmd.producer_name)
        producer = Producer(
            cmd.producer_id,
            cmd.producer_name if user_provided else service.generate_producer_name(),
            topic,
            self._cnx,
            user_provided,
            access_mode=access_mode,
            request_id=cmd.request_id,
            requested_epoch=cmd.topic_epoch if cmd.HasField("topic_epoch") else None,
            schema_version=version_bytes(schema_version),
        )
        if cmd.initial_subscription_name and topic.is_persistent:
            # Pulsar ServerCnx.handleProducer: create the producer's initial subscription at Earliest
            # (used by the client's dead-letter producer, DeadLetterPolicy.initialSubscriptionName).
            await topic.get_or_create_subscription(
                cmd.initial_subscription_name, durable=True, initial_position=InitialPosition.Earliest
            )
        return producer, topic.add_producer(producer)

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        """PRODUCER_SUCCESS for a producer that may send now, with the topic's epoch once a producer has held the
        topic exclusively (Pulsar answers every access mode with it; the client sends it back on reconnect)."""
        last_sequence_id = producer.topic.dedup.last_published_sequence_id(producer.producer_name)
        mode = producer.access_mode
        self._cnx.write(
            commands.new_producer_success(
                producer.request_id,
                producer.producer_name,
                last_sequence_id,
                producer.schema_version,
                topic_epoch=topic_epoch,
                producer_ready=True if mode == ProducerAccessMode.WaitForExclusive else None,
            )
        )

    # ------------------------------------------------------------------ SEND
    def handle_send(self, frame: Frame) -> None:
        """SEND: publish one entry (a whole client batch). A SEND for a closed producer is ignored, for an
        unknown one closes the connection; a bad checksum or an oversized entry answers SEND_ERROR. A
        :class:`SendFrame` (the decoder's fast path) carries its fields and a validated metadata; any other SEND
        is read from its protobuf command and its metadata parsed here."""
        if isinstance(frame, SendFrame):
            producer = self._accept(
                frame.producer_id,
                frame.sequence_id,
                frame.is_chunk,
                frame.headers_and_payload,
                frame.checksum_ok,
            )
            if producer is not None:
                self._cnx.publish_started()
                producer.publish(
                    frame.sequence_id,
                    frame.highest_sequence_id,
                    frame.num_messages,
                    frame.headers_and_payload,
                )
            return
        cmd = frame.command.send
        data = frame.headers_and_payload
        if data is None:
            self._cnx.close("SEND frame without metadata and payload")
            return
        producer = self._accept(cmd.producer_id, cmd.sequence_id, cmd.is_chunk, data, frame.checksum_ok)
        if producer is None:
            return
        try:
            count = num_messages(parse_headers_and_payload(data).metadata)
        except ProtocolError as exc:
            self._cnx.close(f"SEND with malformed message metadata: {exc}")
            return
        highest = cmd.highest_sequence_id if cmd.HasField("highest_sequence_id") else 0
        self._cnx.publish_started()
        producer.publish(cmd.sequence_id, highest, count, data)

    def _accept(
        self, producer_id: int, sequence_id: int, is_chunk: bool, data: memoryview, checksum_ok: bool | None
    ) -> Producer | None:
        """The producer a SEND publishes through, or None when the SEND was answered (SEND_ERROR for a bad
        checksum or an oversized entry), ignored (a recently closed producer) or closed the connection (an
        unknown producer)."""
        producer = self._by_id.get(producer_id)
        if producer is None:
            if self._producers.was_closed(producer_id):
                log.debug("SEND for recently closed producer %d ignored", producer_id)
                return None
            self._cnx.close(f"SEND for unknown producer id {producer_id}")
            return None
        if checksum_ok is False:
            self._cnx.write(
                commands.new_send_error(
                    producer_id, sequence_id, ServerError.ChecksumError, "Checksum failed on the broker"
                )
            )
            return None
        # Chunks are exempt (Pulsar isExceedMaximumMessageSize returns false for chunked publishes): the C++
        # client sizes a chunk's payload to max_message_size minus the metadata, so its headers and payload
        # slightly exceed it; the frame decoder still bounds the frame.
        if not is_chunk and len(data) > self._max_message_size:
            self._cnx.write(
                commands.new_send_error(
                    producer_id,
                    sequence_id,
                    ServerError.NotAllowedError,
                    f"message of {len(data)} bytes exceeds max_message_size {self._max_message_size}",
                )
            )
            return None
        return producer

    # ------------------------------------------------------------------ closing
    def handle_close_producer(self, frame: Frame) -> None:
        """CLOSE_PRODUCER: detach the producer (or mark a pending one closed) and answer SUCCESS."""
        cmd = frame.command.close_producer
        producer = self._producers.close(cmd.producer_id)
        if producer is not None:
            self.detach(producer)
        self._cnx.write(commands.new_success(cmd.request_id))

    def close_producer(self, producer: Producer) -> None:
        """Broker-initiated CLOSE_PRODUCER (fencing, backlog quota): detach it; the client reconnects by
        itself."""
        if self._producers.get(producer.producer_id) is producer:
            self._producers.close(producer.producer_id)
        self.detach(producer)
        self._cnx.write(commands.new_close_producer(producer.producer_id, 0))

    def refuse_producer(self, producer: Producer, error: BrokerError) -> None:
        """A waiting producer will not get the topic: answer its PRODUCER request with ``error`` (Pulsar fails
        the queued producer's future) and detach it."""
        if self._producers.get(producer.producer_id) is producer:
            self._producers.close(producer.producer_id)
        self.detach(producer)
        self._reply_error(producer.request_id, error)

    def detach(self, producer: Producer) -> None:
        """Take ``producer`` off its topic; receipts still in flight are not sent."""
        producer.closed = True
        producer.topic.remove_producer(producer)

    def close_all(self) -> None:
        """The connection closed: detach every producer."""
        for producer in self._producers.clear():
            self.detach(producer)

    def _reply_error(self, request_id: int, exc: QuasarError) -> None:
        code, message = server_error_of(exc)
        self._cnx.write(commands.new_error(request_id, code, message))
