"""Producer of one topic or partition: sequence ids, batching, compression, chunking, pending queue, receipts.

Follows seed 000 and the Java/C++ ``ProducerImpl`` (reference/pulsar-protocol.md §6.6-6.7, §7, §8.6):

* Sequence ids are producer-scoped: ``initial_sequence_id`` or the broker's ``last_sequence_id + 1`` from
  PRODUCER_SUCCESS, then +1 per message. ``last_sequence_id_pushed`` (highest id written to the connection) and
  ``last_sequence_id_published`` (highest id with a receipt) drive the seed's rule: a message whose (user-set)
  sequence id is <= ``last_sequence_id_pushed`` may be a duplicate and goes out in a batch of its own.
* Each SEND is an :class:`OpSendMsg` in the pending queue. SEND_RECEIPTs arrive in order and are matched to the
  head: a smaller sequence id is stale and ignored, a larger one closes the connection (then everything
  pending is resent). A batch of n resolves n futures with ``MessageId(ledger, entry, partition, i, n)``.
* ``max_pending_messages`` counts messages from ``send`` until their receipt; when full, ``send`` waits
  (``block_if_queue_full``) or raises :class:`ProducerQueueIsFullError`.
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
    CompressionType,
    MessageId,
    ServerError,
    commands,
    compress,
    encode_headers_and_payload,
    pb,
)

from ._tasks import TaskOwner
from .batch import BatchMessageContainer, BuiltBatch
from .chunking import split_chunks
from .client_cnx import ClientCnx
from .config import ProducerConfig
from .connection_pool import retry_until
from .errors import (
    AlreadyClosedError,
    BrokerResponseError,
    ClientError,
    MessageTooBigError,
    ProducerQueueIsFullError,
    SendTimeoutError,
)
from .message import OutgoingMessage, make_outgoing
from .op_send import OpSendMsg
from .op_send import message_id as _message_id

__all__ = ["Producer"]

log = logging.getLogger("quasar.client")

_U64 = 1 << 64
_CRC_AND_SIZE = 10  # [0x0e01 u16][crc u32][metadataSize u32]
_CHUNK_METADATA_SLACK = 64  # uuid digits and chunk fields beyond the base metadata


def _int64(value: int) -> int:
    return value - _U64 if value > INT64_MAX else value


class Producer:
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
        self._space_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._batch: BatchMessageContainer | None = None
        self._batch_timer: asyncio.TimerHandle | None = None
        self._tasks = TaskOwner(f"producer {topic}")
        self._schema_version = b""
        self._flush_waiters: list[asyncio.Future[None]] = []
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
        message = make_outgoing(content, **kwargs)
        await self._acquire()
        return self._send_message(message)

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
        return self._send_message(message)

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

    def _send_message(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        future: asyncio.Future[MessageId] = self._loop.create_future()
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
                self._batch_send_and_add(message, sequence_id, future)
            elif self._last_potential_duplicate or not batch.has_enough_space(size):
                self._batch_send_and_add(message, sequence_id, future)
                self._last_potential_duplicate = False
            else:
                if batch.add(message, sequence_id, future):  # type: ignore[arg-type]
                    self._send_batch()
                elif self._batch_timer is None:
                    self._start_batch_timer()
            return future
        try:
            self._send_single(message, sequence_id, future)
        except ClientError as exc:
            self._release(1)
            future.set_exception(exc)
        return future

    # --------------------------------------------------------------------------------- batching --

    def _start_batch_timer(self) -> None:
        delay = self.config.batching_max_publish_delay_ms / 1000
        self._batch_timer = self._loop.call_later(delay, self._on_batch_timer)

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        if self._batch is not None and not self._batch.is_empty:
            self._send_batch()

    def _batch_send_and_add(
        self, message: OutgoingMessage, sequence_id: int, future: asyncio.Future[Any]
    ) -> None:
        assert self._batch is not None
        if not self._batch.is_empty:
            self._send_batch()
        if self._batch.add(message, sequence_id, future):
            self._send_batch()
        elif self._batch_timer is None:
            self._start_batch_timer()

    def _send_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        assert self._batch is not None
        built: BuiltBatch = self._batch.build()
        metadata = self._new_metadata(built.first, built.sequence_id)
        metadata.num_messages_in_batch = built.num_messages
        if built.first.partition_key is not None:
            metadata.partition_key = built.first.partition_key
        if built.first.ordering_key is not None:
            metadata.ordering_key = built.first.ordering_key
        highest = built.highest_sequence_id if built.num_messages > 1 else None
        if highest is not None:
            metadata.highest_sequence_id = highest
        payload = self._compress(metadata, built.payload)
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > self._max_message_size:
            error = MessageTooBigError(
                f"batch of {len(span)} bytes exceeds max_message_size {self._max_message_size}"
            )
            self._release(built.num_messages)
            for future in built.futures:
                if future is not None and not future.done():
                    future.set_exception(error)
            return
        frame = commands.new_send(
            self.producer_id, built.sequence_id, span, built.num_messages, highest_sequence_id=highest
        )
        self._push(
            OpSendMsg(
                built.sequence_id,
                built.highest_sequence_id,
                built.num_messages,
                frame,
                built.futures,  # type: ignore[arg-type]
                built.num_messages,
            )
        )

    # ------------------------------------------------------------------------------ single/chunk --

    def _new_metadata(self, message: OutgoingMessage, sequence_id: int) -> pb.MessageMetadata:
        metadata = pb.MessageMetadata(
            producer_name=self._producer_name,
            sequence_id=sequence_id,
            publish_time=time.time_ns() // 1_000_000,
        )
        if message.replication_clusters:
            metadata.replicate_to.extend(message.replication_clusters)
        if self._schema_version:
            metadata.schema_version = self._schema_version
        return metadata

    def _compress(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        kind = self.config.compression_type
        if kind == CompressionType.NONE:
            return payload
        metadata.compression = kind
        metadata.uncompressed_size = len(payload)
        return compress(kind, payload)

    def _send_single(self, message: OutgoingMessage, sequence_id: int, future: asyncio.Future[Any]) -> None:
        metadata = self._new_metadata(message, sequence_id)
        if message.properties:
            for key, value in message.properties.items():
                metadata.properties.add(key=key, value=value)
        if message.partition_key is not None:
            metadata.partition_key = message.partition_key
        if message.ordering_key is not None:
            metadata.ordering_key = message.ordering_key
        if message.event_timestamp is not None:
            metadata.event_time = message.event_timestamp
        if message.deliver_at is not None:
            metadata.deliver_at_time = message.deliver_at
        payload = self._compress(metadata, message.payload)
        max_size = self._max_message_size
        overhead = metadata.ByteSize() + _CRC_AND_SIZE
        if self.config.chunking_enabled and len(payload) + overhead > max_size:
            chunk_size = max_size - overhead - _CHUNK_METADATA_SLACK
            if self.config.chunk_max_message_size is not None:
                chunk_size = min(chunk_size, self.config.chunk_max_message_size)
            self._send_chunks(metadata, payload, sequence_id, future, max(1, chunk_size))
            return
        span = encode_headers_and_payload(metadata, payload)
        if len(span) > max_size:
            raise MessageTooBigError(f"message of {len(span)} bytes exceeds max_message_size {max_size}")
        frame = commands.new_send(self.producer_id, sequence_id, span)
        self._push(OpSendMsg(sequence_id, sequence_id, 1, frame, [future], 1))

    def _send_chunks(
        self,
        metadata: pb.MessageMetadata,
        payload: bytes,
        sequence_id: int,
        future: asyncio.Future[Any],
        chunk_size: int,
    ) -> None:
        chunks = split_chunks(payload, chunk_size)
        metadata.uuid = f"{self._producer_name}-{sequence_id}"
        metadata.num_chunks_from_msg = len(chunks)
        metadata.total_chunk_msg_size = len(payload)
        last = len(chunks) - 1
        for chunk_id, chunk in enumerate(chunks):
            metadata.chunk_id = chunk_id
            span = encode_headers_and_payload(metadata, chunk)
            frame = commands.new_send(self.producer_id, sequence_id, span, is_chunk=True)
            is_last = chunk_id == last
            self._push(
                OpSendMsg(
                    sequence_id, sequence_id, 1, frame, [future] if is_last else [], 1 if is_last else 0
                )
            )

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
        futures = op.futures
        if op.num_messages == 1 or len(futures) == 1:
            result = _message_id(ledger_id, entry_id, partition)
            for future in futures:
                if future is not None and not future.done():
                    future.set_result(result)
        else:
            size = op.num_messages
            for index, future in enumerate(futures):
                if future is not None and not future.done():
                    future.set_result(_message_id(ledger_id, entry_id, partition, index, size))
        self._release(op.permits)
        if not pending and self._flush_waiters:
            self._wake_flush()

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
            return
        log.warning("SEND_ERROR %s on %s; reconnecting", body.message, self.topic)
        if self._cnx is not None:
            self._cnx.close()

    def _fail_op(self, op: OpSendMsg, error: BaseException) -> None:
        for future in op.futures:
            if future is not None and not future.done():
                future.set_exception(error)
        self._release(op.permits)

    def _fail_pending(self, error: BaseException) -> None:
        pending, self._pending = self._pending, collections.deque()
        for op in pending:
            self._fail_op(op, error)
        if self._batch is not None and not self._batch.is_empty:
            futures = self._batch.discard()
            self._release(len(futures))
            for future in futures:
                if future is not None and not future.done():
                    future.set_exception(error)
        self._wake_flush()

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

    def _wake_flush(self) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def flush(self) -> None:
        """Send the open batch now and wait until every pending message has a receipt (or failed)."""
        if self._batch is not None and not self._batch.is_empty:
            self._send_batch()
        if not self._pending:
            return
        last = self._pending[-1]
        futures = [f for f in last.futures if f is not None]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append(waiter)
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
