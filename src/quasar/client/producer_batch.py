"""The producer's open batch and its publish-delay timer (seed 000; Java ``ProducerImpl.batchMessageAndSend``).

A batch is closed when full (see :class:`~quasar.client.batch.BatchMessageContainer`) or
``batching_max_publish_delay_ms`` after its first message, whichever comes first; the closed batch goes to the
``on_batch`` callback given by the owner (the producer encodes and sends it). The timer is owned here and
cancelled by :meth:`Batcher.close`.

For the producer's hot path (a message given as bare payload bytes) the container's ``add_plain`` may be
called directly, followed by :meth:`Batcher.send` when it reports the batch full, else :meth:`Batcher.arm_timer`
when ``timer`` is None: that is :meth:`Batcher.add_plain` without one call frame per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .batch import BatchMessageContainer, BuiltBatch
from .message import OutgoingMessage

__all__ = ["Batcher"]


class Batcher:
    """One producer's open batch.

    Args:
        container: the (empty) batch container, sized from the producer config and the broker's
            ``max_message_size``.
        delay_seconds: ``batching_max_publish_delay_ms / 1000``.
        loop: the event loop running the timer.
        on_batch: called with each closed batch, on the loop thread.

    Attributes:
        container: the open batch (read it; add to it only as the module docstring says).
        timer: the publish-delay timer while one runs, else None.
    """

    __slots__ = ("_add_plain", "_container", "_delay", "_loop", "_on_batch", "container", "timer")

    def __init__(
        self,
        container: BatchMessageContainer,
        delay_seconds: float,
        loop: asyncio.AbstractEventLoop,
        on_batch: Callable[[BuiltBatch], None],
    ) -> None:
        self.container = self._container = container
        self._add_plain = container.add_plain
        self._delay = delay_seconds
        self._loop = loop
        self._on_batch = on_batch
        self.timer: asyncio.TimerHandle | None = None

    @property
    def is_empty(self) -> bool:
        """True when no message waits in the open batch."""
        return self._container.num_messages == 0

    def has_room(self, size: int) -> bool:
        """True when a message of ``size`` payload bytes fits the open batch (seed 000 ``haveEnoughSpace``)."""
        return self._container.has_enough_space(size)

    def add_plain(self, payload: bytes, sequence_id: int, waiter: Any) -> bool:
        """Add a message given as bare payload bytes; False (nothing added) when the open batch has no room for
        it. The batch is closed at once when full, else the publish-delay timer runs."""
        full = self._add_plain(payload, sequence_id, waiter)
        if full is None:
            return False
        if full:
            self.send()
        elif self.timer is None:
            self.timer = self._loop.call_later(self._delay, self._on_timer)
        return True

    def arm_timer(self) -> None:
        """Start the publish-delay timer (after a first message went into the open batch)."""
        self.timer = self._loop.call_later(self._delay, self._on_timer)

    def add(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> None:
        """Add a message the open batch has room for (:meth:`has_room`); closes the batch when it is full."""
        if self._container.add(message, sequence_id, waiter):
            self.send()
        elif self.timer is None:
            self.timer = self._loop.call_later(self._delay, self._on_timer)

    def add_after_send(self, message: OutgoingMessage, sequence_id: int, waiter: Any) -> None:
        """Close the open batch first (if any), then start a new one with ``message`` (no room, or a possible
        duplicate that must go out in a batch of its own, seed 000)."""
        self.send()
        self.add(message, sequence_id, waiter)

    def send(self) -> None:
        """Close the open batch now and hand it to ``on_batch`` (nothing happens when it is empty)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self._container.num_messages:
            self._on_batch(self._container.build())

    def discard(self) -> list[Any]:
        """Drop the open batch; returns the waiters of its messages (to fail them)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return self._container.discard()

    def close(self) -> None:
        """Cancel the publish-delay timer (the producer fails or sends what is left itself)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_timer(self) -> None:
        self.timer = None
        self.send()
