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
* Connection loss or CLOSE_CONSUMER (also the broker's answer to SEEK): the queue of this consumer is cleared
  and it re-subscribes with the same consumer id (readers from the last id handed out) and a fresh FLOW.

The consumer is composed of small parts, each with its own state: the receiver queue
(:class:`~quasar.client.receiver_queue.ReceiverQueue`, its own or a multi-topic parent's), flow control
(:class:`~quasar.client.consumer_flow.FlowControl`), acknowledgements
(:class:`~quasar.client.consumer_acks.Acknowledger`: grouping, batch acks, negative acks, ack timeout), the
delivery filter (:class:`~quasar.client.consumer_incoming.DeliveryFilter`), chunk reassembly
(:class:`~quasar.client.chunking.ChunkAssembler`), the dead-letter and retry-letter handlers
(:mod:`quasar.client.dead_letter`, :mod:`quasar.client.retry_letter`) and a task owner for the reconnect,
timer and listener tasks; ``close`` flushes, cancels and closes each.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Coroutine
from typing import Any

from quasar.protocol import (
    LATEST,
    AckType,
    MessageId,
    ProtocolError,
    SubType,
    commands,
    decompress,
    parse_headers_and_payload,
    pb,
)
from quasar.protocol.ack_set import ack_set_bits, to_int64

from ._tasks import TaskOwner
from .chunking import ChunkAssembler
from .client_cnx import ClientCnx
from .config import ConsumerConfig
from .connection_pool import retry_until
from .consumer_acks import Acknowledger
from .consumer_flow import FlowControl
from .consumer_incoming import DeliveryFilter
from .context import ClientContext
from .entries import EntryDelivery
from .errors import AlreadyClosedError, ClientError, InvalidMessageError
from .message import Message, ReceivedEntry, unpack_batch
from .negative_acks import UnackedMessageTracker
from .op_send import message_id as _message_id
from .receiver_queue import ReceiverQueue
from .retry_letter import letter_handlers

__all__ = ["Consumer"]

log = logging.getLogger("quasar.client")

#: CommandAck.ValidationError
_DECOMPRESSION_ERROR = 1
_CHECKSUM_MISMATCH = 2
_BATCH_DESERIALIZE_ERROR = 3
_SHARED_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})
_parse_metadata = pb.MessageMetadata.FromString


class Consumer:
    """Consumer of one topic or partition (create it with ``AsyncClient.subscribe``).

    Args:
        context: the client (:class:`~quasar.client.context.ClientContext`).
        topic / subscription / config: what to subscribe, how.
        partition: partition index, -1 when the topic is not partitioned.
        durable: False for a reader's non-durable subscription.
        start_message_id / start_inclusive: where a reader starts (dropped below it).
        sink: the receiver queue of a multi-topic parent to deliver into (None: the consumer's own).
        deliver_entries: queue whole entries (:mod:`quasar.client.entries`) instead of messages.

    Attributes:
        topic, subscription_name, consumer_name, consumer_id, partition (-1 if not a partition), config.
        queue: the :class:`ReceiverQueue` this consumer delivers into (its own, or its parent's).
    """

    def __init__(
        self,
        context: ClientContext,
        topic: str,
        subscription: str,
        config: ConsumerConfig,
        *,
        partition: int = -1,
        durable: bool = True,
        start_message_id: MessageId | None = None,
        start_inclusive: bool = False,
        sink: ReceiverQueue | None = None,
        deliver_entries: bool = False,
    ) -> None:
        self._context = context
        self.topic = topic
        self.subscription_name = subscription
        self.config = config
        self.partition = partition
        self.consumer_id: int = context.next_consumer_id()
        self.consumer_name = config.consumer_name or ("" if not durable else secrets.token_hex(5))
        self._durable = durable
        self._cnx: ClientCnx | None = None
        self._state = "connecting"
        self._ready = asyncio.Event()
        self._tasks = TaskOwner(f"consumer {topic}")
        timeout = config.unacked_messages_timeout_ms or 0
        unacked = UnackedMessageTracker(timeout) if timeout > 0 else None
        self._shared = config.consumer_type.sub_type in _SHARED_TYPES
        self._flow = FlowControl(
            self.consumer_id, config.receiver_queue_size, unacked=unacked, track_last_dequeued=not durable
        )
        self._acker = Acknowledger(
            self.consumer_id, topic, config, shared=self._shared, unacked=unacked, ready=self._ready
        )
        self._filter = DeliveryFilter(self._acker, self._flow, start_message_id, start_inclusive)
        self._own_queue = sink is None
        self.queue = (
            sink if sink is not None else ReceiverQueue(f"consumer on {topic}", self._flow.on_empty_receive)
        )
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message, config.expire_time_of_incomplete_chunked_message_ms
        )
        self._dead_letter, self._retry_letter = letter_handlers(
            config, topic, subscription, acknowledge=self.acknowledge, redeliver=self._acker.redeliver,
            create_producer=context.create_producer, tasks=self._tasks, give_back=self._flow.give_back,
        )  # fmt: skip
        self._receipts = config.ack_receipt_enabled
        self._entries = EntryDelivery(self, self._flow, self._filter, self.queue) if deliver_entries else None

    # ------------------------------------------------------------------------------- properties --

    @property
    def is_connected(self) -> bool:
        """True while subscribed on a live connection."""
        return self._state == "ready"

    @property
    def last_dequeued(self) -> MessageId | None:
        """Id of the message handed out last by a non-durable consumer (reader); None before the first."""
        return self._flow.last_dequeued

    @property
    def start_message_id(self) -> MessageId | None:
        """The start id of a reader (replaced by ``seek``; None after a seek by publish time)."""
        return self._filter.start_message_id

    # ------------------------------------------------------------------------------ subscribe --

    async def start(self) -> None:
        """Subscribe: LOOKUP, SUBSCRIBE and FLOW, retried with backoff until ``operation_timeout_seconds``
        (called by ``AsyncClient.subscribe``); then the redelivery timer (and the listener) tasks start.

        Raises:
            BrokerResponseError (e.g. ConsumerBusy), ConnectError, OperationTimeoutError.
        """
        deadline = time.monotonic() + self._context.config.operation_timeout_seconds
        await retry_until(deadline, self._subscribe_once, self._context.config, is_closed=self._is_closing)
        self._tasks.spawn(self._timer_loop(), name=f"consumer timers {self.topic}")
        if self.config.message_listener is not None and self._own_queue:
            self.start_listener(self.config.message_listener, self)

    def start_listener(self, listener: Any, target: Any) -> None:
        """Deliver every message to ``listener(target, message)`` in an owned task instead of ``receive``."""
        self._tasks.spawn(self.queue.listen(listener, target), name=f"message-listener {self.topic}")

    def _is_closing(self) -> bool:
        return self._state in ("closing", "closed")

    async def _subscribe_once(self) -> None:
        address = await self._context.lookup.lookup(self.topic)
        cnx: ClientCnx = await self._context.pool.get(address)
        request_id = cnx.next_request_id()
        start = None
        if not self._durable:
            start = self._flow.last_dequeued or self._filter.start_message_id or LATEST
        frame = commands.new_subscribe(
            self.topic,
            self.subscription_name,
            self.config.consumer_type.sub_type,
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
        self.queue.drop_from(self)
        self._cnx = cnx
        self._state = "ready"
        self._flow.attach(cnx)
        self._acker.attach(cnx)
        self._ready.set()

    def on_connection_closed(self, cnx: ClientCnx) -> None:
        """Connection port: ``cnx`` closed (or the broker sent CLOSE_CONSUMER); re-subscribe in an owned task."""
        if cnx is not self._cnx:
            return
        self._detach()
        if self._state == "ready":
            self._state = "connecting"
            self._tasks.spawn(self._reconnect(), name=f"reconnect {self.topic}")

    def _detach(self) -> None:
        self._cnx = None
        self._ready.clear()
        self._flow.detach()
        self._acker.detach()

    def on_active_consumer_change(self, is_active: bool) -> None:
        """Connection port: ACTIVE_CONSUMER_CHANGE (Failover); logged only."""
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

    def on_message(self, frame: Any) -> None:
        """Connection port: a MESSAGE for this consumer from the FrameDecoder (see the module docstring); its
        messages are queued."""
        cmd = frame.command.message
        mid = cmd.message_id
        ledger_id, entry_id = to_int64(mid.ledgerId), to_int64(mid.entryId)
        if frame.checksum_ok is False:
            self._checksum_mismatch(ledger_id, entry_id)
            return
        try:
            parsed = parse_headers_and_payload(frame.headers_and_payload)
        except ProtocolError as exc:
            log.warning("bad metadata on %s %d:%d: %s", self.topic, ledger_id, entry_id, exc)
            self._discard((ledger_id, entry_id), _BATCH_DESERIALIZE_ERROR)
            return
        md = parsed.metadata
        batch = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else None
        routing = (batch, md.num_chunks_from_msg, md.compression, md.uncompressed_size)
        self._on_entry(ledger_id, entry_id, cmd.redelivery_count, cmd.ack_set, md, parsed.payload, routing)

    def on_message_parts(
        self, ledger_id: int, entry_id: int, redelivery_count: int, checksum_ok: bool | None, metadata: bytes,
        payload: bytes, *routing: Any,
    ) -> None:  # fmt: skip
        """Connection port: a MESSAGE for this consumer decoded by the connection's fast path (no ack_set; the
        metadata bytes checked as ``parse_headers_and_payload`` does, parsed only when an accessor needs them);
        ``routing``: its num_messages_in_batch (None: not a batch), num_chunks_from_msg, compression and
        uncompressed_size. Its messages are queued."""
        if checksum_ok is False:
            self._checksum_mismatch(ledger_id, entry_id)
            return
        self._on_entry(ledger_id, entry_id, redelivery_count, None, metadata, payload, routing)

    def _checksum_mismatch(self, ledger_id: int, entry_id: int) -> None:
        log.warning("checksum mismatch on %s %d:%d; discarding", self.topic, ledger_id, entry_id)
        self._discard((ledger_id, entry_id), _CHECKSUM_MISMATCH)

    def _on_entry(
        self, ledger_id: int, entry_id: int, redelivery_count: int, ack_set: Any, metadata: Any,
        payload: bytes | memoryview, routing: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """One entry: ``metadata`` parsed or its bytes (see :class:`ReceivedEntry`), ``routing`` as in
        :meth:`on_message_parts`."""
        batch, chunks, compression, uncompressed_size = routing
        is_batch = batch is not None
        chunk_ids = None
        if not is_batch and chunks > 1:
            if metadata.__class__ is bytes:
                metadata = _parse_metadata(metadata)
            done = self._add_chunk(metadata, payload, ledger_id, entry_id)
            if done is None:
                return
            payload, chunk_ids = done.payload, done.chunk_ids
        if compression:
            try:
                payload = decompress(compression, payload, uncompressed_size)
            except ProtocolError as exc:
                log.warning("cannot decompress %s %d:%d: %s", self.topic, ledger_id, entry_id, exc)
                self._discard((ledger_id, entry_id), _DECOMPRESSION_ERROR)
                return
        count = batch if batch is not None else 0
        if self._entries is not None:
            self._entries.deliver(ledger_id, entry_id, metadata, payload, count, redelivery_count)
            return
        entry = ReceivedEntry(
            ledger_id,
            entry_id,
            self.partition,
            count,
            self.topic,
            metadata,
            redelivery_count,
            self,
            self._flow,
        )
        if is_batch:
            delivered = self._unpack(entry, payload, ack_set)
            if delivered is None:
                return
        else:
            if self._filter.filtered(ledger_id, entry_id, -1):
                self._flow.give_back(1)
                return
            message = Message(payload if isinstance(payload, bytes) else bytes(payload), entry)
            if chunk_ids:
                self._acker.chunk_ids[message.message_id()] = chunk_ids
            delivered = [message]
        if self._dead_letter is not None and self._dead_letter.remember(delivered, redelivery_count):
            return
        self.queue.enqueue_many(delivered)

    def _add_chunk(self, metadata: Any, payload: bytes | memoryview, ledger_id: int, entry_id: int) -> Any:
        """Add one chunk; the reassembled message once its last chunk arrived, else None."""
        done, dropped = self._chunks.add(
            metadata.uuid,
            metadata.chunk_id,
            metadata.num_chunks_from_msg,
            metadata.total_chunk_msg_size,
            payload,
            _message_id(ledger_id, entry_id, self.partition),
        )
        if dropped:
            self._drop_chunks(dropped)
        if done is None:
            self._flow.give_back(1)
        return done

    def _unpack(
        self, entry: ReceivedEntry, payload: bytes | memoryview, ack_set: Any
    ) -> list[Message] | None:
        """The messages of a batched entry that are delivered (None when the entry is discarded)."""
        unacked = ack_set_bits(ack_set) if ack_set else None
        keep = self._filter.batch_filter(entry.ledger_id, entry.entry_id, unacked)
        try:  # a memoryview (the FrameDecoder's path, which the fast path leaves to rare entries) is copied once
            delivered, skipped = unpack_batch(payload, entry, keep)
        except InvalidMessageError as exc:
            log.warning("bad batch on %s %d:%d: %s", self.topic, entry.ledger_id, entry.entry_id, exc)
            self._discard(entry.key, _BATCH_DESERIALIZE_ERROR)
            return None
        if delivered:
            self._acker.track_batch(entry.key, entry.batch_size, unacked)
        if skipped:
            self._flow.give_back(skipped)
        return delivered

    def _discard(self, entry: tuple[int, int], validation_error: int) -> None:
        cnx = self._cnx
        if cnx is not None:
            cnx.write(
                commands.new_ack(
                    self.consumer_id, [entry], AckType.Individual, validation_error=validation_error
                )
            )
        self._flow.give_back(1)

    def _drop_chunks(self, ids: list[MessageId]) -> None:
        if self.config.auto_ack_oldest_chunked_message_on_queue_full:
            self._acker.acknowledge_chunks(ids)
        self._flow.give_back(len(ids))

    # ---------------------------------------------------------------------------------- receive --

    def receive(self, timeout_millis: int | None = None) -> Coroutine[Any, Any, Message]:
        """The next message (awaitable), waiting up to ``timeout_millis`` ms (None = forever); see
        :meth:`ReceiverQueue.receive` for the errors."""
        return self.queue.receive(timeout_millis)

    def receive_nowait(self) -> Message | None:
        """The next message if one is queued, else None (AlreadyClosedError when closed)."""
        return self.queue.receive_nowait()

    def batch_receive(
        self, max_num_messages: int = 100, timeout_ms: int = 100
    ) -> Coroutine[Any, Any, list[Message]]:
        """Up to ``max_num_messages`` messages (awaitable); see :meth:`ReceiverQueue.batch_receive`."""
        return self.queue.batch_receive(max_num_messages, timeout_ms)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.queue.receive()
        except AlreadyClosedError:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------------------------------- acks --

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped; a batch entry is acked once all its items are). With
        ``ack_receipt_enabled`` it waits for the broker's ACK_RESPONSE.

        Raises:
            TypeError: not a Message / MessageId. AlreadyClosedError. BrokerResponseError (receipts only).
        """
        self._acker.acknowledge(message)
        if self._receipts:
            await self._acker.flush_with_receipt()

    def acknowledge_nowait(self, message: Message | MessageId) -> None:
        """:meth:`acknowledge` without waiting for a receipt (callable from the event loop thread only)."""
        self._acker.acknowledge(message)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to and including this one.

        Raises:
            ValueError: on a Shared / KeyShared subscription (Pulsar forbids cumulative acks there).
        """
        self._acker.acknowledge_cumulative(message)
        if self._receipts:
            await self._acker.flush_with_receipt()

    def acknowledge_cumulative_nowait(self, message: Message | MessageId) -> None:
        """:meth:`acknowledge_cumulative` without waiting for a receipt (event loop thread only)."""
        self._acker.acknowledge_cumulative(message)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery of the message's entry after ``negative_ack_redelivery_delay_ms``."""
        self._acker.negative_acknowledge(message)

    def negative_acknowledge_nowait(self, message: Message | MessageId) -> None:
        """:meth:`negative_acknowledge` (event loop thread only)."""
        self._acker.negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self, entries: list[tuple[int, int]] | None = None) -> None:
        """Send REDELIVER_UNACKNOWLEDGED_MESSAGES: the given entries on Shared/KeyShared, else all unacked."""
        self._acker.redeliver(entries)

    async def _timer_loop(self) -> None:
        tick = min(1.0, max(0.01, self.config.negative_ack_redelivery_delay_ms / 3000))
        if self.config.unacked_messages_timeout_ms:
            tick = min(tick, self.config.tick_duration_ms / 1000)
        while True:
            await asyncio.sleep(tick)
            due = self._acker.pop_due()
            if due and self._dead_letter is not None:
                due = await self._dead_letter.divert(due)
            if due:
                self._acker.redeliver(due)
            expired = self._chunks.expire()
            if expired:
                self._drop_chunks(expired)

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
        if isinstance(message, Message) and message.entry.consumer is not self:
            raise ValueError("message does not come from this consumer")
        await self._retry_letter.reconsume_later(message, delay_ms, properties)

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
        cnx = await self._ready_cnx()
        request_id = cnx.next_request_id()
        if isinstance(target, MessageId):
            frame = commands.new_seek(self.consumer_id, request_id, message_id=target)
            self._filter.start_message_id = target
        else:
            frame = commands.new_seek(self.consumer_id, request_id, message_publish_time=target)
            self._filter.start_message_id = None
        self._flow.forget_last_dequeued()
        self._acker.reset_grouping()
        self._ready.clear()
        await cnx.request(frame, request_id)
        self.queue.drop_from(self)
        if self._cnx is cnx and not cnx.is_closed:  # the broker did not disconnect us: re-subscribe ourselves
            self._detach()
            cnx.remove_consumer(self.consumer_id)
            self._state = "connecting"
            self._tasks.spawn(self._reconnect(), name=f"reconnect {self.topic}")
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)

    async def _ready_cnx(self) -> ClientCnx:
        """The connection once subscribed (waits up to ``operation_timeout_seconds``)."""
        self._check_open()
        await asyncio.wait_for(self._ready.wait(), self._context.config.operation_timeout_seconds)
        cnx = self._cnx
        assert cnx is not None
        return cnx

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message of the topic (GET_LAST_MESSAGE_ID); ledger/entry -1 when empty."""
        cnx = await self._ready_cnx()
        request_id = cnx.next_request_id()
        body = await cnx.request(commands.new_get_last_message_id(self.consumer_id, request_id), request_id)
        last = body.last_message_id
        return MessageId(
            to_int64(last.ledgerId),
            to_int64(last.entryId),
            self.partition,
            last.batch_index if last.HasField("batch_index") else -1,
        )

    async def unsubscribe(self) -> None:
        """Delete the subscription (UNSUBSCRIBE); the consumer is closed afterwards."""
        cnx = await self._ready_cnx()
        request_id = cnx.next_request_id()
        await cnx.request(commands.new_unsubscribe(self.consumer_id, request_id), request_id)
        await self._shutdown(send_close=False)

    async def close(self) -> None:
        """Flush pending acks, send CLOSE_CONSUMER and wait for SUCCESS."""
        if self._state in ("closing", "closed"):
            return
        await self._shutdown(send_close=True)

    async def _shutdown(self, *, send_close: bool) -> None:
        self._acker.close()
        self._state = "closing"
        if self._own_queue:
            self.queue.close()
        cnx = self._cnx
        if cnx is not None:
            if send_close and not cnx.is_closed:
                request_id = cnx.next_request_id()
                try:
                    await cnx.request(commands.new_close_consumer(self.consumer_id, request_id), request_id)
                except ClientError as exc:
                    log.info("close of consumer %s: %s", self.topic, exc)
            cnx.remove_consumer(self.consumer_id)
        self._detach()
        self._state = "closed"
        await self._tasks.aclose()
        if self._retry_letter is not None:
            await self._retry_letter.close()
        if self._dead_letter is not None:
            await self._dead_letter.close()
        self._context.forget(self)

    def _check_open(self) -> None:
        if self._state in ("closing", "closed"):
            raise AlreadyClosedError(f"consumer on {self.topic} is closed")
