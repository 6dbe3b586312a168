"""The machinery under the blocking facade (:mod:`quasar.client.sync`): the event-loop thread, the per-producer
send lanes and the bridge that runs blocking message listeners on their own thread.

* :class:`LoopThread`: an asyncio event loop running forever in one daemon thread. Blocking calls submit a
  coroutine and wait (:meth:`LoopThread.run`); fire-and-forget calls are queued and drained in submission order
  with one loop wake-up for many calls (:meth:`LoopThread.call_soon`). The loop is uvloop's where uvloop is
  installed (:func:`new_event_loop`): the facade owns its loop, so it takes the native one, as the official
  client's I/O thread is native code (the broker runs on uvloop too).
* :class:`SendLane`: the blocking ``send_async`` of one (partition) producer, with ``block_if_queue_full``
  admission in the caller's thread and no thread round trip per message.
* :class:`ListenerBridge`: a message listener given to the blocking facade runs on the listener thread with the
  facade object as its first argument, so it may call blocking methods of that object.

Only the public surface of the asyncio producer is used: ``config``, ``pending_messages``, ``is_open``,
``on_release`` and ``send_with_callback``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .errors import AlreadyClosedError
from .message import Message
from .producer import Producer

__all__ = ["ListenerBridge", "LoopThread", "SendLane", "new_event_loop"]

log = logging.getLogger("quasar.client")

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for the facade's thread: uvloop's when ``uvloop`` can be imported (a dependency of
    quasar except on Windows), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """An event loop running forever in a daemon thread, plus the listener thread pool.

    Args:
        loop_factory: makes the loop (default :func:`new_event_loop`, looked up at call time: uvloop if
            installed).

    Attributes:
        loop: the event loop. thread: the thread running it. listener_pool: one thread for message listeners.
        closed: True once :meth:`stop` was called; :meth:`run` then raises AlreadyClosedError.
    """

    def __init__(self, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
        self.loop = (loop_factory or new_event_loop)()
        self.thread = threading.Thread(target=self._run_forever, name="quasar-client-loop", daemon=True)
        self.thread.start()
        self.listener_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quasar-listener")
        self.closed = False
        self._ops: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._scheduled = False

    def _run_forever(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception) in the caller's thread.

        Raises:
            AlreadyClosedError: the client is closed. RuntimeError: called on the loop thread itself (it would
            wait for itself). concurrent.futures.TimeoutError: ``timeout`` seconds passed.
        """
        if self.closed:
            coro.close()
            raise AlreadyClosedError("client is closed")
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("blocking quasar.client call made on the client's own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop, in submission order; one loop wake-up serves many calls. An
        exception of the callback is logged."""
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
        """Stop the loop and its thread (waits up to 10 s); later :meth:`run` calls raise AlreadyClosedError."""
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.listener_pool.shutdown(wait=False)
        if not self.loop.is_running():
            self.loop.close()


class SendLane:
    """The blocking facade's way into one (partition) producer: ``block_if_queue_full`` admission without a
    thread round trip per message.

    The caller's thread appends ``(message, callback)`` to ``inbox`` and schedules :meth:`drain` on the loop
    once per burst (``scheduled``); the drain hands every queued message to the producer. With
    ``block_if_queue_full`` the caller first takes a ticket (``submitted``, atomic under the GIL) and waits while
    the messages queued but not yet taken (``ticket - taken``) plus the producer's pending ones reach
    ``max_pending_messages``; the loop counts ``taken`` and wakes waiters from the producer's ``on_release``
    (once per receipt, not per message). Waits re-check every 50 ms as a safety net. A ``send_async`` made on
    the loop thread itself (e.g. from a send callback) never waits: nothing could make room meanwhile.

    Args:
        producer: the asyncio :class:`~quasar.client.producer.Producer` (its ``on_release`` is taken over).
        loop_thread: the event loop's thread.
    """

    __slots__ = (
        "event", "inbox", "loop_thread", "max_pending", "producer", "scheduled", "submitted", "taken", "waiting",
    )  # fmt: skip

    def __init__(self, producer: Producer, loop_thread: threading.Thread) -> None:
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

    def is_full(self, ticket: int) -> bool:
        """True when message ``ticket`` does not fit yet (queued-but-not-taken plus pending messages)."""
        return ticket - self.taken + self.producer.pending_messages >= self.max_pending

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
        while self.is_full(ticket):
            if not producer.is_open:
                return  # the loop fails it with AlreadyClosedError
            self.event.clear()
            self.waiting = True
            if not self.is_full(ticket):
                return
            self.event.wait(0.05)


class ListenerBridge:
    """A blocking ``listener(facade, message)`` run on the listener thread for an asyncio consumer or reader.

    The asyncio consumer calls the bridge with its own arguments; the bridge passes the blocking facade object
    instead, which exists only once the subscription is made: :meth:`bind` sets it, and a message arriving
    before that waits for it on the listener thread.

    Args:
        listener: ``f(facade, message)``.
        runner: the :class:`LoopThread` (its listener pool runs the listener).

    Raises:
        TypeError: ``listener`` is not callable.
    """

    __slots__ = ("_bound", "_listener", "_loop", "_pool", "_target")

    def __init__(self, listener: Callable[[Any, Message], Any], runner: LoopThread) -> None:
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        self._listener = listener
        self._loop = runner.loop
        self._pool = runner.listener_pool
        self._target: Any = None
        self._bound = threading.Event()

    def bind(self, target: Any) -> None:
        """The facade object the listener is called with."""
        self._target = target
        self._bound.set()

    async def __call__(self, _consumer: Any, message: Message) -> None:
        await self._loop.run_in_executor(self._pool, self._deliver, message)

    def _deliver(self, message: Message) -> None:
        self._bound.wait()
        self._listener(self._target, message)
