"""The receiving side shared by single-topic and multi-topic consumers: the receiver queue and its waiters.

Messages arrive with :meth:`ConsumerBase._enqueue_many` (one entry at a time); ``receive`` pops them in
arrival order, without creating a Future when a message is already queued. When a message is
handed to the application, its own (single-topic) consumer is told (``_on_handed_out``), which counts a
flow permit back (refill FLOW at half the receiver queue, reference/pulsar-protocol.md §6.9) and starts the
ack timeout. A message listener, when configured, replaces ``receive``: one owned task hands each message to
it in order.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from typing import Any

from ._tasks import TaskOwner
from .errors import AlreadyClosedError, ReceiveTimeoutError
from .message import Message

__all__ = ["ConsumerBase"]

log = logging.getLogger("quasar.client")


class ConsumerBase:
    """Receiver queue + ``receive`` / ``batch_receive`` / async iteration."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: collections.deque[Message] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._tasks = TaskOwner(name)
        self._state = "connecting"
        self._listener: Any = None

    # subclasses: _check_open(), _on_empty_receive()

    def _check_open(self) -> None:
        if self._state in ("closing", "closed"):
            raise AlreadyClosedError("consumer is closed")

    def _on_empty_receive(self) -> None:
        """Hook: a receive found the queue empty (zero-queue consumers send FLOW(1) here)."""

    def _enqueue_many(self, messages: list[Message]) -> None:
        """Append the messages of one entry in order and wake one waiting ``receive``."""
        if not messages:
            return
        self._queue.extend(messages)
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _hand_out(self, message: Message) -> Message:
        consumer = message._consumer
        if consumer is not None:
            consumer._on_handed_out(message)
        return message

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message, waiting up to ``timeout_millis`` ms (None = forever).

        Raises:
            TypeError / ValueError: bad ``timeout_millis``. ReceiveTimeoutError: nothing arrived in time.
            AlreadyClosedError: the consumer is (or gets) closed.
        """
        if timeout_millis is not None and (timeout_millis.__class__ is not int or timeout_millis < 0):
            _check_timeout(timeout_millis)
        queue = self._queue
        if queue and self._listener is None and self._state not in ("closing", "closed"):
            message = queue.popleft()  # fast path: no await when a message is queued
            message._entry.consumer._on_handed_out(message)
            return message
        self._check_open()
        if self._listener is not None:
            raise ValueError("receive() cannot be used on a consumer with a message_listener")
        if queue:
            return self._hand_out(queue.popleft())
        deadline = None if timeout_millis is None else self._loop.time() + timeout_millis / 1000
        self._on_empty_receive()
        while not queue:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                if deadline is None:
                    await waiter
                else:
                    remaining = deadline - self._loop.time()
                    if remaining <= 0:
                        raise ReceiveTimeoutError(f"no message within {timeout_millis} ms")
                    await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                raise ReceiveTimeoutError(f"no message within {timeout_millis} ms") from None
            self._check_open()
        return self._hand_out(queue.popleft())

    def receive_nowait(self) -> Message | None:
        """The next message if one is queued, else None."""
        self._check_open()
        return self._hand_out(self._queue.popleft()) if self._queue else None

    async def batch_receive(self, max_num_messages: int = 100, timeout_ms: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages: waits up to ``timeout_ms`` for the first, then takes what is
        queued (Java ``BatchReceivePolicy`` defaults: -1 messages / 10 MiB / 100 ms; here 100 messages)."""
        if not isinstance(max_num_messages, int) or max_num_messages < 1:
            raise ValueError(f"max_num_messages must be an int >= 1, got {max_num_messages!r}")
        messages: list[Message] = []
        try:
            messages.append(await self.receive(timeout_ms))
        except ReceiveTimeoutError:
            return messages
        queue = self._queue
        while queue and len(messages) < max_num_messages:
            messages.append(self._hand_out(queue.popleft()))
        return messages

    def __aiter__(self) -> ConsumerBase:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosedError:
            raise StopAsyncIteration from None

    def _start_listener(self, listener: Any, target: Any) -> None:
        self._listener = listener
        self._tasks.spawn(self._listen(listener, target), name="message-listener")

    async def _listen(self, listener: Any, target: Any) -> None:
        queue = self._queue
        while self._state not in ("closing", "closed"):
            if not queue:
                waiter: asyncio.Future[None] = self._loop.create_future()
                self._waiters.append(waiter)
                self._on_empty_receive()
                await waiter
                continue
            message = self._hand_out(queue.popleft())
            try:
                result = listener(target, message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("message listener failed on %s", message)

    def _drop_queued(self, consumer: Any) -> int:
        """Remove queued messages of ``consumer`` (on its reconnect); returns how many."""
        before = len(self._queue)
        kept = [m for m in self._queue if m._consumer is not consumer]
        self._queue.clear()
        self._queue.extend(kept)
        return before - len(kept)


def _check_timeout(timeout_millis: object) -> None:
    if not isinstance(timeout_millis, int) or isinstance(timeout_millis, bool):
        raise TypeError(f"timeout_millis must be an int, got {type(timeout_millis).__name__}")
    if timeout_millis < 0:
        raise ValueError(f"timeout_millis must be >= 0, got {timeout_millis}")
