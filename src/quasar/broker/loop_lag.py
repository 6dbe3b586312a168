"""LoopLagMonitor: how late the broker's event loop runs its callbacks (a stalled loop delays every
connection), measured by an owned ticker task, and the admin endpoint that reports it.

Every ``interval_s`` the ticker sleeps; the lag of one tick is how much later than asked it woke up (the
time the loop spent on other work before it could run the ticker, e.g. a blocking call). The monitor keeps the
maximum and the number of ticks since the last reset, and, for ``GET /metrics``, the last tick's lag and every
tick's lag in Pulsar's latency buckets since the start (``topic_stats.LatencyBuckets``; never reset).

``GET /admin/v2/broker-stats/loop-lag`` -> ``{"maxLagMs": float, "ticks": int, "intervalMs": float}``;
with ``?reset=true`` the maximum and the count restart from zero after the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiohttp import web

from quasar.broker.topic_stats import LatencyBuckets

__all__ = ["LOOP_LAG_MONITOR", "LoopLagMonitor", "add_loop_lag_route"]


class LoopLagMonitor:
    """Owns one ticker task between :meth:`start` and :meth:`stop` (``interval_s`` > 0)."""

    def __init__(self, interval_s: float = 0.02) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self.max_lag_s = 0.0
        self.ticks = 0
        self.last_lag_s = 0.0
        self.lag_buckets = LatencyBuckets()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the ticker on the running loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick(), name="broker-loop-lag")

    async def stop(self) -> None:
        """Cancel the ticker and wait for it (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def reset(self) -> None:
        """Start a new measurement window: max lag and tick count back to 0."""
        self.max_lag_s = 0.0
        self.ticks = 0

    def snapshot(self) -> dict[str, float | int]:
        """``{"maxLagMs", "ticks", "intervalMs"}``: the largest lateness of a tick (ms) since the last reset,
        the ticks counted, and the tick interval (ms); the JSON of ``GET /admin/v2/broker-stats/loop-lag``."""
        return {"maxLagMs": self.max_lag_s * 1000, "ticks": self.ticks, "intervalMs": self.interval_s * 1000}

    async def _tick(self) -> None:
        interval = self.interval_s
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(interval)
            lag = time.perf_counter() - asked - interval
            self.ticks += 1
            self.last_lag_s = lag
            self.lag_buckets.observe(lag)
            if lag > self.max_lag_s:
                self.max_lag_s = lag


LOOP_LAG_MONITOR = web.AppKey("loop_lag_monitor", LoopLagMonitor)


async def _get_loop_lag(request: web.Request) -> web.Response:
    monitor = request.app[LOOP_LAG_MONITOR]
    reset = request.query.get("reset", "false").lower()
    if reset not in ("true", "false") or len(request.query.getall("reset", [])) > 1:
        raise ValueError(f"query parameter 'reset' must be true or false, got {reset!r:.50}")  # admin: 400
    body = monitor.snapshot()
    if reset == "true":
        monitor.reset()
    return web.json_response(body)


def add_loop_lag_route(app: web.Application, monitor: LoopLagMonitor) -> None:
    """Serve ``monitor`` at ``GET /admin/v2/broker-stats/loop-lag`` on the admin ``app``."""
    app[LOOP_LAG_MONITOR] = monitor
    app.router.add_get("/admin/v2/broker-stats/loop-lag", _get_loop_lag)
