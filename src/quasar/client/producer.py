"""Producer of one topic or partition: sequence ids, batching, compression, chunking, pending queue, receipts.

Follows seed 000 and the Java/C++ ``ProducerImpl`` (reference/pulsar-protocol.md §6.6-6.7, §7, §8.6):

* Sequence ids are producer-scoped: ``initial_sequence_id`` or the broker's ``last_sequence_id + 1`` from
  PRODUCER_SUCCESS, then +1 per message. ``last_sequence_id_pushed`` (highest id written to the connection) and
  ``last_sequence_id_published`` (highest id with a receipt) drive the seed's rule: a message whose (user-set)
  sequence id is <= ``last_sequence_id_pushed`` may be a duplicate and goes out in a batch of its own.
* Each SEND is an :class:`OpSendMsg` in the pending queue. SEND_RECEIPTs arrive in order and are matched to the
  head: a smaller sequence id is stale and ignored, a larger one closes the connection (then everything
  pending is resent). A batch of n completes its n waiters with ``MessageId(ledger, entry, partition, i, n)``.
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
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

from quasar.protocol import (
    INT64_MAX,
    MessageId,
    ServerError,
    commands,
)

from ._tasks import TaskOwner
from .batch import BatchMessageContainer
from .client_cnx import ClientCnx
from .config import ProducerConfig
from .connection_pool import retry_until
from .errors import (
    AlreadyClosedError,
    BrokerResponseError,
    ClientError,
    ProducerQueueIsFullError,
    SendTimeoutError,
)
from .message import OutgoingMessage, make_outgoing
from .op_send import Future, OpSendMsg, complete_waiter, fail_waiter
from .op_send import message_id as _message_id
from .producer_encode import ProducerEncoding

__all__ = ["Producer"]

log = logging.getLogger("quasar.client")

_U64 = 1 << 64
_NOT_OPEN = frozenset({"closing", "closed", "failed"})


def _int64(value: int) -> int:
    return value - _U64 if value > INT64_MAX else value


class Producer(ProducerEncoding):
    """Producer of one topic or partition (create it with ``AsyncClient.create_producer``).

    Attributes:
        topic: full topic (partition) name. partition: partition index, -1 if not a partition.
    """

    def __init__(self, context: Any, topic: str, config: ProducerConfig, partition: int = -1) -> None:
        self._context = context
        self.topic = topic
        self.partition = partition
        self.config = config
        self.producer_id: int = context.next_producer_id()
        self._loop = asyncio.get_running_loop()
        self._producer_name = config.producer_name
        self._cnx: ClientCnx | None = None
        self._state = "connecting"
        self._epoch = 0
        self._max_message_size = 0
        self._sequence_id = 0
        self.last_sequence_id_pushed = -1
        self.last_sequence_id_published = -1
        self._last_potential_duplicate = False
        self._pending: collections.deque[OpSendMsg] = collections.deque()
        self._pending_messages = 0
        self._max_pending = config.max_pending_messages
        self.on_release: Any = None  # called (no arguments) when pending messages complete; see sync.py
        self._space_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._batch: BatchMessageContainer | None = None
        self._batch_timer: asyncio.TimerHandle | None = None
        self._tasks = TaskOwner(f"producer {topic}")
        self._schema_version = b""
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
    def is_connected(self) -> bool:
        """True while the producer has a live connection."""
        return self._state == "ready"

    @property
    def pending_messages(self) -> int:
        """Messages accepted by ``send`` and not yet acknowledged by a receipt."""
        return self._pending_messages

    # ------------------------------------------------------------------------------------ start --

    async def _start(self) -> None:
        deadline = time.monotonic() + self._context.config.operation_timeout_seconds
        await retry_until(deadline, self._connect_once, self._context.config, is_closed=lambda: self._closed)
        if self.config.send_timeout_millis > 0:
            self._tasks.spawn(self._send_timeout_loop(), name=f"send-timeout {self.topic}")

    @property
    def _closed(self) -> bool:
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
        if self._closed:
            return
        self._producer_name = body.producer_name
        self._schema_version = body.schema_version
        self._max_message_size = cnx.max_message_size
        if not self._created:
            self._created = True
            if self.config.initial_sequence_id is not None:
                start = self.config.initial_sequence_id + 1
            else:
                start = body.last_sequence_id + 1 if body.last_sequence_id >= 0 else 0
            self._sequence_id = start
            self.last_sequence_id_published = start - 1
            self.last_sequence_id_pushed = start - 1
            if self.config.batching_enabled:
                self._batch = BatchMessageContainer(
                    self.config.batching_max_messages,
                    self.config.batching_max_allowed_size_in_bytes,
                    cnx.max_message_size,
                )
        cnx.register_producer(self.producer_id, self)
        self._cnx = cnx
        self._state = "ready"
        if self._pending:  # resend everything pending, in order (one write)
            cnx.write(b"".join(op.frame for op in self._pending))
            self.last_sequence_id_pushed = max(
                self.last_sequence_id_pushed, self._pending[-1].highest_sequence_id
            )

    def _on_connection_closed(self, cnx: ClientCnx) -> None:
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
            await self._acquire()
            self._send_message(message, future)
            return future
        if not self._try_admit():
            await self._acquire()
        self._send_plain(content, future)
        return future

    def _try_admit(self) -> bool:
        """Take a pending-queue slot if one is free and the producer is open (else :meth:`_acquire` decides)."""
        if self._pending_messages < self._max_pending and self._state not in _NOT_OPEN:
            self._pending_messages += 1
            return True
        return False

    def send_nowait(self, content: Any, **kwargs: Any) -> asyncio.Future[MessageId]:
        """Queue one message without waiting.

        Raises:
            ProducerQueueIsFullError: ``max_pending_messages`` are pending (whatever ``block_if_queue_full``).
        """
        return self.send_message_nowait(make_outgoing(content, **kwargs))

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """:meth:`send_nowait` of an already validated :class:`OutgoingMessage` (from ``make_outgoing``)."""
        self._check_open()
        if self._pending_messages >= self.config.max_pending_messages:
            raise ProducerQueueIsFullError(f"{self._pending_messages} messages pending on {self.topic}")
        self._pending_messages += 1
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
        elif self._pending_messages >= self._max_pending and not self.config.block_if_queue_full:
            error = ProducerQueueIsFullError(f"{self._pending_messages} messages pending on {self.topic}")
        else:
            self._pending_messages += 1
            if item.__class__ is bytes:
                self._send_plain(item, callback)  # type: ignore[arg-type]
            else:
                self._send_message(item, callback)  # type: ignore[arg-type]
            return
        fail_waiter(callback, error)

    def _check_open(self) -> None:
        if self._state in ("closing", "closed", "failed"):
            raise AlreadyClosedError(f"producer on {self.topic} is {self._state}")

    async def _acquire(self) -> None:
        self._check_open()
        while self._pending_messages >= self.config.max_pending_messages:
            if not self.config.block_if_queue_full:
                raise ProducerQueueIsFullError(f"{self._pending_messages} messages pending on {self.topic}")
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._space_waiters.append(waiter)
            await waiter
            self._check_open()
        self._pending_messages += 1

    def _release(self, count: int) -> None:
        if count <= 0:
            return
        self._pending_messages -= count
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
        batch = self._batch
        sequence_id = self._sequence_id
        if (
            batch is not None
            and not self._last_potential_duplicate
            and sequence_id > self.last_sequence_id_pushed
        ):
            full = batch.add_plain(payload, sequence_id, waiter)
            if full is not None:
                self._sequence_id = sequence_id + 1
                if full:
                    self._send_batch()
                elif self._batch_timer is None:
                    self._start_batch_timer()
                return
        self._send_message(OutgoingMessage(payload), waiter)  # general path: no room, no batching, ...

    def _send_message(self, message: OutgoingMessage, waiter: Any) -> None:
        """Send one message (already admitted to the pending queue); its outcome goes to ``waiter``."""
        if message.sequence_id is not None:
            sequence_id = message.sequence_id
        else:
            sequence_id = self._sequence_id
            self._sequence_id += 1
        batch = self._batch
        if batch is not None and message.deliver_at is None:
            size = len(message.payload)
            if sequence_id <= self.last_sequence_id_pushed:
                # seed 000: a possible duplicate goes out in a batch of its own
                self._last_potential_duplicate = True
                if sequence_id <= self.last_sequence_id_published:
                    log.warning("message with sequence id %d is definitely a duplicate", sequence_id)
                self._batch_send_and_add(message, sequence_id, waiter)
            elif self._last_potential_duplicate or not batch.has_enough_space(size):
                self._batch_send_and_add(message, sequence_id, waiter)
                self._last_potential_duplicate = False
            else:
                if batch.add(message, sequence_id, waiter):
                    self._send_batch()
                elif self._batch_timer is None:
                    self._start_batch_timer()
            return
        try:
            self._send_single(message, sequence_id, waiter)
        except ClientError as exc:
            self._release(1)
            fail_waiter(waiter, exc)

    def _push(self, op: OpSendMsg) -> None:
        self._pending.append(op)
        cnx = self._cnx
        if self._state == "ready" and cnx is not None:
            cnx.write(op.frame)
            if op.highest_sequence_id > self.last_sequence_id_pushed:
                self.last_sequence_id_pushed = op.highest_sequence_id

    # --------------------------------------------------------------------------------- receipts --

    def _on_receipt(self, frame: Any) -> None:
        body = frame.command.send_receipt
        sequence_id = body.sequence_id
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
        mid = body.message_id
        ledger_id = _int64(mid.ledgerId)
        entry_id = _int64(mid.entryId)
        partition = self.partition
        waiters = op.waiters
        if op.num_messages == 1 or len(waiters) == 1:
            for waiter in waiters:
                if waiter is not None:
                    complete_waiter(waiter, _message_id(ledger_id, entry_id, partition))
        else:
            size = op.num_messages
            index = -1
            for waiter in waiters:
                index += 1
                if waiter is None:
                    continue
                result = _message_id(ledger_id, entry_id, partition, index, size)
                if waiter.__class__ is Future:
                    if not waiter.done():
                        waiter.set_result(result)
                else:
                    complete_waiter(waiter, result)
        self._release(op.permits)
        if self._flush_waiters:
            self._wake_flush(op)

    def _on_send_error(self, frame: Any) -> None:
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
        if self._batch is not None and not self._batch.is_empty:
            waiters = self._batch.discard()
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
        if self._batch is not None and not self._batch.is_empty:
            self._send_batch()
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
            try:
                await asyncio.wait_for(self.flush(), self._context.config.operation_timeout_seconds)
            except TimeoutError:
                pass
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
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        self._fail_pending(AlreadyClosedError(f"producer on {self.topic} closed"))
        for waiter in self._space_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._state = "closed"
        await self._tasks.aclose()
        self._context._forget(self)
