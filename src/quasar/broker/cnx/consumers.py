"""Consumer commands: SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, CLOSE_CONSUMER, UNSUBSCRIBE,
SEEK, GET_LAST_MESSAGE_ID and CONSUMER_STATS (reference/pulsar-protocol.md §6), plus the broker-initiated
CLOSE_CONSUMER.

SUBSCRIBE loads its topic and creates the cursor in a task the connection owns: the consumer id is reserved
meanwhile (a retried SUBSCRIBE with that id is refused with ServiceNotReady), and a CLOSE_CONSUMER that
arrives before the task ends wins. A command naming an unknown consumer is answered ConsumerNotFound when it
carries a request id; without one it is ignored for a recently closed consumer and closes the connection
otherwise. Failures answer ERROR (or ACK_RESPONSE) with the ServerError of ``errors.server_error_of``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quasar.broker.cnx.ports import ConsumerPort, HandlerTable
from quasar.broker.cnx.positions import apply_ack, key_shared_meta_of, position_of, reader_start, seek_target
from quasar.broker.cnx.string_limits import check_subscribe_strings
from quasar.broker.compaction.reads import check_read_compacted
from quasar.broker.compaction.view import compacted_last_message_id
from quasar.broker.consumer import Consumer
from quasar.broker.errors import (
    ConsumerBusyError,
    ConsumerNotFoundError,
    NotAllowedError,
    ServiceNotReadyError,
    server_error_of,
)
from quasar.broker.schema.wire import schema_info_of, topic_in_use
from quasar.broker.subscription import Subscription
from quasar.broker.system_topics import check_subscription_allowed
from quasar.broker.topic import PersistentTopic
from quasar.errors import QuasarError
from quasar.protocol import CommandType, TopicName, commands
from quasar.protocol.enums import SubType

if TYPE_CHECKING:
    from quasar.protocol.decoder import Frame
    from quasar.protocol.pb import CommandSubscribe

__all__ = ["NON_DURABLE_SEEK_GRACE_S", "ConsumerCommands"]

log = logging.getLogger(__name__)

NON_DURABLE_SEEK_GRACE_S = 60.0
"""Seconds a reader's subscription waits for the reader to re-subscribe after a SEEK."""


class ConsumerCommands:
    """The consumers of one connection and their commands."""

    def __init__(self, cnx: ConsumerPort) -> None:
        self._cnx = cnx
        self._consumers = cnx.consumers

    def handlers(self) -> HandlerTable:
        """This family's commands: ``CommandType`` -> bound handler, merged into the connection's table."""
        return {
            CommandType.SUBSCRIBE: self.handle_subscribe,
            CommandType.FLOW: self.handle_flow,
            CommandType.ACK: self.handle_ack,
            CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            CommandType.CLOSE_CONSUMER: self.handle_close_consumer,
            CommandType.UNSUBSCRIBE: self.handle_unsubscribe,
            CommandType.SEEK: self.handle_seek,
            CommandType.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            CommandType.CONSUMER_STATS: self.handle_consumer_stats,
        }

    # ------------------------------------------------------------------ SUBSCRIBE
    def handle_subscribe(self, frame: Frame) -> None:
        """SUBSCRIBE: answered at once for an id already in use, else created in a task (module docstring)."""
        cmd = frame.command.subscribe
        try:
            check_subscribe_strings(cmd, self._cnx.config)
        except NotAllowedError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        existing = self._consumers.get(cmd.consumer_id)
        if existing is not None:
            if existing.subscription.name == cmd.subscription:  # a retry of the same SUBSCRIBE: idempotent
                self._cnx.write(commands.new_success(cmd.request_id))
            else:
                self._reply_error(
                    cmd.request_id, ServiceNotReadyError("Consumer is already present on the connection")
                )
            return
        if cmd.consumer_id in self._consumers.pending:
            self._reply_error(
                cmd.request_id, ServiceNotReadyError("Consumer is already being created on the connection")
            )
            return
        self._consumers.reserve(cmd.consumer_id)
        self._cnx.spawn(self._subscribe(cmd))

    async def _subscribe(self, cmd: CommandSubscribe) -> None:
        try:
            consumer = await self._new_consumer(cmd)
        except QuasarError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        finally:
            self._consumers.release(cmd.consumer_id)
        if self._consumers.was_closed(cmd.consumer_id):  # CLOSE_CONSUMER arrived while it was being created
            self.detach(consumer)
            self._reply_error(cmd.request_id, ServiceNotReadyError("Consumer was closed"))
            return
        self._consumers.add(cmd.consumer_id, consumer)
        self._cnx.write(commands.new_success(cmd.request_id))

    async def _new_consumer(self, cmd: CommandSubscribe) -> Consumer:
        """Load the topic, get or create the subscription and attach a consumer to it. Raises NotAllowedError
        (empty name, unknown sub type, ``max_subscriptions_per_topic`` reached), PermissionDeniedError (no
        consume permission), the subscription's ConsumerBusyError / ConsumerAssignError, and the topic's loading
        errors; a reader's subscription created for a refused consumer is dropped again."""
        if not cmd.subscription:
            raise NotAllowedError("Empty subscription name")
        try:
            sub_type = SubType(cmd.subType)
        except ValueError:
            raise NotAllowedError(f"unknown subscription type {cmd.subType}") from None
        service = self._cnx.service
        name = TopicName.parse(cmd.topic)
        service.security.check_consume(self._cnx.role, name, cmd.subscription)
        check_subscription_allowed(name, cmd.subscription)
        topic = await service.get_or_create_topic(name)
        if cmd.read_compacted:
            check_read_compacted(isinstance(topic, PersistentTopic), sub_type)
        if cmd.HasField("schema"):  # Pulsar addSchemaIfIdleOrCheckCompatible
            await service.schemas.check_consumer_schema(
                topic.name, schema_info_of(cmd.schema), idle=not topic_in_use(topic)
            )
        durable = cmd.durable if cmd.HasField("durable") else True
        start = None
        if not durable and isinstance(topic, PersistentTopic) and cmd.HasField("start_message_id"):
            start = reader_start(topic.ledger, position_of(cmd.start_message_id), cmd.initialPosition)
        service.check_subscription_limit(topic, cmd.subscription)  # before the cursor is created
        subscription = await topic.get_or_create_subscription(
            cmd.subscription, durable=durable, initial_position=cmd.initialPosition, start_position=start
        )
        try:
            consumer = Consumer(
                cmd.consumer_id, cmd.consumer_name, self._cnx, subscription, priority_level=cmd.priority_level
            )
            meta = None
            if sub_type == SubType.Key_Shared and cmd.HasField("keySharedMeta"):
                meta = key_shared_meta_of(cmd.keySharedMeta)
            service.check_consumer_limits(topic, subscription)
            subscription.add_consumer(consumer, sub_type, meta)
            if isinstance(subscription, Subscription):  # before the first dispatch round (call_soon)
                subscription.read_compacted = cmd.read_compacted
        except BaseException:
            subscription.drop_if_idle()
            raise
        return consumer

    # ------------------------------------------------------------------ flow and acks
    def _consumer(self, consumer_id: int, request_id: int | None, command: str) -> Consumer | None:
        """The consumer ``consumer_id`` names, or None once the miss is answered (module docstring)."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None:
            return consumer
        if request_id is not None:
            self._reply_error(request_id, ConsumerNotFoundError(f"Consumer {consumer_id} not found"))
        elif self._consumers.was_closed(consumer_id):
            log.debug("%s for recently closed consumer %d ignored", command, consumer_id)
        else:
            self._cnx.close(f"{command} for unknown consumer id {consumer_id}")
        return None

    def handle_flow(self, frame: Frame) -> None:
        """FLOW: add permits (messages) and run a dispatch round."""
        cmd = frame.command.flow
        consumer = self._consumer(cmd.consumer_id, None, "FLOW")
        if consumer is not None:
            consumer.flow(cmd.messagePermits)
            consumer.subscription.schedule_dispatch()

    def handle_ack(self, frame: Frame) -> None:
        """ACK: apply it (non-persistent: nothing to do, gotcha 3); with a request id answer ACK_RESPONSE,
        carrying the error of an ack that could not be applied (Pulsar logs those)."""
        cmd = frame.command.ack
        request_id = cmd.request_id if cmd.HasField("request_id") else None
        consumer = self._consumers.get(cmd.consumer_id)
        if consumer is None:
            if request_id is None:
                self._consumer(cmd.consumer_id, None, "ACK")
                return
            error = ConsumerNotFoundError(f"Consumer {cmd.consumer_id} not found")
            self._cnx.write(
                commands.new_ack_response(cmd.consumer_id, request_id, error.server_error, str(error))
            )
            return
        subscription = consumer.subscription
        try:
            if isinstance(subscription, Subscription):
                apply_ack(subscription, consumer, cmd)
        except QuasarError as exc:
            log.info("ack of consumer %d not applied: %s", cmd.consumer_id, exc)
            if request_id is not None:
                code, message = server_error_of(exc)
                self._cnx.write(commands.new_ack_response(cmd.consumer_id, request_id, code, message))
            return
        if request_id is not None:
            self._cnx.write(commands.new_ack_response(cmd.consumer_id, request_id))

    def handle_redeliver(self, frame: Frame) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the listed entries (all of the consumer's when none is listed)."""
        cmd = frame.command.redeliverUnacknowledgedMessages
        consumer = self._consumer(cmd.consumer_id, None, "REDELIVER_UNACKNOWLEDGED_MESSAGES")
        if consumer is not None:
            ids = [position_of(m) for m in cmd.message_ids] or None
            consumer.subscription.redeliver_unacknowledged(consumer, ids)

    # ------------------------------------------------------------------ closing
    def handle_close_consumer(self, frame: Frame) -> None:
        """CLOSE_CONSUMER: detach the consumer (or mark a pending one closed) and answer SUCCESS."""
        cmd = frame.command.close_consumer
        consumer = self._consumers.close(cmd.consumer_id)
        if consumer is not None:
            self.detach(consumer)
        self._cnx.write(commands.new_success(cmd.request_id))

    def handle_unsubscribe(self, frame: Frame) -> None:
        """UNSUBSCRIBE: delete the subscription (and its cursor) if this is its only consumer, else
        ConsumerBusy."""
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
        self._cnx.spawn(self._unsubscribe(consumer, cmd.request_id))

    async def _unsubscribe(self, consumer: Consumer, request_id: int) -> None:
        self._consumers.close(consumer.consumer_id)
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        try:
            await subscription.topic.delete_subscription(subscription.name)
        except QuasarError as exc:
            self._reply_error(request_id, exc)
            return
        self._cnx.write(commands.new_success(request_id))

    def send_close_consumer(self, consumer_id: int) -> None:
        """Broker-initiated CLOSE_CONSUMER (seek, unload): the client re-subscribes by itself."""
        self._consumers.close(consumer_id)
        self._cnx.write(commands.new_close_consumer(consumer_id, 0))

    def detach(self, consumer: Consumer) -> None:
        """Take ``consumer`` off its subscription (a reader's subscription goes with its last consumer)."""
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        subscription.drop_if_idle()

    def close_all(self) -> None:
        """The connection closed: detach every consumer."""
        for consumer in self._consumers.clear():
            self.detach(consumer)

    # ------------------------------------------------------------------ SEEK and queries
    def handle_seek(self, frame: Frame) -> None:
        """SEEK: as Pulsar ``PersistentSubscription.resetCursor``, disconnect the consumers, move the cursor and
        answer SUCCESS; the client re-subscribes and reads from the new position (reference §6.15)."""
        cmd = frame.command.seek
        consumer = self._consumer(cmd.consumer_id, cmd.request_id, "SEEK")
        if consumer is None:
            return
        subscription = consumer.subscription
        try:
            if not isinstance(subscription, Subscription):
                raise NotAllowedError("Seek is not supported on non-persistent topics")
            target = seek_target(subscription.topic, cmd)
        except QuasarError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        subscription.close_consumers()
        subscription.cursor.reset_cursor(target)
        if not subscription.durable:
            # A reader's subscription outlives the seek so that its re-subscribe finds the reset cursor: after a
            # seek by publish time the client re-subscribes from its old start id, not from the sought entry.
            # Dropped later if the reader never comes back.
            subscription.drop_if_idle_after(NON_DURABLE_SEEK_GRACE_S)
        self._cnx.write(commands.new_success(cmd.request_id))

    def handle_get_last_message_id(self, frame: Frame) -> None:
        """GET_LAST_MESSAGE_ID: the last entry (with its largest batch index) and the mark-delete position."""
        cmd = frame.command.getLastMessageId
        consumer = self._consumer(cmd.consumer_id, cmd.request_id, "GET_LAST_MESSAGE_ID")
        if consumer is None:
            return
        subscription = consumer.subscription
        topic = subscription.topic
        try:
            ledger_id, entry_id, batch_index = topic.last_message_id()
            if isinstance(subscription, Subscription) and subscription.read_compacted:
                persistent = subscription.topic
                compacted = compacted_last_message_id(
                    persistent.compacted_view, persistent.ledger.last_confirmed_entry
                )
                ledger_id, entry_id, batch_index = compacted or (ledger_id, entry_id, batch_index)
        except QuasarError as exc:
            self._reply_error(cmd.request_id, exc)
            return
        # consumer_mark_delete_position for every subscription, durable or not, when its ledger id is >= 0
        # (Pulsar ServerCnx); the C++ client compares it with the last id in an inclusive reader's
        # hasMessageAvailable.
        mark_delete = None
        if isinstance(subscription, Subscription):
            md = subscription.cursor.mark_delete_position
            mark_delete = (md.ledger_id, md.entry_id) if md.ledger_id >= 0 else None
        self._cnx.write(
            commands.new_get_last_message_id_response(
                cmd.request_id, ledger_id, entry_id, topic.partition_index, batch_index, mark_delete
            )
        )

    def handle_consumer_stats(self, frame: Frame) -> None:
        """CONSUMER_STATS: permits, unacked messages, sub type and backlog of the consumer."""
        cmd = frame.command.consumerStats
        consumer = self._consumers.get(cmd.consumer_id)
        if consumer is None:
            error = ConsumerNotFoundError(f"Consumer {cmd.consumer_id} not found")
            self._cnx.write(commands.new_consumer_stats_error(cmd.request_id, error.server_error, str(error)))
            return
        subscription = consumer.subscription
        sub_type = subscription.sub_type
        self._cnx.write(
            commands.new_consumer_stats_response(
                cmd.request_id,
                consumer_name=consumer.consumer_name,
                available_permits=max(consumer.permits, 0),
                unacked_messages=consumer.unacked_messages,
                address=self._cnx.remote_address,
                connected_since=str(consumer.connected_since_ms),
                type=sub_type.name if sub_type is not None else "",
                msg_backlog=subscription.cursor.number_of_entries_in_backlog
                if isinstance(subscription, Subscription)
                else 0,
            )
        )

    def _reply_error(self, request_id: int, exc: QuasarError) -> None:
        code, message = server_error_of(exc)
        self._cnx.write(commands.new_error(request_id, code, message))
