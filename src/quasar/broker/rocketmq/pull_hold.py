"""PullHoldService: pulls that reached the end of a queue wait here for new entries (RocketMQ
``PullRequestHoldService`` + ``NotifyMessageArrivingListener``), woken by the managed ledger's entries
listener, never by polling.

One listener per managed ledger with waiters (registered with the first waiter, removed with the last), one
future per waiting pull; the pull's own task awaits it with its deadline, so no task or timer outlives the
request (a cancelled RPC cancels its await and the ``finally`` unregisters it). Holds are bounded in total and
per client (``x-mq-client-id``): past a bound the pull is refused with :class:`TooManyHoldsError` (the
handlers answer TOO_MANY_REQUESTS, as RocketMQ's pop answers ``POLLING_FULL``), so thousands of idle long polls
cost a bounded amount of memory and never stall the loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Protocol

__all__ = [
    "DEFAULT_MAX_HOLDS_PER_CLIENT",
    "DEFAULT_MAX_HOLDS_TOTAL",
    "HoldableLedger",
    "PullHoldService",
    "TooManyHoldsError",
]

DEFAULT_MAX_HOLDS_TOTAL = 10_000
"""Pulls waiting at once in the broker (RocketMQ bounds its pop long polls at 100,000 per broker)."""
DEFAULT_MAX_HOLDS_PER_CLIENT = 256
"""Pulls one client (``x-mq-client-id``) may have waiting at once."""


class TooManyHoldsError(Exception):
    """No room for one more waiting pull (in total or for this client)."""


class HoldableLedger(Protocol):
    """What a hold needs of a managed ledger: its entries listeners (``ManagedLedger``)."""

    @property
    def name(self) -> str: ...

    def add_entries_listener(self, callback: _Callback) -> None: ...

    def remove_entries_listener(self, callback: _Callback) -> None: ...


class _Callback(Protocol):
    def __call__(self) -> None: ...


class _LedgerHolds:
    """The waiters of one ledger and the one listener that wakes them all."""

    __slots__ = ("ledger", "waiters")

    def __init__(self, ledger: HoldableLedger) -> None:
        self.ledger = ledger
        self.waiters: set[asyncio.Future[None]] = set()

    def wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)


class PullHoldService:
    """Waiting pulls of one broker (loop thread only). ``max_total`` / ``max_per_client`` bound them."""

    def __init__(
        self, max_total: int = DEFAULT_MAX_HOLDS_TOTAL, max_per_client: int = DEFAULT_MAX_HOLDS_PER_CLIENT
    ) -> None:
        if max_total < 1 or max_per_client < 1:
            raise ValueError(f"hold bounds must be >= 1: {max_total}, {max_per_client}")
        self.max_total = max_total
        self.max_per_client = max_per_client
        self._by_ledger: dict[int, _LedgerHolds] = {}
        self._per_client: Counter[str] = Counter()
        self._total = 0

    @property
    def waiting(self) -> int:
        """Pulls waiting now."""
        return self._total

    def waiting_for(self, client_id: str) -> int:
        return self._per_client[client_id]

    async def wait(self, ledger: HoldableLedger, client_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for ``ledger`` to confirm new entries. Returns True when new
        entries arrived, False at the timeout. The caller reads first and calls this only when it found nothing
        (no await in between, so no arrival is missed). Raises :class:`TooManyHoldsError` when the broker or
        ``client_id`` already has the most waiting pulls allowed."""
        if timeout_s <= 0:
            return False
        if self._total >= self.max_total:
            raise TooManyHoldsError(f"{self._total} pulls are waiting in this broker, the limit")
        if self._per_client[client_id] >= self.max_per_client:
            raise TooManyHoldsError(
                f"client {client_id} already has {self.max_per_client} pulls waiting, the limit"
            )
        key = id(ledger)
        holds = self._by_ledger.get(key)
        if holds is None:
            holds = self._by_ledger[key] = _LedgerHolds(ledger)
            ledger.add_entries_listener(holds.wake)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        holds.waiters.add(waiter)
        self._total += 1
        self._per_client[client_id] += 1
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
            return True
        except TimeoutError:
            return False
        finally:
            self._total -= 1
            self._per_client[client_id] -= 1
            if not self._per_client[client_id]:
                del self._per_client[client_id]
            holds.waiters.discard(waiter)
            if not holds.waiters:
                del self._by_ledger[key]
                ledger.remove_entries_listener(holds.wake)

    def wake_all(self) -> None:
        """Wake every waiting pull (shutdown: they answer with what they have at once)."""
        for holds in list(self._by_ledger.values()):
            holds.wake()
