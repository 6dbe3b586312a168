"""Helpers of the replication tests: fast HA settings and bounded polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from quasar.replication.config import BrokerRole, ReplicationConfig


def fast_config(**overrides: Any) -> ReplicationConfig:
    """Short intervals so heartbeats, timeouts and set changes happen within a test."""
    values: dict[str, Any] = {
        "broker_role": BrokerRole.ASYNC_MASTER,
        "ha_port": 0,
        "ha_send_heartbeat_interval_s": 0.2,
        "ha_housekeeping_interval_s": 2.0,
        "ha_max_time_slave_not_catchup_s": 1.0,
        "slave_timeout_s": 1.0,
        "ha_reconnect_min_backoff_s": 0.02,
        "ha_reconnect_max_backoff_s": 0.2,
    }
    values.update(overrides)
    return ReplicationConfig(**values)


async def eventually(predicate: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 10 ms until true; AssertionError after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.01)
