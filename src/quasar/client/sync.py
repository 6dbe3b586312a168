"""Blocking facade shaped like the official ``pulsar.Client``: an asyncio event loop in one daemon thread runs
the :class:`~quasar.client.AsyncClient`; each blocking call submits a coroutine to it and waits.

Hot paths avoid a thread round trip per message: ``send_async`` only schedules the send on the loop (its
callback runs on the loop thread, as the official client runs callbacks on its I/O thread); ``receive`` takes
an already queued message directly and tells the loop afterwards; ``acknowledge`` /
``negative_acknowledge`` are fire-and-forget (as in ``pulsar``), unless ack receipts are enabled.
Message listeners run on a separate listener thread so they may call blocking methods of the consumer.

The facade uses only the public surface of the asyncio objects: the producer's ``config``,
``pending_messages``, ``is_open``, ``on_release`` and ``send_with_callback`` (see
:class:`~quasar.client.sync_loop.SendLane`), a partitioned producer's ``router`` and ``producers``, the
consumer's receiver ``queue`` (:class:`~quasar.client.receiver_queue.ReceiverQueue`: ``messages``, ``closed``,
``listener``, ``hand_out``), ``Message.entry.consumer`` and a multi-topic consumer's ``child_of``. The loop
thread, the send lanes and the listener bridge are in :mod:`quasar.client.sync_loop`.

Callbacks of ``send_async`` receive ``(error, message_id)``: ``error`` is None on success or the
:class:`~quasar.client.errors.ClientError` (the official client passes a ``pulsar.Result`` instead).
"""

from __future__ import annotations

import collections
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from quasar.protocol import MessageId

from .client import AsyncClient
from .consumer import Consumer as AsyncConsumer
from .entries import StoredEntry
from .errors import ClientError
from .message import Message, make_outgoing
from .multi_consumer import MultiTopicsConsumer
from .partitioned_producer import PartitionedProducer
from .producer import Producer as AsyncProducer
from .reader import Reader as AsyncReader
from .receiver_queue import ReceiverQueue
from .sync_loop import ListenerBridge, LoopThread, SendLane

__all__ = ["Client", "Consumer", "Producer", "Reader"]

log = logging.getLogger("quasar.client")

T = TypeVar("T")

_IGNORED_CLIENT_OPTIONS = frozenset(
    {"io_threads", "message_listener_threads", "concurrent_lookup_requests", "log_conf_file_path", "logger",
     "stats_interval_in_seconds", "listener_name"}
)  # fmt: skip


class Client:
    """Blocking Pulsar client (``pulsar.Client`` shape).

    Args:
        service_url: ``pulsar://host:port`` or ``pulsar+ssl://host:port`` (TLS).
        authentication: ``AuthenticationToken`` / ``AuthenticationBasic`` / ``AuthenticationTLS``
            (:mod:`quasar.client.auth`), as ``pulsar.Client(authentication=...)``.
        tls_trust_certs_file_path, tls_allow_insecure_connection, tls_validate_hostname, use_tls: the official
            client's TLS options (:mod:`quasar.client.tls`).
        operation_timeout_seconds, connection_timeout_ms, ...: :class:`ClientConfig` fields. ``io_threads``,
            ``message_listener_threads``, ``concurrent_lookup_requests``, ``logger`` ... are accepted and ignored.

    Raises:
        TypeError / ValueError: bad URL or settings (an unreadable trust or certificate file included).
    """

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        for name in list(kwargs):
            if name in _IGNORED_CLIENT_OPTIONS:
                kwargs.pop(name)
        self._runner = LoopThread()
        try:
            self._client = self._runner.run(_make_client(service_url, kwargs))
        except BaseException:
            self._runner.stop()
            raise

    def create_producer(self, topic: str, **kwargs: Any) -> Producer:
        """Create a producer (keyword arguments of ``pulsar.Client.create_producer`` / :class:`ProducerConfig`)."""
        kwargs.pop("schema", None)
        return Producer(self._runner, self._runner.run(self._client.create_producer(topic, **kwargs)))

    def subscribe(
        self, topic: str | list[str] | re.Pattern[str], subscription_name: str, **kwargs: Any
    ) -> Consumer:
        """Subscribe (keyword arguments of ``pulsar.Client.subscribe`` / :class:`ConsumerConfig`)."""
        kwargs.pop("schema", None)
        listener = kwargs.pop("message_listener", None)
        bridge = None
        if listener is not None:
            bridge = kwargs["message_listener"] = ListenerBridge(listener, self._runner)
        consumer = Consumer(
            self._runner, self._runner.run(self._client.subscribe(topic, subscription_name, **kwargs))
        )
        if bridge is not None:
            bridge.bind(consumer)
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **kwargs: Any) -> Reader:
        """Create a reader (keyword arguments of ``pulsar.Client.create_reader`` / :class:`ReaderConfig`)."""
        kwargs.pop("schema", None)
        listener = kwargs.pop("reader_listener", None)
        bridge = None
        if listener is not None:
            bridge = kwargs["reader_listener"] = ListenerBridge(listener, self._runner)
        reader = Reader(
            self._runner, self._runner.run(self._client.create_reader(topic, start_message_id, **kwargs))
        )
        if bridge is not None:
            bridge.bind(reader)
        return reader

    def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition names of ``topic``."""
        return self._runner.run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        """Close everything and stop the event loop thread."""
        if self._runner.closed:
            return
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_client(service_url: str, kwargs: dict[str, Any]) -> AsyncClient:
    return AsyncClient(service_url, **kwargs)


class Producer:
    """Blocking producer (``pulsar.Producer`` shape)."""

    def __init__(self, runner: LoopThread, producer: AsyncProducer | PartitionedProducer) -> None:
        self._runner = runner
        self._producer = producer
        self._block = producer.config.block_if_queue_full
        # a partitioned producer routes in the caller's thread
        self._partitioned = producer if isinstance(producer, PartitionedProducer) else None
        self._lanes_lock = threading.Lock()
        self._lanes: list[SendLane] = []
        self._add_lanes()

    def _partitions(self) -> list[AsyncProducer]:
        if self._partitioned is not None:
            return self._partitioned.producers
        assert isinstance(self._producer, AsyncProducer)
        return [self._producer]

    def _add_lanes(self) -> None:
        with self._lanes_lock:
            producers = self._partitions()
            thread = self._runner.thread
            self._lanes.extend(SendLane(p, thread) for p in producers[len(self._lanes) :])

    def topic(self) -> str:
        """Full topic name."""
        return self._producer.topic

    def producer_name(self) -> str:
        """The producer name."""
        return self._producer.producer_name

    def last_sequence_id(self) -> int:
        """Last sequence id acknowledged by the broker."""
        return self._producer.last_sequence_id

    def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Publish and wait for the receipt (keyword arguments of ``pulsar.Producer.send``)."""
        return self._runner.run(self._producer.send(content, **kwargs))

    def send_async(
        self, content: Any, callback: Callable[[Any, MessageId | None], Any] | None, **kwargs: Any
    ) -> None:
        """Queue a message; ``callback(error_or_None, message_id)`` runs on the loop thread after the receipt.

        Arguments are validated and partitions chosen in the caller's thread (as the official client does);
        with ``block_if_queue_full`` the caller's thread waits here while the (partition's) producer has
        ``max_pending_messages`` queued or pending. The message then joins a queue the loop drains in bursts.

        Raises:
            TypeError / ValueError: bad arguments (checked here, in the caller's thread).
            ProducerQueueIsFullError is passed to the callback when the queue is full and not blocking.
        """
        if kwargs or content.__class__ is not bytes:
            item: Any = make_outgoing(content, **kwargs)  # validated in the caller's thread
            key, size = item.partition_key, len(item.payload)
        else:
            item, key, size = content, None, len(content)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        lanes = self._lanes
        partitioned = self._partitioned
        if partitioned is None:
            lane = lanes[0]
        else:
            index = partitioned.router.choose(item, key, len(partitioned.producers), size)
            if index >= len(lanes):
                self._add_lanes()
            lane = lanes[index]
        if self._block:
            ticket = next(lane.submitted)
            if ticket - lane.taken + lane.producer.pending_messages >= lane.max_pending:  # SendLane.is_full
                lane.wait_for_room(ticket)
        lane.inbox.append((item, callback))
        if not lane.scheduled:
            lane.scheduled = True
            self._runner.call_soon(lane.drain)

    def num_partitions(self) -> int:
        """Partitions of the topic (1 for a topic that is not partitioned)."""
        return len(self._partitions())

    def choose_partition(self, key: str) -> int:
        """The partition the router gives a message with partition key ``key`` (0 when not partitioned)."""
        partitioned = self._partitioned
        if partitioned is None:
            return 0
        return partitioned.router.choose(b"", key, len(partitioned.producers))

    def next_sequence_id(self, partition: int = 0) -> int:
        """The sequence id the producer of ``partition`` gives its next message (the broker's last one + 1
        after connecting)."""
        return self._partitions()[partition].next_sequence_id

    def send_entry(
        self,
        partition: int,
        payload: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        partition_key: str | None,
        callback: Callable[[Any, MessageId | None], Any] | None,
    ) -> None:
        """Queue a pre-built batch entry on the producer of ``partition`` (0 for a topic that is not
        partitioned); see :meth:`quasar.client.producer.Producer.send_entry`. ``callback(error_or_None,
        message_id)`` runs once for the entry, on the loop thread. Does not wait: the caller bounds its entries
        in flight.

        Raises:
            IndexError: no such partition.
        """
        producer = self._partitions()[partition]
        self._runner.call_soon(
            producer.send_entry,
            payload,
            num_messages,
            sequence_id,
            highest_sequence_id,
            partition_key,
            callback,
        )

    def flush(self) -> None:
        """Send the open batch and wait for every pending receipt."""
        self._runner.run(self._producer.flush())

    def close(self) -> None:
        """Flush and close."""
        self._runner.run(self._producer.close())

    def is_connected(self) -> bool:
        """True while connected to the broker(s)."""
        return all(p.is_connected for p in self._partitions())


class Consumer:
    """Blocking consumer (``pulsar.Consumer`` shape)."""

    def __init__(self, runner: LoopThread, consumer: AsyncConsumer | MultiTopicsConsumer) -> None:
        self._runner = runner
        self._consumer = consumer
        self._queue: ReceiverQueue = consumer.queue
        self._messages = self._queue.messages
        # Work for the loop thread, drained in one call (one wake-up serves many messages): messages taken
        # by receive (their hand-out: flow permits), then acks (a Message) and other calls ((fn, arg)).
        self._handed: collections.deque[Message] = collections.deque()
        self._acked: collections.deque[Any] = collections.deque()
        self._drain_scheduled = False

    def topic(self) -> str:
        """Topic name(s)."""
        return self._consumer.topic

    def subscription_name(self) -> str:
        """Subscription name."""
        return self._consumer.subscription_name

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ReceiveTimeoutError after ``timeout_millis`` ms.

        A queued message is taken in the caller's thread; its hand-out (flow permit) reaches the loop later,
        batched with others. Only an empty queue costs a round trip to the loop thread.
        """
        messages = self._messages
        queue = self._queue
        if messages and queue.listener is None and not queue.closed:
            if timeout_millis is not None and (timeout_millis.__class__ is not int or timeout_millis < 0):
                return self._runner.run(queue.receive(timeout_millis))  # raises the argument error
            try:
                message = messages.popleft()
            except IndexError:
                pass
            else:
                self._handed.append(message)
                if not self._drain_scheduled:
                    self._schedule_drain()
                return message
        return self._runner.run(queue.receive(timeout_millis))

    def _schedule_drain(self) -> None:
        self._drain_scheduled = True
        self._runner.call_soon(self._drain)

    def _drain(self) -> None:
        """On the loop thread: hand-outs first (every ack refers to a message handed out before), then acks."""
        self._drain_scheduled = False
        handed = self._handed
        while handed:
            message = handed.popleft()
            message.entry.flow.handed_out(message)
        acked = self._acked
        while acked:
            op = acked.popleft()
            try:
                if op.__class__ is Message:
                    op.entry.consumer.acknowledge_nowait(op)
                else:
                    op[0](op[1])
            except ClientError as exc:
                log.info("ack ignored: %s", exc)
            except Exception:
                log.exception("quasar.client: consumer call %r failed", op)

    def _defer(self, op: Any) -> None:
        self._acked.append(op)
        if not self._drain_scheduled:
            self._schedule_drain()

    def batch_receive(self, max_num_messages: int = 100, timeout_ms: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages, waiting at most ``timeout_ms`` for the first."""
        return self._runner.run(self._queue.batch_receive(max_num_messages, timeout_ms))

    def _child(self, message: Message | MessageId) -> AsyncConsumer:
        if isinstance(message, Message):
            child: AsyncConsumer = message.entry.consumer
            return child
        if isinstance(self._consumer, MultiTopicsConsumer):
            return self._consumer.child_of(message)[0]
        return self._consumer

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge (fire-and-forget; waits for the receipt when ``ack_receipt_enabled``)."""
        if message.__class__ is Message:
            child = message.entry.consumer
            if not child.config.ack_receipt_enabled:
                self._defer(message)
                return
        elif not isinstance(message, (Message, MessageId)):
            raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")
        child = self._child(message)
        if child.config.ack_receipt_enabled:
            self._runner.run(child.acknowledge(message))
        else:
            self._defer((child.acknowledge_nowait, message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Cumulative acknowledge (raises ValueError on Shared / KeyShared)."""
        if not isinstance(message, (Message, MessageId)):
            raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")
        self._runner.run(self._child(message).acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Negative acknowledge: redelivery after ``negative_ack_redelivery_delay_ms``."""
        if not isinstance(message, (Message, MessageId)):
            raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")
        self._defer((self._child(message).negative_acknowledge_nowait, message))

    def reconsume_later(
        self, message: Message, delay_ms: int, properties: dict[str, str] | None = None
    ) -> None:
        """Retry ``message`` after ``delay_ms`` ms through the retry-letter topic, then acknowledge it; past
        ``max_redeliver_count`` retries it goes to the dead-letter topic (Java ``reconsumeLater``; needs
        ``retry_enable=True``, see :meth:`quasar.client.consumer.Consumer.reconsume_later`). Blocks until the
        copy is stored.

        Raises:
            TypeError: bad arguments. ClientError: no ``retry_enable``; publishing / ack errors.
        """
        self._runner.run(self._consumer.reconsume_later(message, delay_ms, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacked message."""
        self._runner.call_soon(self._consumer.redeliver_unacknowledged_messages)

    def seek(self, target: MessageId | int) -> None:
        """Seek to a message id or a publish time (int ms)."""
        self._runner.run(self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        """Last message id of the topic."""
        return self._runner.run(self._consumer.get_last_message_id())

    def unsubscribe(self) -> None:
        """Delete the subscription and close."""
        self._runner.run(self._consumer.unsubscribe())

    def close(self) -> None:
        """Close the consumer."""
        self._runner.run(self._consumer.close())

    def is_connected(self) -> bool:
        """True while connected."""
        return self._consumer.is_connected


class Reader:
    """Blocking reader (``pulsar.Reader`` shape)."""

    def __init__(self, runner: LoopThread, reader: AsyncReader) -> None:
        self._runner = runner
        self._reader = reader

    def topic(self) -> str:
        """Topic name."""
        return self._reader.topic

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; ReceiveTimeoutError after ``timeout_millis`` ms."""
        return self._runner.run(self._reader.read_next(timeout_millis))

    def read_batch(self, max_num_messages: int = 100, timeout_millis: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages in one loop round trip (``[]`` after ``timeout_millis`` ms with
        none); a Quasar extension, see :meth:`quasar.client.reader.Reader.read_batch`."""
        return self._runner.run(self._reader.read_batch(max_num_messages, timeout_millis))

    def read_entries(self, max_entries: int = 100, timeout_millis: int = 100) -> list[StoredEntry]:
        """Up to ``max_entries`` whole entries in one loop round trip (``[]`` after ``timeout_millis`` ms with
        none); see :meth:`quasar.client.reader.Reader.read_entries` (``deliver_entries=True`` readers)."""
        return self._runner.run(self._reader.read_entries(max_entries, timeout_millis))

    def has_message_available(self) -> bool:
        """True when there is something left to read."""
        return self._runner.run(self._reader.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        """Seek to a message id or a publish time (int ms)."""
        self._runner.run(self._reader.seek(target))

    def close(self) -> None:
        """Close the reader."""
        self._runner.run(self._reader.close())

    def is_connected(self) -> bool:
        """True while connected."""
        return self._reader.is_connected()
