"""Blocking facade shaped like the official ``pulsar.Client``: an asyncio event loop in one daemon thread runs
the :class:`~quasar.client.AsyncClient`; each blocking call submits a coroutine to it and waits.

Hot paths avoid a thread round trip per message: ``send_async`` only schedules the send on the loop (its
callback runs on the loop thread, as the official client runs callbacks on its I/O thread); ``receive`` takes
an already queued message directly and tells the loop afterwards; ``acknowledge`` /
``negative_acknowledge`` are fire-and-forget (as in ``pulsar``), unless ack receipts are enabled.
Message listeners run on a separate listener thread so they may call blocking methods of the consumer.

Callbacks of ``send_async`` receive ``(error, message_id)``: ``error`` is None on success or the
:class:`~quasar.client.errors.ClientError` (the official client passes a ``pulsar.Result`` instead).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from quasar.protocol import MessageId

from .client import AsyncClient
from .consumer import Consumer as AsyncConsumer
from .errors import AlreadyClosedError, ClientError
from .message import Message, make_outgoing
from .multi_consumer import MultiTopicsConsumer
from .reader import Reader as AsyncReader

__all__ = ["Client", "Consumer", "Producer", "Reader"]

log = logging.getLogger("quasar.client")

T = TypeVar("T")

_IGNORED_CLIENT_OPTIONS = frozenset(
    {"io_threads", "message_listener_threads", "concurrent_lookup_requests", "log_conf_file_path", "logger",
     "stats_interval_in_seconds", "listener_name"}
)  # fmt: skip


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="quasar-client-loop", daemon=True)
        self._thread.start()
        self.listener_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quasar-listener")
        self._ops: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._scheduled = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking quasar.client call made on the client's own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop, in submission order; one loop wake-up serves many calls."""
        self._ops.append((callback, args))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        # _scheduled stays True while draining, so callers appending meanwhile do not wake the loop again;
        # the re-check after clearing it catches an append that saw True just before.
        ops = self._ops
        while True:
            while ops:
                callback, args = ops.popleft()
                try:
                    callback(*args)
                except Exception:
                    log.exception("quasar.client: callback %r failed", callback)
            self._scheduled = False
            if not ops:
                return
            self._scheduled = True

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.listener_pool.shutdown(wait=False)
        if not self.loop.is_running():
            self.loop.close()


class Client:
    """Blocking Pulsar client (``pulsar.Client`` shape).

    Args:
        service_url: ``pulsar://host:port``.
        operation_timeout_seconds, connection_timeout_ms, ...: :class:`ClientConfig` fields. ``io_threads``,
            ``message_listener_threads``, ``concurrent_lookup_requests``, ``logger`` ... are accepted and ignored.

    Raises:
        TypeError / ValueError: bad URL or settings; ValueError for TLS / authentication (not supported).
    """

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        if kwargs.pop("authentication", None) is not None:
            raise ValueError("authentication is not supported by quasar.client")
        if kwargs.pop("use_tls", False):
            raise ValueError("use_tls is not supported by quasar.client")
        for name in list(kwargs):
            if name in _IGNORED_CLIENT_OPTIONS or name.startswith("tls_"):
                kwargs.pop(name)
        self._runner = _LoopThread()
        try:
            self._client = self._runner.run(_make_client(service_url, kwargs))
        except BaseException:
            self._runner.stop()
            raise
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise AlreadyClosedError("client is closed")
        return self._runner.run(coro)

    def create_producer(self, topic: str, **kwargs: Any) -> Producer:
        """Create a producer (keyword arguments of ``pulsar.Client.create_producer`` / :class:`ProducerConfig`)."""
        kwargs.pop("schema", None)
        return Producer(self, self._run(self._client.create_producer(topic, **kwargs)))

    def subscribe(
        self, topic: str | list[str] | re.Pattern[str], subscription_name: str, **kwargs: Any
    ) -> Consumer:
        """Subscribe (keyword arguments of ``pulsar.Client.subscribe`` / :class:`ConsumerConfig`)."""
        kwargs.pop("schema", None)
        listener = kwargs.pop("message_listener", None)
        consumer = Consumer(self, None)
        if listener is not None:
            kwargs["message_listener"] = self._wrap_listener(listener, consumer)
        consumer._consumer = self._run(self._client.subscribe(topic, subscription_name, **kwargs))
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **kwargs: Any) -> Reader:
        """Create a reader (keyword arguments of ``pulsar.Client.create_reader`` / :class:`ReaderConfig`)."""
        kwargs.pop("schema", None)
        listener = kwargs.pop("reader_listener", None)
        reader = Reader(self, None)
        if listener is not None:
            kwargs["reader_listener"] = self._wrap_listener(listener, reader)
        reader._reader = self._run(self._client.create_reader(topic, start_message_id, **kwargs))
        return reader

    def _wrap_listener(self, listener: Callable[[Any, Message], Any], target: Any) -> Callable[..., Any]:
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        loop = self._runner.loop
        pool = self._runner.listener_pool

        async def run(_consumer: Any, message: Message) -> None:
            await loop.run_in_executor(pool, listener, target, message)

        return run

    def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition names of ``topic``."""
        return self._run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        """Close everything and stop the event loop thread."""
        if self._closed:
            return
        try:
            self._runner.run(self._client.close())
        finally:
            self._closed = True
            self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_client(service_url: str, kwargs: dict[str, Any]) -> AsyncClient:
    return AsyncClient(service_url, **kwargs)


class _Lane:
    """The blocking facade's way into one (partition) producer: ``block_if_queue_full`` admission without a
    thread round trip per message.

    The caller's thread appends ``(message, callback)`` to ``inbox`` and schedules :meth:`drain` on the loop
    once per burst (``scheduled``); the drain hands every queued message to the producer. With
    ``block_if_queue_full`` the caller first takes a ticket (``submitted``, atomic under the GIL) and waits while
    the messages queued but not yet taken (``ticket - taken``) plus the producer's pending ones reach
    ``max_pending_messages``; the loop counts ``taken`` and wakes waiters from the producer's ``on_release``
    (once per receipt, not per message). Waits re-check every 50 ms as a safety net. A ``send_async`` made on
    the loop thread itself (e.g. from a send callback) never waits: nothing could make room meanwhile.
    """

    __slots__ = (
        "event", "inbox", "loop_thread", "max_pending", "producer", "scheduled", "submitted", "taken", "waiting",
    )  # fmt: skip

    def __init__(self, producer: Any, loop_thread: threading.Thread) -> None:
        self.producer = producer
        self.loop_thread = loop_thread
        self.max_pending: int = producer.config.max_pending_messages
        self.inbox: collections.deque[tuple[Any, Any]] = collections.deque()
        self.scheduled = False
        self.submitted = itertools.count()
        self.taken = 0
        self.event = threading.Event()
        self.waiting = False
        producer.on_release = self.wake

    def wake(self) -> None:
        """Loop thread: room may have been made."""
        if self.waiting:
            self.waiting = False
            self.event.set()

    def drain(self) -> None:
        """Loop thread: hand every queued message to the producer, in order (``scheduled`` stays True meanwhile;
        the re-check after clearing it catches a message appended by a caller that saw True)."""
        inbox = self.inbox
        send = self.producer.send_with_callback
        while True:
            while inbox:
                item, callback = inbox.popleft()
                try:
                    send(item, callback)
                except Exception:
                    log.exception("quasar.client: send_async failed")
                self.taken += 1
            self.scheduled = False
            if not inbox:
                return
            self.scheduled = True

    def wait_for_room(self, ticket: int) -> None:
        """Caller's thread: block until message ``ticket`` fits (or the producer is no longer open)."""
        producer = self.producer
        if threading.current_thread() is self.loop_thread:
            return
        while ticket - self.taken + producer._pending_messages >= self.max_pending:
            if producer._state in ("closing", "closed", "failed"):
                return  # the loop fails it with AlreadyClosedError
            self.event.clear()
            self.waiting = True
            if ticket - self.taken + producer._pending_messages < self.max_pending:
                return
            self.event.wait(0.05)


class Producer:
    """Blocking producer (``pulsar.Producer`` shape)."""

    def __init__(self, client: Client, producer: Any) -> None:
        self._client = client
        self._producer = producer
        self._runner = client._runner
        self._block = producer.config.block_if_queue_full
        # a partitioned producer routes in the caller's thread
        self._router = getattr(producer, "router", None)
        self._lanes_lock = threading.Lock()
        self._lanes: list[_Lane] = []
        self._add_lanes()

    def _add_lanes(self) -> None:
        with self._lanes_lock:
            producers = getattr(self._producer, "producers", [self._producer])
            thread = self._runner._thread
            self._lanes.extend(_Lane(p, thread) for p in producers[len(self._lanes) :])

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
        return self._client._run(self._producer.send(content, **kwargs))

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
        if self._router is None:
            lane = lanes[0]
        else:
            producers = self._producer.producers
            index = self._router.choose(item, key, len(producers), size)
            if index >= len(lanes):
                self._add_lanes()
            lane = lanes[index]
        if self._block:
            ticket = next(lane.submitted)
            if ticket - lane.taken + lane.producer._pending_messages >= lane.max_pending:
                lane.wait_for_room(ticket)
        lane.inbox.append((item, callback))
        if not lane.scheduled:
            lane.scheduled = True
            self._runner.call_soon(lane.drain)

    def flush(self) -> None:
        """Send the open batch and wait for every pending receipt."""
        self._client._run(self._producer.flush())

    def close(self) -> None:
        """Flush and close."""
        self._client._run(self._producer.close())

    def is_connected(self) -> bool:
        """True while connected to the broker(s)."""
        producers = getattr(self._producer, "producers", [self._producer])
        return all(p.is_connected for p in producers)


class Consumer:
    """Blocking consumer (``pulsar.Consumer`` shape)."""

    def __init__(self, client: Client, consumer: AsyncConsumer | MultiTopicsConsumer | None) -> None:
        self._client = client
        self._consumer: Any = consumer
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
        consumer = self._consumer
        queue = consumer._queue
        if queue and consumer._listener is None and consumer._state not in ("closing", "closed"):
            if timeout_millis is not None and (timeout_millis.__class__ is not int or timeout_millis < 0):
                return self._client._run(consumer.receive(timeout_millis))  # raises the argument error
            try:
                message = queue.popleft()
            except IndexError:
                pass
            else:
                self._handed.append(message)
                if not self._drain_scheduled:
                    self._schedule_drain()
                return message
        return self._client._run(consumer.receive(timeout_millis))

    def _schedule_drain(self) -> None:
        self._drain_scheduled = True
        self._client._runner.call_soon(self._drain)

    def _drain(self) -> None:
        """On the loop thread: hand-outs first (every ack refers to a message handed out before), then acks."""
        self._drain_scheduled = False
        handed = self._handed
        while handed:
            message = handed.popleft()
            message._entry.consumer._on_handed_out(message)
        acked = self._acked
        while acked:
            op = acked.popleft()
            try:
                if op.__class__ is Message:
                    op._entry.consumer.acknowledge_nowait(op)
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
        return self._client._run(self._consumer.batch_receive(max_num_messages, timeout_ms))

    def _child(self, message: Message | MessageId) -> Any:
        if isinstance(message, Message) and message._consumer is not None:
            return message._consumer
        if isinstance(self._consumer, MultiTopicsConsumer):
            return self._consumer._child_of(message)[0]
        return self._consumer

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge (fire-and-forget; waits for the receipt when ``ack_receipt_enabled``)."""
        if message.__class__ is Message:
            child = message._entry.consumer  # type: ignore[union-attr]
            if not child.config.ack_receipt_enabled:
                self._defer(message)
                return
        elif not isinstance(message, (Message, MessageId)):
            raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")
        child = self._child(message)
        if child.config.ack_receipt_enabled:
            self._client._run(child.acknowledge(message))
        else:
            self._defer((child.acknowledge_nowait, message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Cumulative acknowledge (raises ValueError on Shared / KeyShared)."""
        if not isinstance(message, (Message, MessageId)):
            raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")
        child = self._child(message)
        if child._shared:
            raise ValueError("acknowledge_cumulative is not allowed on a Shared or KeyShared subscription")
        self._client._run(child.acknowledge_cumulative(message))

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
        self._client._run(self._consumer.reconsume_later(message, delay_ms, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacked message."""
        self._client._runner.call_soon(self._consumer.redeliver_unacknowledged_messages)

    def seek(self, target: MessageId | int) -> None:
        """Seek to a message id or a publish time (int ms)."""
        self._client._run(self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        """Last message id of the topic."""
        return self._client._run(self._consumer.get_last_message_id())

    def unsubscribe(self) -> None:
        """Delete the subscription and close."""
        self._client._run(self._consumer.unsubscribe())

    def close(self) -> None:
        """Close the consumer."""
        self._client._run(self._consumer.close())

    def is_connected(self) -> bool:
        """True while connected."""
        return self._consumer.is_connected


class Reader:
    """Blocking reader (``pulsar.Reader`` shape)."""

    def __init__(self, client: Client, reader: AsyncReader | None) -> None:
        self._client = client
        self._reader: Any = reader

    def topic(self) -> str:
        """Topic name."""
        return self._reader.topic

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; ReceiveTimeoutError after ``timeout_millis`` ms."""
        return self._client._run(self._reader.read_next(timeout_millis))

    def read_batch(self, max_num_messages: int = 100, timeout_millis: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages in one loop round trip (``[]`` after ``timeout_millis`` ms with
        none); a Quasar extension, see :meth:`quasar.client.reader.Reader.read_batch`."""
        return self._client._run(self._reader.read_batch(max_num_messages, timeout_millis))

    def has_message_available(self) -> bool:
        """True when there is something left to read."""
        return self._client._run(self._reader.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        """Seek to a message id or a publish time (int ms)."""
        self._client._run(self._reader.seek(target))

    def close(self) -> None:
        """Close the reader."""
        self._client._run(self._reader.close())

    def is_connected(self) -> bool:
        """True while connected."""
        return self._reader.is_connected()
