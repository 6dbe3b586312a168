"""Negative-ack tracker and ack-timeout (unacked message) tracker of a consumer. Pure: the consumer drives them
from one timer task with a monotonic clock in seconds.

* :class:`NegativeAcksTracker` (Java ``NegativeAcksTracker``, C++ ``NegativeAcksTracker``): a nacked entry is
  redelivered ``negative_ack_redelivery_delay_ms`` (60 000) later, or after ``backoff(redelivery_count)`` ms
  when a backoff is configured (Java ``negativeAckRedeliveryBackoff``). Entries are keyed
  ``(ledger_id, entry_id)``: a nack of a batch item redelivers the whole batch.
* :class:`UnackedMessageTracker` (Java ``UnAckedMessageTracker``): entries handed to the application and not
  acked within ``unacked_messages_timeout_ms`` are redelivered; checked every ``tick_duration_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["NegativeAcksTracker", "UnackedMessageTracker"]

EntryKey = tuple[int, int]


class NegativeAcksTracker:
    """Entries waiting to be redelivered after a negative ack.

    Args:
        delay_ms: ``negative_ack_redelivery_delay_ms``.
        backoff: optional ``f(redelivery_count) -> delay ms``.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        delay_ms: int = 60_000,
        backoff: Callable[[int], int] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.delay_ms = delay_ms
        self._backoff = backoff
        self._clock = clock or time.monotonic
        self._deadlines: dict[EntryKey, float] = {}

    def __len__(self) -> int:
        return len(self._deadlines)

    def add(self, entry: EntryKey, redelivery_count: int = 0) -> None:
        """Schedule ``entry`` for redelivery (a later nack of the same entry keeps the earlier deadline)."""
        delay = self._backoff(redelivery_count) if self._backoff is not None else self.delay_ms
        deadline = self._clock() + max(0, delay) / 1000
        current = self._deadlines.get(entry)
        if current is None or deadline < current:
            self._deadlines[entry] = deadline

    def remove(self, entry: EntryKey) -> None:
        """Forget ``entry`` (it was acked after all)."""
        self._deadlines.pop(entry, None)

    def pop_expired(self) -> list[EntryKey]:
        """Entries whose delay has passed, in entry order; they are removed."""
        now = self._clock()
        due = sorted(e for e, d in self._deadlines.items() if d <= now)
        for entry in due:
            del self._deadlines[entry]
        return due

    def next_deadline(self) -> float | None:
        """Earliest deadline (monotonic seconds), or None when nothing is pending."""
        return min(self._deadlines.values(), default=None)

    def clear(self) -> None:
        """Forget everything."""
        self._deadlines.clear()


class UnackedMessageTracker:
    """Entries handed out and not yet acked (ack timeout).

    Args:
        timeout_ms: ``unacked_messages_timeout_ms`` (> 0).
        clock: monotonic seconds.
    """

    def __init__(self, timeout_ms: int, clock: Callable[[], float] | None = None) -> None:
        self.timeout_ms = timeout_ms
        self._clock = clock or time.monotonic
        self._handed_out: dict[EntryKey, float] = {}

    def __len__(self) -> int:
        return len(self._handed_out)

    def add(self, entry: EntryKey) -> None:
        """Start the timer of ``entry`` (kept if already running: a batch shares one timer)."""
        if entry not in self._handed_out:
            self._handed_out[entry] = self._clock()

    def remove(self, entry: EntryKey) -> None:
        """``entry`` was acked."""
        self._handed_out.pop(entry, None)

    def remove_up_to(self, entry: EntryKey) -> None:
        """Everything at or before ``entry`` was acked cumulatively."""
        for key in [k for k in self._handed_out if k <= entry]:
            del self._handed_out[key]

    def pop_expired(self) -> list[EntryKey]:
        """Entries handed out longer than the timeout ago, in entry order; they are removed."""
        limit = self._clock() - self.timeout_ms / 1000
        due = sorted(e for e, t in self._handed_out.items() if t <= limit)
        for entry in due:
            del self._handed_out[entry]
        return due

    def clear(self) -> None:
        """Forget everything (reconnect)."""
        self._handed_out.clear()
