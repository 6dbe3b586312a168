"""The receiver queue of a consumer: messages received and not yet handed to the application, in arrival
order, and the ``receive`` calls waiting for them (Java ``ConsumerBase.incomingMessages``).

A single-topic consumer owns one; the children of a multi-topic consumer deliver into their parent's. The
broker's MESSAGE frames reach it one entry at a time (:meth:`ReceiverQueue.enqueue_many`); ``receive`` pops in
arrival order without creating a Future when a message is already queued. A message leaves the queue through
:meth:`ReceiverQueue.hand_out`, which tells the flow control of the consumer that received it
(``message.entry.flow``): that counts a flow permit back (refill FLOW at half the receiver queue,
reference/pulsar-protocol.md §6.9) and starts the ack timeout. A message listener, when configured, replaces
``receive``: :meth:`ReceiverQueue.listen` (run as a task owned by the consumer) hands each message to it in
order.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from .errors import AlreadyClosedError, ReceiveTimeoutError
from .message import Message

__all__ = ["ReceiverQueue", "check_timeout"]

log = logging.getLogger("quasar.client")


class ReceiverQueue:
    """Messages waiting to be received.

    Args:
        name: what ``AlreadyClosedError`` names (``"consumer on <topic>"``).
        on_empty_receive: called when a receive finds the queue empty (a zero-queue consumer sends FLOW(1)).

    Attributes:
        messages: the queued messages, oldest first. The blocking facade pops from it in the caller's thread
            (``deque.popleft`` is atomic) and hands the message out on the loop later.
        listener: the message listener once :meth:`listen` runs, else None (then ``receive`` is refused).
        closed: True once the owning consumer is closing; receives then raise AlreadyClosedError.
    """

    __slots__ = ("_loop", "_name", "_on_empty", "_waiters", "closed", "listener", "messages")

    def __init__(self, name: str, on_empty_receive: Callable[[], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._name = name
        self._on_empty = on_empty_receive
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.messages: collections.deque[Message] = collections.deque()
        self.listener: Any = None
        self.closed = False

    def __len__(self) -> int:
        return len(self.messages)

    def check_open(self) -> None:
        """Raise AlreadyClosedError when the owning consumer is closing or closed."""
        if self.closed:
            raise AlreadyClosedError(f"{self._name} is closed")

    def close(self) -> None:
        """Mark the queue closed and wake every waiting receive (each raises AlreadyClosedError)."""
        self.closed = True
        waiters, self._waiters = self._waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def enqueue_many(self, messages: list[Message]) -> None:
        """Append the messages of one entry in order and wake one waiting ``receive``."""
        if not messages:
            return
        self.messages.extend(messages)
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def drop_from(self, consumer: object) -> int:
        """Remove the queued messages received by ``consumer`` (on its re-subscribe); returns how many."""
        before = len(self.messages)
        kept = [m for m in self.messages if m.entry.consumer is not consumer]
        self.messages.clear()
        self.messages.extend(kept)
        return before - len(kept)

    @staticmethod
    def hand_out(message: Message) -> Message:
        """Tell the flow control of the consumer that received ``message`` that the application has it."""
        message.entry.flow.handed_out(message)
        return message

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message, waiting up to ``timeout_millis`` ms (None = forever).

        Raises:
            TypeError / ValueError: bad ``timeout_millis``. ReceiveTimeoutError: nothing arrived in time.
            AlreadyClosedError: the consumer is (or gets) closed. ValueError: a message listener is set.
        """
        if timeout_millis is not None and (timeout_millis.__class__ is not int or timeout_millis < 0):
            check_timeout(timeout_millis)
        queue = self.messages
        if queue and self.listener is None and not self.closed:
            message = queue.popleft()  # fast path: no await when a message is queued
            message.entry.flow.handed_out(message)
            return message
        self.check_open()
        if self.listener is not None:
            raise ValueError("receive() cannot be used on a consumer with a message_listener")
        if queue:
            return self.hand_out(queue.popleft())
        deadline = None if timeout_millis is None else self._loop.time() + timeout_millis / 1000
        if self._on_empty is not None:
            self._on_empty()
        while not queue:
            waiter: asyncio.Future[Any] = self._loop.create_future()
            self._waiters.append(waiter)
            if deadline is None:
                await waiter
            else:
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    raise ReceiveTimeoutError(f"no message within {timeout_millis} ms")
                timer = self._loop.call_later(remaining, _expire, waiter)  # cheaper than asyncio.wait_for
                try:
                    await waiter
                finally:
                    timer.cancel()
                if waiter.result() is _TIMED_OUT:
                    raise ReceiveTimeoutError(f"no message within {timeout_millis} ms")
            self.check_open()
        return self.hand_out(queue.popleft())

    def receive_nowait(self) -> Message | None:
        """The next message if one is queued, else None.

        Raises:
            AlreadyClosedError: the consumer is closed.
        """
        self.check_open()
        return self.hand_out(self.messages.popleft()) if self.messages else None

    async def batch_receive(self, max_num_messages: int = 100, timeout_ms: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages: waits up to ``timeout_ms`` for the first, then takes what is
        queued (Java ``BatchReceivePolicy`` defaults: -1 messages / 10 MiB / 100 ms; here 100 messages).

        Raises:
            ValueError: ``max_num_messages`` is not an int >= 1; as :meth:`receive` otherwise.
        """
        if not isinstance(max_num_messages, int) or max_num_messages < 1:
            raise ValueError(f"max_num_messages must be an int >= 1, got {max_num_messages!r}")
        messages: list[Message] = []
        try:
            messages.append(await self.receive(timeout_ms))
        except ReceiveTimeoutError:
            return messages
        queue = self.messages
        while queue and len(messages) < max_num_messages:
            messages.append(self.hand_out(queue.popleft()))
        return messages

    def listen(self, listener: Any, target: Any) -> Coroutine[Any, Any, None]:
        """Register ``listener`` (``receive`` is refused from now on) and return the coroutine that hands every
        message to ``listener(target, message)`` in order until the queue is closed; the consumer runs it as a
        task it owns. An exception of the listener is logged, and the next message follows."""
        self.listener = listener
        return self._listen(listener, target)

    async def _listen(self, listener: Any, target: Any) -> None:
        queue = self.messages
        while not self.closed:
            if not queue:
                waiter: asyncio.Future[None] = self._loop.create_future()
                self._waiters.append(waiter)
                if self._on_empty is not None:
                    self._on_empty()
                await waiter
                continue
            message = self.hand_out(queue.popleft())
            try:
                result = listener(target, message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("message listener failed on %s", message)


_TIMED_OUT = object()


def _expire(waiter: asyncio.Future[Any]) -> None:
    """A receive's deadline passed: wake it with the time-out marker (unless a message or close woke it)."""
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


def check_timeout(timeout_millis: object) -> None:
    """Raise TypeError unless ``timeout_millis`` is an int (not a bool), ValueError when it is negative."""
    if not isinstance(timeout_millis, int) or isinstance(timeout_millis, bool):
        raise TypeError(f"timeout_millis must be an int, got {type(timeout_millis).__name__}")
    if timeout_millis < 0:
        raise ValueError(f"timeout_millis must be >= 0, got {timeout_millis}")
