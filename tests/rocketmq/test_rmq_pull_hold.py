"""PullHoldService: long polls woken by the ledger's entries listener, bounded in total and per client, and
leaving no listener behind."""

from __future__ import annotations

import asyncio

import pytest

from quasar.broker.rocketmq.pull_hold import PullHoldService, TooManyHoldsError
from quasar.ledger.listeners import EntriesListeners


class _Ledger:
    """The entries-listener part of a ManagedLedger (the real EntriesListeners)."""

    name = "ledger"

    def __init__(self) -> None:
        self.listeners = EntriesListeners(self.name)

    def add_entries_listener(self, callback):
        self.listeners.add(callback)

    def remove_entries_listener(self, callback):
        self.listeners.remove(callback)


async def test_waiters_wake_on_new_entries_and_unregister():
    holds = PullHoldService()
    ledger = _Ledger()
    waits = [asyncio.create_task(holds.wait(ledger, f"c{i}", 30)) for i in range(3)]
    await asyncio.sleep(0)
    assert holds.waiting == 3
    assert len(ledger.listeners._callbacks) == 1  # one listener per ledger, not one per pull
    ledger.listeners.notify()
    assert await asyncio.wait_for(asyncio.gather(*waits), 5) == [True, True, True]
    assert holds.waiting == 0 and ledger.listeners._callbacks == []


async def test_timeout_and_cancel_release_the_hold():
    holds = PullHoldService()
    ledger = _Ledger()
    assert await holds.wait(ledger, "c", 0.01) is False
    assert await holds.wait(ledger, "c", 0) is False
    task = asyncio.create_task(holds.wait(ledger, "c", 30))
    await asyncio.sleep(0)
    assert holds.waiting_for("c") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holds.waiting == 0 and holds.waiting_for("c") == 0 and ledger.listeners._callbacks == []


async def test_holds_are_bounded_per_client_and_in_total():
    holds = PullHoldService(max_total=3, max_per_client=2)
    ledger = _Ledger()
    waits = [asyncio.create_task(holds.wait(ledger, "a", 30)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(TooManyHoldsError, match="client a"):
        await holds.wait(ledger, "a", 30)
    waits.append(asyncio.create_task(holds.wait(ledger, "b", 30)))
    await asyncio.sleep(0)
    with pytest.raises(TooManyHoldsError, match="in this broker"):
        await holds.wait(ledger, "c", 30)
    holds.wake_all()
    assert await asyncio.wait_for(asyncio.gather(*waits), 5) == [True, True, True]
    assert await holds.wait(ledger, "c", 0.01) is False  # room again
    with pytest.raises(ValueError):
        PullHoldService(max_total=0)
