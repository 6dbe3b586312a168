"""StatsUpdater: turns the topics' cumulative counters into rates once per stats period (Pulsar's
``BrokerService.updateRates``, every ``statsUpdateFrequencyInSecs``).

Each period ``msgRateIn`` / ``msgThroughputIn`` of a topic become (messages, bytes) published during the period
divided by its length in seconds; ``msgRateOut`` / ``msgThroughputOut`` likewise for what its subscriptions
dispatched (the topic's and each subscription's). ``GET {topic}/stats`` and ``GET /metrics`` read the same
numbers (``topic_stats``). The updater is one owned task: :meth:`start` / :meth:`stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from quasar.broker.broker_service import BrokerService

__all__ = ["StatsUpdater"]

log = logging.getLogger(__name__)


class StatsUpdater:
    """Updates the rates of ``service``'s loaded topics every ``interval_s`` seconds (> 0)."""

    def __init__(self, service: BrokerService, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"stats_update_frequency_in_secs must be > 0, got {interval_s!r}")
        self._service = service
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the periodic task on the running loop (idempotent); the first period starts now."""
        if self._task is None:
            self.update()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-stats-update")

    async def stop(self) -> None:
        """Cancel the task and wait for it (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def update(self, now_s: float | None = None) -> None:
        """Close the current period of every loaded topic and subscription at ``now_s`` (monotonic seconds;
        default now). Loop thread; O(topics + subscriptions)."""
        now = time.monotonic() if now_s is None else now_s
        for topic in list(self._service.topics.values()):
            counters = topic.counters
            counters.rate_in.update(now, counters.msg_in, counters.bytes_in)
            counters.rate_out.update(now, topic.msg_out_counter, topic.bytes_out_counter)
            for subscription in topic.subscriptions.values():
                subscription.rate_out.update(
                    now, subscription.msg_out_counter, subscription.bytes_out_counter
                )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.update()
            except Exception:  # the owned task must not die silently; the next period tries again
                log.exception("updating the topic rates failed")
