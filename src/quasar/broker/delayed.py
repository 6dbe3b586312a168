"""Delayed delivery tracker of a Shared subscription (Pulsar ``InMemoryDelayedDeliveryTracker``, B6).

A message whose MessageMetadata carries ``deliver_at_time`` (ms since the epoch; ``deliverAfter`` is turned
into it by the client) is not dispatched when read: its position is held here, in time order, and handed
back for delivery once due. With ``strict=False`` (Pulsar ``isDelayedDeliveryDeliverAtTimeStrict=false``) a
message may go out up to one ``tick_ms`` (``delayedDeliveryTickTimeMillis`` 1000) early. Nothing is persisted:
after a restart the cursor re-reads the unacknowledged backlog and every still-delayed message is tracked
again, so delays survive restarts and crashes.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable

from quasar.ledger.position import Position

__all__ = ["DelayedDeliveryTracker"]


class DelayedDeliveryTracker:
    """Positions waiting for their delivery time; ``on_due(positions)`` is called on the event loop when some
    become due (at most once per ``tick_ms``)."""

    def __init__(
        self,
        on_due: Callable[[list[Position]], None],
        *,
        tick_ms: int = 1000,
        strict: bool = False,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._on_due = on_due
        self._tick_ms = tick_ms
        self._strict = strict
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._heap: list[tuple[int, Position]] = []
        self._tracked: set[Position] = set()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._tracked)

    def is_delayed(self, deliver_at_ms: int) -> bool:
        """Whether a message due at ``deliver_at_ms`` must still wait (within one tick counts as due unless
        strict)."""
        now = self._clock_ms()
        return deliver_at_ms > now if self._strict else deliver_at_ms - self._tick_ms > now

    def add(self, position: Position, deliver_at_ms: int) -> None:
        """Hold ``position`` until ``deliver_at_ms`` (idempotent)."""
        if position in self._tracked:
            return
        self._tracked.add(position)
        heapq.heappush(self._heap, (deliver_at_ms, position))
        self._arm()

    def clear(self) -> None:
        self._heap.clear()
        self._tracked.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if not self._heap:
            return
        deliver_at = self._heap[0][0]
        delay_s = max((deliver_at - (0 if self._strict else self._tick_ms) - self._clock_ms()) / 1000, 0.0)
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        due: list[Position] = []
        while self._heap and not self.is_delayed(self._heap[0][0]):
            _, position = heapq.heappop(self._heap)
            self._tracked.discard(position)
            due.append(position)
        if due:
            self._on_due(due)
        self._arm()
