"""Consumer of one topic or partition (Java/C++ ``ConsumerImpl``; reference/pulsar-protocol.md §6.8-6.17).

* SUBSCRIBE, then FLOW(receiver_queue_size); one permit per message handed to the application, a refill FLOW
  once half the queue was handed out; every dropped message gives its permit back.
* MESSAGE: checksum (a bad one is acked with ``validation_error=ChecksumMismatch`` and dropped, as the C++
  client), decompression, batch unpacking (items whose ``ack_set`` bit is clear are skipped), start-id filter
  (readers and after ``seek``), duplicates of acked ids dropped, chunk reassembly.
* Hot path (one entry -> many messages): the entry's shared facts go in one :class:`ReceivedEntry`; batch
  items are cut by :func:`unpack_batch` straight from the frame's bytes (their metadata parsed only when an
  accessor needs it, ids built on demand); duplicate filtering is decided once per entry when it can be; the
  whole entry is queued in one step.
* Acks go through :class:`AckGroupingTracker` (flushed every ``acknowledgements_group_time_ms``) and
  :class:`BatchAcker`; negative acks through :class:`NegativeAcksTracker`; ack timeout through
  :class:`UnackedMessageTracker`; the dead-letter policy is in :mod:`quasar.client.dead_letter`,
  ``reconsume_later`` (``retry_enable``) in :mod:`quasar.client.retry_letter`.
* Connection loss or CLOSE_CONSUMER (also the broker's answer to SEEK): the queue of this consumer is cleared
  and it re-subscribes with the same consumer id (readers from the last id handed out) and a fresh FLOW.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from quasar.protocol import (
    EARLIEST,
    INT64_MAX,
    LATEST,
    MessageId,
    ProtocolError,
    commands,
    decompress,
    parse_headers_and_payload,
)

from .ack_grouping import AckGroupingTracker, BatchAcker
from .chunking import ChunkAssembler
from .client_cnx import ClientCnx
from .config import ConsumerConfig, ConsumerType
from .connection_pool import retry_until
from .consumer_acks import ConsumerAcks
from .consumer_base import ConsumerBase
from .dead_letter import DeadLetterHandler
from .errors import AlreadyClosedError, ClientError, InvalidMessageError
from .message import Message, ReceivedEntry, unpack_batch
from .negative_acks import NegativeAcksTracker, UnackedMessageTracker
from .op_send import message_id as _message_id
from .retry_letter import RetryLetterHandler, retry_policy

__all__ = ["Consumer"]

log = logging.getLogger("quasar.client")

_U64 = 1 << 64
_CHECKSUM_MISMATCH = 2  # CommandAck.ValidationError
_BATCH_DESERIALIZE_ERROR = 3
_DECOMPRESSION_ERROR = 1


def _int64(value: int) -> int:
    return value - _U64 if value > INT64_MAX else value


def _skip_all(index: int) -> bool:
    return False


class Consumer(ConsumerAcks, ConsumerBase):
    """Consumer of one topic or partition (create it with ``AsyncClient.subscribe``).

    Attributes:
        topic, subscription_name, consumer_name, consumer_id, partition (-1 if not a partition).
    """

    def __init__(
        self,
        context: Any,
        topic: str,
        subscription: str,
        config: ConsumerConfig,
        *,
        partition: int = -1,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        start_inclusive: bool = False,
        sink: ConsumerBase | None = None,
    ) -> None:
        super().__init__(f"consumer {topic}")
        self._context = context
        self.topic = topic
        self.subscription_name = subscription
        self.config = config
        self.partition = partition
        self.consumer_id: int = context.next_consumer_id()
        self.consumer_name = config.consumer_name or ("" if not durable else secrets.token_hex(5))
        self._durable = durable
        self._start_message_id = start_message_id
        self._start_inclusive = start_inclusive
        self._last_dequeued: MessageId | None = None
        self._sink: ConsumerBase = sink if sink is not None else self
        self._cnx: ClientCnx | None = None
        self._permits = 0
        self._ready = asyncio.Event()
        self._acks = AckGroupingTracker(config.acknowledgements_group_time_ms, config.ack_group_max_size)
        self._batch_acker = BatchAcker()
        self._nacks = NegativeAcksTracker(
            config.negative_ack_redelivery_delay_ms, config.negative_ack_backoff
        )
        timeout = config.unacked_messages_timeout_ms or 0
        self._unacked = UnackedMessageTracker(timeout) if timeout > 0 else None
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message, config.expire_time_of_incomplete_chunked_message_ms
        )
        self._chunk_ids: dict[MessageId, list[MessageId]] = {}
        self._ack_timer: asyncio.TimerHandle | None = None
        policy = config.dead_letter_policy
        if config.retry_enable:  # filled by AsyncClient.subscribe already; this covers a direct construction
            policy = retry_policy(policy, topic, subscription)
        self._dead_letter = DeadLetterHandler(self, policy) if policy is not None else None
        self._retry_letter = (
            RetryLetterHandler(self, self._dead_letter)
            if config.retry_enable and self._dead_letter is not None
            else None
        )
        self._shared = config.consumer_type in (ConsumerType.Shared, ConsumerType.KeyShared)
        queue_size = config.receiver_queue_size
        self._refill_threshold = max(1, queue_size // 2)
        #: hand-out only counts a permit: durable, no ack timeout, a receiver queue
        self._plain_hand_out = durable and self._unacked is None and queue_size > 0

    # ------------------------------------------------------------------------------ subscribe --

    async def _start(self) -> None:
        deadline = time.monotonic() + self._context.config.operation_timeout_seconds
        await retry_until(deadline, self._subscribe_once, self._context.config, is_closed=self._is_closing)
        self._tasks.spawn(self._timer_loop(), name=f"consumer timers {self.topic}")
        if self.config.message_listener is not None and self._sink is self:
            self._start_listener(self.config.message_listener, self)

    def _is_closing(self) -> bool:
        return self._state in ("closing", "closed")

    async def _subscribe_once(self) -> None:
        address = await self._context.lookup.lookup(self.topic)
        cnx: ClientCnx = await self._context.pool.get(address)
        request_id = cnx.next_request_id()
        start = None
        if not self._durable:
            start = self._last_dequeued or self._start_message_id or LATEST
        frame = commands.new_subscribe(
            self.topic,
            self.subscription_name,
            int(self.config.consumer_type),
            self.consumer_id,
            request_id,
            consumer_name=self.consumer_name,
            durable=self._durable,
            start_message_id=start,
            metadata=self.config.properties,
            read_compacted=self.config.is_read_compacted,
            initial_position=int(self.config.initial_position),
            replicate_subscription_state=self.config.replicate_subscription_state_enabled,
            subscription_properties=self.config.subscription_properties,
        )
        cnx.register_consumer(self.consumer_id, self)
        try:
            await cnx.request(frame, request_id)
        except BaseException:
            cnx.remove_consumer(self.consumer_id)
            raise
        if self._is_closing():
            return
        # C++ handleCreateConsumer: clear the queue, then FLOW(receiver_queue_size)
        self._sink._drop_queued(self)
        self._batch_acker.clear()
        self._cnx = cnx
        self._state = "ready"
        self._permits = 0
        if self.config.receiver_queue_size > 0:
            cnx.write(commands.new_flow(self.consumer_id, self.config.receiver_queue_size))
        self._flush_acks()
        self._ready.set()

    def _on_connection_closed(self, cnx: ClientCnx) -> None:
        if cnx is not self._cnx:
            return
        self._cnx = None
        self._ready.clear()
        if self._state == "ready":
            self._state = "connecting"
            self._tasks.spawn(self._reconnect(), name=f"reconnect {self.topic}")

    def _on_active_consumer_change(self, is_active: bool) -> None:
        log.debug("consumer %s on %s active=%s", self.consumer_name, self.topic, is_active)

    async def _reconnect(self) -> None:
        config = self._context.config
        backoff = config.initial_backoff_interval_ms / 1000
        while self._state == "connecting":
            await asyncio.sleep(backoff)
            try:
                await self._subscribe_once()
                return
            except (ClientError, OSError) as exc:
                log.info("consumer %s reconnect failed: %s", self.topic, exc)
            backoff = min(backoff * 2, config.max_backoff_interval_ms / 1000)

    # ------------------------------------------------------------------------------- messages --

    def _on_message(self, frame: Any) -> None:
        cmd = frame.command.message
        mid = cmd.message_id
        ledger_id, entry_id = _int64(mid.ledgerId), _int64(mid.entryId)
        if frame.checksum_ok is False:
            log.warning("checksum mismatch on %s %d:%d; discarding", self.topic, ledger_id, entry_id)
            self._discard((ledger_id, entry_id), _CHECKSUM_MISMATCH)
            return
        try:
            parsed = parse_headers_and_payload(frame.headers_and_payload)
        except ProtocolError as exc:
            log.warning("bad metadata on %s %d:%d: %s", self.topic, ledger_id, entry_id, exc)
            self._discard((ledger_id, entry_id), _BATCH_DESERIALIZE_ERROR)
            return
        metadata = parsed.metadata
        payload: bytes | memoryview = parsed.payload
        partition = self.partition
        is_batch = metadata.HasField("num_messages_in_batch")
        chunk_ids = None
        if not is_batch and metadata.num_chunks_from_msg > 1:
            chunk_id = _message_id(ledger_id, entry_id, partition)
            done, dropped = self._chunks.add(
                metadata.uuid,
                metadata.chunk_id,
                metadata.num_chunks_from_msg,
                metadata.total_chunk_msg_size,
                payload,
                chunk_id,
            )
            if dropped:
                self._drop_chunks(dropped)
            if done is None:
                self._increase_permits(1)
                return
            payload = done.payload
            chunk_ids = done.chunk_ids
        if metadata.compression:
            try:
                payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
            except ProtocolError as exc:
                log.warning("cannot decompress %s %d:%d: %s", self.topic, ledger_id, entry_id, exc)
                self._discard((ledger_id, entry_id), _DECOMPRESSION_ERROR)
                return
        redelivery_count = cmd.redelivery_count
        count = metadata.num_messages_in_batch if is_batch else 0
        entry = ReceivedEntry(
            ledger_id, entry_id, partition, count, self.topic, metadata, redelivery_count, self
        )
        if is_batch:
            unacked = None
            if cmd.ack_set:
                unacked = 0
                for word_index, word in enumerate(cmd.ack_set):
                    unacked |= (word & 0xFFFFFFFFFFFFFFFF) << (64 * word_index)
            keep = self._batch_filter(ledger_id, entry_id, unacked)
            offset = 0
            if isinstance(payload, memoryview):  # the rest of the frame's bytes: read those, no copy
                whole = payload.obj
                offset = len(whole) - payload.nbytes if isinstance(whole, bytes) else -1
                if offset >= 0 and whole[offset : offset + 16] == payload[:16]:
                    payload = whole
                else:
                    offset = 0
                    payload = bytes(payload)
            try:
                delivered, skipped = unpack_batch(payload, entry, keep, offset)
            except InvalidMessageError as exc:
                log.warning("bad batch on %s %d:%d: %s", self.topic, ledger_id, entry_id, exc)
                self._discard((ledger_id, entry_id), _BATCH_DESERIALIZE_ERROR)
                return
            if delivered:
                self._batch_acker.track(entry.key, count, unacked)
            if skipped:
                self._increase_permits(skipped)
        else:
            if self._filtered(ledger_id, entry_id, -1):
                self._increase_permits(1)
                return
            message = Message(payload if isinstance(payload, bytes) else bytes(payload), entry)
            if chunk_ids:
                self._chunk_ids[message.message_id()] = chunk_ids
            delivered = [message]
        if self._dead_letter is not None and self._dead_letter.remember(delivered, redelivery_count):
            return
        self._sink._enqueue_many(delivered)

    def _batch_filter(
        self, ledger_id: int, entry_id: int, unacked: int | None
    ) -> Callable[[int], bool] | None:
        """``keep(index)`` for the items of a batch, or None when all are kept: items whose ``ack_set`` bit is
        clear are dropped, and (seed 001 isDuplicate) items before the start id or already acked. Whether an
        item is a duplicate is decided once per entry unless the entry reaches the last cumulative ack."""
        per_item = (self._last_dequeued or self._start_message_id) is not None
        acks = self._acks
        if not per_item and acks.active:
            cumulative = acks.last_cumulative
            if cumulative is None or (ledger_id, entry_id) > cumulative[:2]:
                if acks.is_duplicate(ledger_id, entry_id):
                    return _skip_all
            else:
                per_item = True
        if not per_item and unacked is None:
            return None
        filtered = self._filtered

        def keep(index: int) -> bool:
            if unacked is not None and not (unacked >> index) & 1:
                return False
            return not per_item or not filtered(ledger_id, entry_id, index)

        return keep

    def _filtered(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        start = self._last_dequeued or self._start_message_id
        if start is not None and start != EARLIEST and start.ledger_id >= 0:
            key = (ledger_id, entry_id, batch_index)
            start_key = (start.ledger_id, start.entry_id, start.batch_index)
            inclusive = self._start_inclusive and self._last_dequeued is None
            if key < start_key or (key == start_key and not inclusive):
                return True
            if start.batch_index < 0 and key[:2] == start_key[:2] and not inclusive:
                return True
        return self._acks.is_duplicate(ledger_id, entry_id, batch_index)

    def _discard(self, entry: tuple[int, int], validation_error: int) -> None:
        cnx = self._cnx
        if cnx is not None:
            cnx.write(commands.new_ack(self.consumer_id, [entry], 0, validation_error=validation_error))
        self._increase_permits(1)

    def _drop_chunks(self, ids: list[MessageId]) -> None:
        if self.config.auto_ack_oldest_chunked_message_on_queue_full:
            for message_id in ids:
                self._acks.add_individual((message_id.ledger_id, message_id.entry_id))
            self._schedule_ack_flush()
        self._increase_permits(len(ids))

    def _on_handed_out(self, message: Message) -> None:
        if self._plain_hand_out:
            permits = self._permits + 1
            if permits >= self._refill_threshold:
                self._increase_permits(1)
            else:
                self._permits = permits
            return
        if not self._durable:
            self._last_dequeued = message.message_id()
        if self._unacked is not None:
            self._unacked.add(message._entry.key)
        self._increase_permits(1)

    def _on_handed_out_many(self, messages: list[Message]) -> None:
        """:meth:`_on_handed_out` for several messages of this consumer, in order."""
        if self._plain_hand_out:
            self._increase_permits(len(messages))
            return
        for message in messages:
            self._on_handed_out(message)

    def _increase_permits(self, count: int) -> None:
        if self.config.receiver_queue_size == 0:
            return
        self._permits += count
        if self._permits >= self._refill_threshold:
            cnx = self._cnx
            if cnx is not None:
                cnx.write(commands.new_flow(self.consumer_id, self._permits))
                self._permits = 0

    def _on_empty_receive(self) -> None:
        if self.config.receiver_queue_size == 0 and self._cnx is not None:
            self._cnx.write(commands.new_flow(self.consumer_id, 1))

    # ------------------------------------------------------------------------- seek/last id/close --

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or to a publish time (int, ms since the epoch).

        The broker disconnects the consumer and the client re-subscribes (reference §6.15); with
        ``start_message_id_inclusive=False`` the sought message itself is not delivered again.
        """
        if isinstance(target, bool) or not isinstance(target, (MessageId, int)):
            raise TypeError(
                f"seek target must be a MessageId or an int timestamp (ms), got {type(target).__name__}"
            )
        self._check_open()
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)
        cnx = self._cnx
        assert cnx is not None
        request_id = cnx.next_request_id()
        if isinstance(target, MessageId):
            frame = commands.new_seek(self.consumer_id, request_id, message_id=target)
            self._start_message_id = target
        else:
            frame = commands.new_seek(self.consumer_id, request_id, message_publish_time=target)
            self._start_message_id = None
        self._last_dequeued = None
        self._acks = AckGroupingTracker(
            self.config.acknowledgements_group_time_ms, self.config.ack_group_max_size
        )
        self._ready.clear()
        await cnx.request(frame, request_id)
        self._sink._drop_queued(self)
        if self._cnx is cnx and not cnx.is_closed:  # the broker did not disconnect us: re-subscribe ourselves
            self._cnx = None
            cnx.remove_consumer(self.consumer_id)
            self._state = "connecting"
            self._tasks.spawn(self._reconnect(), name=f"reconnect {self.topic}")
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)

    async def reconsume_later(
        self, message: Message, delay_ms: int, properties: dict[str, str] | None = None
    ) -> None:
        """Retry ``message`` later through the retry-letter topic, then acknowledge it (Java
        ``Consumer.reconsumeLater(msg, customProperties, delay, MILLISECONDS)``; see
        :mod:`quasar.client.retry_letter`).

        Args:
            message: a Message received from this consumer.
            delay_ms: delivery delay of the copy, ms (< 0 counts as 0; honoured on Shared subscriptions).
            properties: custom properties added to the copy (they override the message's own).

        Raises:
            TypeError: bad arguments. ValueError: the message is not from this consumer.
            ClientError: the consumer was not created with ``retry_enable=True``. AlreadyClosedError.
            Publishing / ack errors (ClientError subclasses); the message is then redelivered.
        """
        self._check_open()
        if self._retry_letter is None:
            raise ClientError(
                "reconsume_later needs a consumer subscribed with retry_enable=True (Java enableRetry)"
            )
        if isinstance(message, Message) and message._consumer is not self:
            raise ValueError("message does not come from this consumer")
        await self._retry_letter.reconsume_later(message, delay_ms, properties)

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message of the topic (GET_LAST_MESSAGE_ID); ledger/entry -1 when empty."""
        self._check_open()
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)
        cnx = self._cnx
        assert cnx is not None
        request_id = cnx.next_request_id()
        body = await cnx.request(commands.new_get_last_message_id(self.consumer_id, request_id), request_id)
        last = body.last_message_id
        return MessageId(
            _int64(last.ledgerId),
            _int64(last.entryId),
            self.partition,
            last.batch_index if last.HasField("batch_index") else -1,
        )

    async def unsubscribe(self) -> None:
        """Delete the subscription (UNSUBSCRIBE); the consumer is closed afterwards."""
        self._check_open()
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)
        cnx = self._cnx
        assert cnx is not None
        request_id = cnx.next_request_id()
        await cnx.request(commands.new_unsubscribe(self.consumer_id, request_id), request_id)
        await self._shutdown(send_close=False)

    async def close(self) -> None:
        """Flush pending acks, send CLOSE_CONSUMER and wait for SUCCESS."""
        if self._state in ("closing", "closed"):
            return
        await self._shutdown(send_close=True)

    async def _shutdown(self, *, send_close: bool) -> None:
        self._flush_acks()
        self._state = "closing"
        cnx = self._cnx
        if cnx is not None:
            if send_close and not cnx.is_closed:
                request_id = cnx.next_request_id()
                try:
                    await cnx.request(commands.new_close_consumer(self.consumer_id, request_id), request_id)
                except ClientError as exc:
                    log.info("close of consumer %s: %s", self.topic, exc)
            cnx.remove_consumer(self.consumer_id)
        self._cnx = None
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        self._state = "closed"
        self._wake_all()
        await self._tasks.aclose()
        if self._retry_letter is not None:
            await self._retry_letter.close()
        if self._dead_letter is not None:
            await self._dead_letter.close()
        self._context._forget(self)

    @property
    def is_connected(self) -> bool:
        """True while subscribed on a live connection."""
        return self._state == "ready"

    def _check_open(self) -> None:
        if self._state in ("closing", "closed"):
            raise AlreadyClosedError(f"consumer on {self.topic} is closed")
