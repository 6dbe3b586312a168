"""Consumer-side command handlers of ServerCnx: SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES,
CLOSE_CONSUMER, UNSUBSCRIBE, SEEK, GET_LAST_MESSAGE_ID and CONSUMER_STATS (reference/pulsar-protocol.md §6).

A mixin of :class:`quasar.broker.handlers.CommandHandlers`, which supplies the connection state, ``write`` and
``_reply_error``; the same reply rules hold (every required field set, errors as ERROR with the ServerError code).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from quasar.broker import errors as codes
from quasar.broker.consumer import Consumer
from quasar.broker.errors import ConsumerBusyError, error_of
from quasar.broker.key_shared_dispatcher import KeySharedMeta
from quasar.broker.subscription import SubType, ack_set_bits
from quasar.errors import QuasarError
from quasar.ledger.position import Position
from quasar.protocol import TopicName, commands

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.config import BrokerConfig
    from quasar.protocol.decoder import Frame

log = logging.getLogger("quasar.broker.handlers")

NON_DURABLE_SEEK_GRACE_S = 60.0
"""Seconds a reader's subscription waits for the reader to re-subscribe after a SEEK."""

INT64_MAX = (1 << 63) - 1
_U64 = 1 << 64
ACK_CUMULATIVE = 1


def signed64(value: int) -> int:
    """uint64 on the wire -> signed int64 (MessageId.earliest arrives as 2^64-1, reference §2)."""
    return value - _U64 if value >= 1 << 63 else value


def position_of(message_id: Any) -> Position:
    """Position of a MessageIdData (signed ledger and entry ids; earliest arrives as -1, -1)."""
    return Position(signed64(message_id.ledgerId), signed64(message_id.entryId))


class ConsumerHandlers:
    """Consumer-side handlers, mixed into CommandHandlers."""

    service: BrokerService
    config: BrokerConfig
    consumers: dict[int, Consumer]
    closed_consumer_ids: set[int]
    pending_consumer_ids: set[int]
    remote_address: str

    def write(self, frame: bytes) -> None: ...
    def spawn(self, coro: Any) -> None: ...
    def detach_consumer(self, consumer: Consumer) -> None: ...
    def _reply_error(self, request_id: int, exc: Exception) -> None: ...

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
        if cmd.consumer_id in self.pending_consumer_ids:
            self.write(
                commands.new_error(
                    cmd.request_id, codes.SERVICE_NOT_READY, "Consumer is already being created on the connection"
                )
            )
            return
        # loading the topic and creating the cursor touch the metadata store: off the frame path
        self.pending_consumer_ids.add(cmd.consumer_id)
        self.closed_consumer_ids.discard(cmd.consumer_id)  # present again after the wait: closed meanwhile
        self.spawn(self._subscribe(cmd))

    async def _subscribe(self, cmd: Any) -> None:
        try:
            await self._subscribe_now(cmd)
        finally:
            self.pending_consumer_ids.discard(cmd.consumer_id)

    async def _subscribe_now(self, cmd: Any) -> None:
        subscription = None
        try:
            if not cmd.subscription:
                raise codes.NotAllowedError("Empty subscription name")
            topic = await self.service.get_or_create_topic(TopicName.parse(cmd.topic))
            durable = cmd.durable if cmd.HasField("durable") else True
            start = None
            if not durable and topic.is_persistent and cmd.HasField("start_message_id"):
                start = self._reader_start(topic, position_of(cmd.start_message_id), cmd.initialPosition)
            subscription = await topic.get_or_create_subscription(
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
        if cmd.consumer_id in self.closed_consumer_ids:  # CLOSE_CONSUMER arrived while it was being created
            self.detach_consumer(consumer)
            self.write(commands.new_error(cmd.request_id, codes.SERVICE_NOT_READY, "Consumer was closed"))
            return
        self.consumers[cmd.consumer_id] = consumer
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
                code, message = error_of(exc)
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
        elif cmd.consumer_id in self.pending_consumer_ids:
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
