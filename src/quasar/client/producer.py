"""Producer of one topic or partition: sequence ids, batching, compression, chunking, pending queue, receipts.

Follows seed 000 and the Java/C++ ``ProducerImpl`` (reference/pulsar-protocol.md §6.6-6.7, §7, §8.6):

* Sequence ids are producer-scoped: ``initial_sequence_id`` or the broker's ``last_sequence_id + 1`` from
  PRODUCER_SUCCESS, then +1 per message. ``last_sequence_id_pushed`` (highest id written to the connection) and
  ``last_sequence_id_published`` (highest id with a receipt) drive the seed's rule: a message whose (user-set)
  sequence id is <= ``last_sequence_id_pushed`` may be a duplicate and goes out in a batch of its own.
* Each SEND is an :class:`OpSendMsg` in the pending queue. SEND_RECEIPTs arrive in order and are matched to the
  head: a smaller sequence id is stale and ignored, a larger one closes the connection (then everything
  pending is resent). A batch of n completes its n waiters with ``MessageId(ledger, entry, partition, i, n)``
  (built and handed out by the compiled ``complete_receipt``, twin in ``quasar.client._codec_py``).
* ``max_pending_messages`` counts messages from ``send`` until their receipt; when full, ``send`` waits
  (``block_if_queue_full``) or raises :class:`ProducerQueueIsFullError`.
* Each message has a *waiter* (:mod:`quasar.client.op_send`): a Future for the asyncio API, the user's callback
  for the blocking facade (:meth:`Producer.send_with_callback`, no Future per message), or None. A message given
  as bare bytes takes a short path into the batch (its SingleMessageMetadata is only payload_size and
  sequence_id, from a pre-built header).
* ``send_timeout_millis``: when the oldest pending message is older, every pending message fails with
  :class:`SendTimeoutError` (C++ ``handleSendTimeout``).
* Connection loss or CLOSE_PRODUCER: reconnect with exponential backoff (LOOKUP, PRODUCER with the same
  producer id, the assigned name and ``epoch + 1``) and resend every pending op in order, so a broker with
  deduplication stores nothing twice.
* Batching (off by default, as in the Python client) uses :class:`BatchMessageContainer`; a batch is sent when
  full or ``batching_max_publish_delay_ms`` after its first message; the whole batch is compressed.
  Messages with ``deliver_at`` are sent alone. Chunking splits non-batched messages above the chunk size.

The producer owns its parts: a :class:`~quasar.client.producer_encode.MessageEncoder` (SEND frames), a
:class:`~quasar.client.producer_batch.Batcher` (the open batch and its timer) when batching is on, and a
:class:`~quasar.client._tasks.TaskOwner` (reconnect and send-timeout tasks); ``close`` cancels all of them.
Its public surface beyond the ``pulsar.Producer`` shape is for the other parts of the client: the connection
port (``on_receipt``, ``on_send_error``, ``on_connection_closed``), admission into the pending queue
(``try_admit``, ``admit``) and ``send_admitted`` / ``send_admitted_payload`` for the partitioned producer and
the blocking facade.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import Any

from quasar.protocol import MessageId, ServerError, commands

from ._tasks import TaskOwner
from .batch import PLAIN, BatchMessageContainer, BuiltBatch
from .client_cnx import ClientCnx
from .codec import complete_receipt as _complete_receipt
from .config import ProducerConfig
from .connection_pool import retry_until
from .context import ClientContext
from .errors import (
    AlreadyClosedError,
    BrokerResponseError,
    ClientError,
    ProducerQueueIsFullError,
    SendTimeoutError,
)
from .message import OutgoingMessage, make_outgoing
from .op_send import Future, OpSendMsg, complete_waiter, fail_waiter
from .producer_batch import Batcher
from .producer_encode import MessageEncoder

__all__ = ["Producer"]

log = logging.getLogger("quasar.client")

_NOT_OPEN = frozenset({"closing", "closed", "failed"})


class Producer:
    """Producer of one topic or partition (create it with ``AsyncClient.create_producer``).

    Attributes:
        topic: full topic (partition) name. partition: partition index, -1 if not a partition.
        config: the :class:`ProducerConfig`. producer_id: the client-wide producer id.
        pending_messages: messages admitted to the pending queue (``max_pending_messages``) and not yet
            completed by a receipt or a failure (read-only).
        on_release: None, or a callable (no arguments) called on the loop thread whenever pending messages
            complete (receipt, failure): the blocking facade wakes its callers waiting for room with it.
    """

    def __init__(
        self, context: ClientContext, topic: str, config: ProducerConfig, partition: int = -1
    ) -> None:
        self._context = context
        self.topic = topic
        self.partition = partition
        self.config = config
        self.producer_id: int = context.next_producer_id()
        self._loop = asyncio.get_running_loop()
        self._producer_name = config.producer_name
        self._encoder = MessageEncoder(self.producer_id, config)
        self._cnx: ClientCnx | None = None
        self._state = "connecting"
        self._epoch = 0
        self._sequence_id = 0
        self.last_sequence_id_pushed = -1
        self.last_sequence_id_published = -1
        self._last_potential_duplicate = False
        self._pending: collections.deque[OpSendMsg] = collections.deque()
        self.pending_messages = 0
        self._max_pending = config.max_pending_messages
        self.on_release: Any = None
        self._space_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._batcher: Batcher | None = None
        self._batch_add_plain: Any = None
        self._tasks = TaskOwner(f"producer {topic}")
        self._flush_waiters: list[tuple[OpSendMsg, asyncio.Future[None]]] = []
        self._created = False

    # ------------------------------------------------------------------------------- properties --

    @property
    def producer_name(self) -> str:
        """The producer name (user-given, or assigned by the broker)."""
        return self._producer_name or ""

    @property
    def last_sequence_id(self) -> int:
        """Sequence id of the last message acknowledged by the broker (-1 if none)."""
        return self.last_sequence_id_published

    @property
    def next_sequence_id(self) -> int:
        """The sequence id the next message without its own gets."""
        return self._sequence_id

    @property
    def is_connected(self) -> bool:
        """True while the producer has a live connection."""
        return self._state == "ready"

    @property
    def is_open(self) -> bool:
        """True until the producer is closing, closed or failed for good (sends are then refused)."""
        return self._state not in _NOT_OPEN

    # ------------------------------------------------------------------------------------ start --

    async def start(self) -> None:
        """Connect: LOOKUP and PRODUCER, retried with backoff until ``operation_timeout_seconds`` (called by
        ``AsyncClient.create_producer``); then the send-timeout task starts.

        Raises:
            BrokerResponseError (e.g. ProducerBusy), ConnectError, OperationTimeoutError.
        """
        deadline = time.monotonic() + self._context.config.operation_timeout_seconds
        await retry_until(deadline, self._connect_once, self._context.config, is_closed=self._is_closing)
        if self.config.send_timeout_millis > 0:
            self._tasks.spawn(self._send_timeout_loop(), name=f"send-timeout {self.topic}")

    def _is_closing(self) -> bool:
        return self._state in ("closing", "closed")

    async def _connect_once(self) -> None:
        address = await self._context.lookup.lookup(self.topic)
        cnx: ClientCnx = await self._context.pool.get(address)
        request_id = cnx.next_request_id()
        frame = commands.new_producer(
            self.topic,
            self.producer_id,
            request_id,
            producer_name=self._producer_name,
            user_provided_producer_name=self.config.producer_name is not None,
            metadata=self.config.properties,
            epoch=self._epoch,
            initial_subscription_name=self.config.initial_subscription_name,
        )
        self._epoch += 1
        body = await cnx.request(frame, request_id)
        if self._is_closing():
            return
        self._producer_name = body.producer_name
        self._encoder.connected(body.producer_name, body.schema_version, cnx.max_message_size)
        if not self._created:
            self._created = True
            self._first_connect(body.last_sequence_id, cnx.max_message_size)
        cnx.register_producer(self.producer_id, self)
        self._cnx = cnx
        self._state = "ready"
        if self._pending:  # resend everything pending, in order (one write)
            cnx.write(b"".join(op.frame for op in self._pending))
            self.last_sequence_id_pushed = max(
                self.last_sequence_id_pushed, self._pending[-1].highest_sequence_id
            )

    def _first_connect(self, broker_last_sequence_id: int, max_message_size: int) -> None:
        """Sequence ids start after ``initial_sequence_id`` or the broker's last one; the batcher is sized."""
        if self.config.initial_sequence_id is not None:
            start = self.config.initial_sequence_id + 1
        else:
            start = broker_last_sequence_id + 1 if broker_last_sequence_id >= 0 else 0
        self._sequence_id = start
        self.last_sequence_id_published = start - 1
        self.last_sequence_id_pushed = start - 1
        config = self.config
        if config.batching_enabled:
            container = BatchMessageContainer(
                config.batching_max_messages, config.batching_max_allowed_size_in_bytes, max_message_size
            )
            delay = config.batching_max_publish_delay_ms / 1000
            self._batcher = Batcher(container, delay, self._loop, self._send_batch)
            self._batch_add_plain = container.add_plain

    def on_connection_closed(self, cnx: ClientCnx) -> None:
        """Connection port: ``cnx`` closed (or the broker sent CLOSE_PRODUCER); reconnect in an owned task."""
        if cnx is not self._cnx:
            return
        self._cnx = None
        if self._state == "ready":
            self._state = "connecting"
            self._tasks.spawn(self._reconnect(), name=f"reconnect {self.topic}")

    async def _reconnect(self) -> None:
        config = self._context.config
        backoff = config.initial_backoff_interval_ms / 1000
        while self._state == "connecting":
            await asyncio.sleep(backoff)
            try:
                await self._connect_once()
                log.info("producer %s reconnected; resent %d pending sends", self.topic, len(self._pending))
                return
            except BrokerResponseError as exc:
                if exc.code in (ServerError.TopicTerminatedError, ServerError.ProducerFenced):
                    self._state = "failed"
                    self._fail_pending(exc)
                    return
                log.info("producer %s reconnect failed: %s", self.topic, exc)
            except (ClientError, OSError) as exc:
                log.info("producer %s reconnect failed: %s", self.topic, exc)
            backoff = min(backoff * 2, config.max_backoff_interval_ms / 1000)

    # ------------------------------------------------------------------------------------- send --

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Publish one message and wait for its receipt.

        Args:
            content: payload bytes. kwargs: ``properties``, ``partition_key``, ``ordering_key``,
                ``sequence_id``, ``event_timestamp`` (ms), ``deliver_at`` (ms), ``deliver_after``,
                ``replication_clusters``, ``disable_replication`` (names of ``pulsar.Producer.send``).

        Returns:
            The message id from the receipt.

        Raises:
            TypeError / ValueError: bad arguments. AlreadyClosedError, ProducerQueueIsFullError,
            MessageTooBigError, SendTimeoutError, BrokerResponseError.
        """
        return await (await self.send_async(content, **kwargs))

    async def send_async(self, content: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Queue one message; waits only for room in the pending queue (``block_if_queue_full``).

        Returns:
            A future resolved with the MessageId once the broker acknowledged the message.
        """
        future: asyncio.Future[MessageId] = Future(loop=self._loop)
        if kwargs or content.__class__ is not bytes:
            message = make_outgoing(content, **kwargs)
            await self.admit()
            self._send_message(message, future)
            return future
        if not self.try_admit():
            await self.admit()
        self._send_plain(content, future)
        return future

    def send_nowait(self, content: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Queue one message without waiting.

        Raises:
            ProducerQueueIsFullError: ``max_pending_messages`` are pending (whatever ``block_if_queue_full``).
        """
        return self.send_message_nowait(make_outgoing(content, **kwargs))

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """:meth:`send_nowait` of an already validated :class:`OutgoingMessage` (from ``make_outgoing``)."""
        self._check_open()
        if self.pending_messages >= self._max_pending:
            raise ProducerQueueIsFullError(f"{self.pending_messages} messages pending on {self.topic}")
        self.pending_messages += 1
        future: asyncio.Future[MessageId] = Future(loop=self._loop)
        self._send_message(message, future)
        return future

    def send_with_callback(self, item: OutgoingMessage | bytes, callback: Any) -> None:
        """Queue a message whose outcome goes to ``callback(error, message_id)`` (or nowhere if None), with no
        Future: the blocking facade's ``send_async``. Call on the event loop thread.

        Args:
            item: an :class:`OutgoingMessage` from ``make_outgoing``, or bare payload bytes.
            callback: called on the loop thread with ``(None, MessageId)`` after the receipt, or
                ``(ClientError, None)``: AlreadyClosedError, ProducerQueueIsFullError (queue full and not
                ``block_if_queue_full``), MessageTooBigError, SendTimeoutError, BrokerResponseError.
                With ``block_if_queue_full`` the caller is expected to have waited for room (the facade waits in
                its own thread), so the message is accepted even at the limit.
        """
        if self._state in _NOT_OPEN:
            error: ClientError = AlreadyClosedError(f"producer on {self.topic} is {self._state}")
        elif self.pending_messages >= self._max_pending and not self.config.block_if_queue_full:
            error = ProducerQueueIsFullError(f"{self.pending_messages} messages pending on {self.topic}")
        else:
            self.pending_messages += 1
            if item.__class__ is bytes:
                self._send_plain(item, callback)
            else:
                self._send_message(item, callback)  # type: ignore[arg-type]  # not bytes: an OutgoingMessage
            return
        fail_waiter(callback, error)

    # ------------------------------------------------------------------------- pending-queue port --

    def try_admit(self) -> bool:
        """Take a pending-queue slot if one is free and the producer is open; False otherwise (then
        :meth:`admit` waits or raises). An admitted message must be given to :meth:`send_admitted` or
        :meth:`send_admitted_payload`."""
        if self.pending_messages < self._max_pending and self._state not in _NOT_OPEN:
            self.pending_messages += 1
            return True
        return False

    async def admit(self) -> None:
        """Take a pending-queue slot, waiting for one with ``block_if_queue_full``.

        Raises:
            AlreadyClosedError: the producer is (or gets) closed.
            ProducerQueueIsFullError: ``max_pending_messages`` are pending and not ``block_if_queue_full``.
        """
        self._check_open()
        while self.pending_messages >= self._max_pending:
            if not self.config.block_if_queue_full:
                raise ProducerQueueIsFullError(f"{self.pending_messages} messages pending on {self.topic}")
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._space_waiters.append(waiter)
            await waiter
            self._check_open()
        self.pending_messages += 1

    def send_admitted(self, message: OutgoingMessage, waiter: Any) -> None:
        """Send an admitted message; its outcome goes to ``waiter`` (see :mod:`quasar.client.op_send`)."""
        self._send_message(message, waiter)

    def send_admitted_payload(self, payload: bytes, waiter: Any) -> None:
        """Send an admitted message given as bare payload bytes (the batching short path)."""
        self._send_plain(payload, waiter)

    def send_entry(
        self,
        payload: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        partition_key: str | None,
        waiter: Any,
    ) -> None:
        """Send an uncompressed batch payload built outside the producer (``quasar.client.bulk``) as one entry:
        compressed with the producer's ``compression_type``, its metadata carrying ``partition_key`` (the first
        item's, as the C++ producer), ``num_messages``, ``sequence_id`` and (more than one message)
        ``highest_sequence_id``, which a broker with deduplication judges the entry by. Call on the loop thread.

        The open batch (if any) is sent first, so order is kept; later sends continue after
        ``highest_sequence_id``. ``num_messages`` count against ``pending_messages`` without waiting for room:
        the caller bounds what it has in flight. ``waiter`` gets one outcome for the whole entry (see
        :mod:`quasar.client.op_send`): AlreadyClosedError, MessageTooBigError, SendTimeoutError, ...
        """
        if self._state in _NOT_OPEN:
            fail_waiter(waiter, AlreadyClosedError(f"producer on {self.topic} is {self._state}"))
            return
        if self._batcher is not None:
            self._batcher.send()
        self.pending_messages += num_messages
        if highest_sequence_id >= self._sequence_id:
            self._sequence_id = highest_sequence_id + 1
        first = PLAIN if partition_key is None else OutgoingMessage(b"", partition_key=partition_key)
        self._send_batch(BuiltBatch(payload, num_messages, sequence_id, highest_sequence_id, [waiter], first))

    def _check_open(self) -> None:
        if self._state in _NOT_OPEN:
            raise AlreadyClosedError(f"producer on {self.topic} is {self._state}")

    def _release(self, count: int) -> None:
        if count <= 0:
            return
        self.pending_messages -= count
        waiters = self._space_waiters
        while count > 0 and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1
        if self.on_release is not None:
            self.on_release()

    def _send_plain(self, payload: bytes, waiter: Any) -> None:
        """Send bare payload bytes (already admitted to the pending queue)."""
        batcher = self._batcher
        sequence_id = self._sequence_id
        if (
            batcher is not None
            and not self._last_potential_duplicate
            and sequence_id > self.last_sequence_id_pushed
        ):
            full = self._batch_add_plain(payload, sequence_id, waiter)  # Batcher.add_plain, inlined
            if full is not None:
                self._sequence_id = sequence_id + 1
                if full:
                    batcher.send()
                elif batcher.timer is None:
                    batcher.arm_timer()
                return
        self._send_message(OutgoingMessage(payload), waiter)  # general path: no room, no batching, ...

    def _send_message(self, message: OutgoingMessage, waiter: Any) -> None:
        """Send one message (already admitted to the pending queue); its outcome goes to ``waiter``."""
        if message.sequence_id is not None:
            sequence_id = message.sequence_id
        else:
            sequence_id = self._sequence_id
            self._sequence_id += 1
        batcher = self._batcher
        if batcher is not None and message.deliver_at is None:
            if sequence_id <= self.last_sequence_id_pushed:
                # seed 000: a possible duplicate goes out in a batch of its own
                self._last_potential_duplicate = True
                if sequence_id <= self.last_sequence_id_published:
                    log.warning("message with sequence id %d is definitely a duplicate", sequence_id)
                batcher.add_after_send(message, sequence_id, waiter)
            elif self._last_potential_duplicate or not batcher.has_room(len(message.payload)):
                batcher.add_after_send(message, sequence_id, waiter)
                self._last_potential_duplicate = False
            else:
                batcher.add(message, sequence_id, waiter)
            return
        try:
            ops = self._encoder.encode_single(message, sequence_id, waiter)
        except ClientError as exc:
            self._release(1)
            fail_waiter(waiter, exc)
            return
        for op in ops:
            self._push(op)

    def _send_batch(self, built: BuiltBatch) -> None:
        """The batcher's ``on_batch``: encode the closed batch and push it (or fail its messages)."""
        try:
            op = self._encoder.encode_batch(built)
        except ClientError as exc:
            self._release(built.num_messages)
            for waiter in built.waiters:
                fail_waiter(waiter, exc)
            return
        self._push(op)

    def _push(self, op: OpSendMsg) -> None:
        self._pending.append(op)
        cnx = self._cnx
        if self._state == "ready" and cnx is not None:
            cnx.write(op.frame)
            if op.highest_sequence_id > self.last_sequence_id_pushed:
                self.last_sequence_id_pushed = op.highest_sequence_id

    # --------------------------------------------------------------------------------- receipts --

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> None:
        """Connection port: a SEND_RECEIPT for this producer (matched to the head of the pending queue): its
        sequence id and the entry's position (signed int64)."""
        pending = self._pending
        if not pending:
            return
        op = pending[0]
        if sequence_id < op.sequence_id:
            return  # stale receipt (e.g. of a message that timed out)
        if sequence_id > op.highest_sequence_id:
            log.warning(
                "receipt for sequence id %d ahead of pending %d; reconnecting", sequence_id, op.sequence_id
            )
            if self._cnx is not None:
                self._cnx.close()
            return
        pending.popleft()
        if op.highest_sequence_id > self.last_sequence_id_published:
            self.last_sequence_id_published = op.highest_sequence_id
        waiters = op.waiters
        size = 0 if op.num_messages == 1 or len(waiters) == 1 else op.num_messages
        _complete_receipt(
            waiters, ledger_id, entry_id, self.partition, size, MessageId, Future, complete_waiter
        )
        self._release(op.permits)
        if self._flush_waiters:
            self._wake_flush(op)

    def on_send_error(self, frame: Any) -> None:
        """Connection port: a SEND_ERROR for this producer (a checksum error fails the head op, anything else
        reconnects and resends)."""
        body = frame.command.send_error
        head = self._pending[0] if self._pending else None
        if (
            body.error == ServerError.ChecksumError
            and head is not None
            and head.sequence_id == body.sequence_id
        ):
            self._pending.popleft()
            self._fail_op(head, BrokerResponseError(body.error, body.message))
            if self._flush_waiters:
                self._wake_flush(head)
            return
        log.warning("SEND_ERROR %s on %s; reconnecting", body.message, self.topic)
        if self._cnx is not None:
            self._cnx.close()

    def _fail_op(self, op: OpSendMsg, error: BaseException) -> None:
        for waiter in op.waiters:
            fail_waiter(waiter, error)
        self._release(op.permits)

    def _fail_pending(self, error: BaseException) -> None:
        pending, self._pending = self._pending, collections.deque()
        for op in pending:
            self._fail_op(op, error)
        if self._batcher is not None:
            waiters = self._batcher.discard()
            self._release(len(waiters))
            for waiter in waiters:
                fail_waiter(waiter, error)
        self._wake_flush(None)

    async def _send_timeout_loop(self) -> None:
        timeout = self.config.send_timeout_millis / 1000
        while True:
            if not self._pending:
                await asyncio.sleep(timeout)
                continue
            age = time.monotonic() - self._pending[0].created
            if age >= timeout:
                count = len(self._pending)
                log.warning("%d pending sends on %s timed out after %.1f s", count, self.topic, timeout)
                self._fail_pending(
                    SendTimeoutError(f"no send receipt within {self.config.send_timeout_millis} ms")
                )
                continue
            await asyncio.sleep(timeout - age)

    # ---------------------------------------------------------------------------------- flush/close --

    def _wake_flush(self, done: OpSendMsg | None) -> None:
        """Wake the flushes waiting for ``done`` (every flush when None or nothing is pending)."""
        everything = done is None or not self._pending
        keep = []
        for target, waiter in self._flush_waiters:
            if everything or target is done:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                keep.append((target, waiter))
        self._flush_waiters = keep

    async def flush(self) -> None:
        """Send the open batch now and wait until every message pending now has a receipt (or failed)."""
        if self._batcher is not None:
            self._batcher.send()
        if not self._pending:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append((self._pending[-1], waiter))
        await waiter

    async def close(self) -> None:
        """Flush, send CLOSE_PRODUCER and wait for SUCCESS; later sends raise AlreadyClosedError."""
        if self._state in ("closing", "closed"):
            return
        if self._state == "ready":
            with contextlib.suppress(TimeoutError):  # what is still pending fails below
                await asyncio.wait_for(self.flush(), self._context.config.operation_timeout_seconds)
        self._state = "closing"
        cnx = self._cnx
        if cnx is not None and not cnx.is_closed:
            request_id = cnx.next_request_id()
            try:
                await cnx.request(commands.new_close_producer(self.producer_id, request_id), request_id)
            except ClientError as exc:
                log.info("close of producer %s: %s", self.topic, exc)
            cnx.remove_producer(self.producer_id)
        self._cnx = None
        if self._batcher is not None:
            self._batcher.close()
        self._fail_pending(AlreadyClosedError(f"producer on {self.topic} closed"))
        for waiter in self._space_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._state = "closed"
        await self._tasks.aclose()
        self._context.forget(self)
