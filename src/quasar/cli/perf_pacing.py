"""Fixed-rate pacing for ``quasar perf produce``: when each message is *intended* to be sent.

At a fixed rate ``r`` (messages per second, over all producers) message ``i`` (0-based) is intended to leave at
``start + i / r``. Its latency is measured from that intended time, not from the moment ``send_async`` was
finally called: when the broker (or a full pending queue) stalls the sender, every message that should have
gone out during the stall is charged the time it waited. This is the correction for *coordinated omission*
(Gil Tene; what ``pulsar-perf produce`` gets from its rate limiter plus ``HdrHistogram``'s recorder).

At rate 0 ("as fast as possible", as ``pulsar-perf -r 0``) there is no schedule: the intended time of a message
is the time its send was called.

The clock and sleep are injectable so the schedule can be tested with a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["FixedRatePacer"]

#: Longest single sleep (s): the sender wakes at least this often to notice a stop request.
MAX_SLEEP_S = 0.05


class FixedRatePacer:
    """The schedule of a fixed-rate sender.

    Args:
        rate: messages per second over the whole run; 0 = no schedule (as fast as possible).
        clock: monotonic clock in seconds (``time.monotonic``).
        sleep: sleeps the given seconds (``time.sleep``).

    Raises:
        ValueError: ``rate`` is negative, NaN or infinite.
    """

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not math.isfinite(rate) or rate < 0:
            raise ValueError(f"rate must be a finite number >= 0 msg/s, got {rate}")
        self.rate = float(rate)
        self.clock = clock
        self._sleep = sleep
        self.start_time = clock()

    def restart(self) -> float:
        """Make "now" the intended time of message 0; returns it (clock seconds)."""
        self.start_time = self.clock()
        return self.start_time

    def intended_time(self, index: int) -> float:
        """Clock time (s) at which message ``index`` (0-based) should be sent: ``start + index / rate``; at
        rate 0, the current clock time."""
        if self.rate == 0:
            return self.clock()
        return self.start_time + index / self.rate

    def due_count(self, now: float) -> int:
        """How many messages (indexes ``0 .. n-1``) are due by clock time ``now``: those whose
        :meth:`intended_time` is ``<= now`` (``floor((now - start) * rate) + 1``, corrected for rounding so that
        it agrees with :meth:`intended_time` exactly); 0 before the start; ``2**62`` (no limit) at rate 0."""
        if self.rate == 0:
            return 2**62
        if now < self.start_time:
            return 0
        count = math.floor((now - self.start_time) * self.rate) + 1
        while self.intended_time(count) <= now:
            count += 1
        while count > 0 and self.intended_time(count - 1) > now:
            count -= 1
        return count

    def wait_until_due(self, index: int, should_stop: Callable[[], bool] | None = None) -> None:
        """Sleep until message ``index`` is due (or ``should_stop()`` turns true, checked every
        :data:`MAX_SLEEP_S`). Returns at once at rate 0 or when the message is already late."""
        if self.rate == 0:
            return
        target = self.start_time + index / self.rate
        while True:
            remaining = target - self.clock()
            if remaining <= 0 or (should_stop is not None and should_stop()):
                return
            self._sleep(min(remaining, MAX_SLEEP_S))
