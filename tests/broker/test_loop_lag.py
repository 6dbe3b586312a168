"""LoopLagMonitor: a blocked event loop shows up as lag; the admin endpoint reports and resets it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web

from quasar.broker.loop_lag import LoopLagMonitor, add_loop_lag_route


async def test_a_blocking_call_on_the_loop_is_measured():
    monitor = LoopLagMonitor(interval_s=0.005)
    monitor.start()
    await asyncio.sleep(0.05)
    assert monitor.ticks > 0 and monitor.max_lag_s < 0.05
    time.sleep(0.12)  # a stall: the loop runs nothing else for 120 ms
    await asyncio.sleep(0.02)
    assert monitor.max_lag_s >= 0.09
    monitor.reset()
    assert monitor.snapshot() == {"maxLagMs": 0.0, "ticks": 0, "intervalMs": 5.0}
    await monitor.stop()
    await monitor.stop()  # idempotent
    ticks = monitor.ticks
    await asyncio.sleep(0.02)
    assert monitor.ticks == ticks  # the ticker is gone
    with pytest.raises(ValueError):
        LoopLagMonitor(interval_s=0)


async def test_admin_endpoint_reports_and_resets():
    monitor = LoopLagMonitor(interval_s=0.005)
    app = web.Application()
    add_loop_lag_route(app, monitor)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    monitor.start()
    try:
        await asyncio.sleep(0.01)  # the ticker is asleep, due in 5 ms
        time.sleep(0.08)
        await asyncio.sleep(0.02)
        url = f"http://127.0.0.1:{port}/admin/v2/broker-stats/loop-lag"
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "?reset=true") as response:
                body = await response.json()
            assert response.status == 200 and body["maxLagMs"] >= 60 and body["intervalMs"] == 5.0
            async with session.get(url) as response:
                assert (await response.json())["maxLagMs"] < 60
    finally:
        await monitor.stop()
        await runner.cleanup()
