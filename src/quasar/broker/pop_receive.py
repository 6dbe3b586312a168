"""What a RocketMQ receive holds: popped entries (:class:`PopItem`) and the waiting receive (:class:`PopWaiter`).

The queues that hand entries out are ``pop_consumer.PopQueue``; this module sees them through the
:class:`PopSource` port (what a receive and the RPC handlers call on the queue an entry came from), so the
receive side and the queue's engine stay apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from quasar.broker.subscription import Subscription
from quasar.ledger.position import Position

__all__ = ["PopItem", "PopSource", "PopWaiter"]


class PopSource(Protocol):
    """A pop queue as its entries and receives see it (``pop_consumer.PopQueue`` implements it)."""

    @property
    def group(self) -> str: ...

    @property
    def subscription(self) -> Subscription: ...

    def add_waiter(self, waiter: PopWaiter) -> None: ...

    def remove_waiter(self, waiter: PopWaiter) -> None: ...

    def ack(self, item: PopItem) -> None: ...

    def ack_index(self, item: PopItem, index: int, size: int) -> None: ...

    def acked_indexes(self, item: PopItem) -> int | None: ...

    def change_invisible(self, item: PopItem, invisible_ms: int, index: int | None = None) -> int: ...

    def dead_letter_now(self, item: PopItem) -> None: ...

    def give_back(self, item: PopItem) -> None: ...


@dataclass(slots=True, eq=False)
class PopItem:
    """One entry popped from a queue.

    ``attempt``: delivery attempt (1 on the first delivery; RocketMQ ``delivery_attempt``);
    ``retrieve_ms`` / ``invisible_ms``: when it was handed out (wall clock, ms) and for how long it stays
    invisible (ms); ``key``: its FIFO message group (ordering key), or None.
    """

    queue: PopSource
    position: Position
    queue_offset: int
    data: memoryview
    attempt: int
    key: str | None = None
    retrieve_ms: int = 0
    invisible_ms: int = 0
    dead_lettering: bool = False
    owner: str = ""
    renew_step_ms: int = 0
    renew_until_ms: int = 0
    index_retrieve: dict[int, int] = field(default_factory=dict)
    index_expires: dict[int, int] = field(default_factory=dict)
    version: int = 0

    @property
    def expires_ms(self) -> int:
        """Wall-clock ms at which it becomes visible again (messages of a batch: see ``PopQueue``)."""
        return self.retrieve_ms + self.invisible_ms

    def message_expires_ms(self, index: int | None) -> int:
        """When message ``index`` of the entry (None: the whole entry) is due again."""
        base = self.retrieve_ms + self.invisible_ms
        return base if index is None else self.index_expires.get(index, base)


class PopWaiter:
    """A receive waiting for up to ``room`` entries, each made invisible for ``invisible_ms``. With
    ``auto_renew`` the broker renews their invisible time while client ``owner`` is connected (the proxy's
    auto-renew for push consumers, up to ``pop_consumer.MAX_RENEW_MS``)."""

    def __init__(self, room: int, invisible_ms: int, *, owner: str = "", auto_renew: bool = False) -> None:
        if room < 1:
            raise ValueError(f"a receive needs room for at least one message, not {room}")
        self.room = room
        self.invisible_ms = invisible_ms
        self.owner = owner
        self.auto_renew = auto_renew
        self.items: list[PopItem] = []
        self.queues: list[PopSource] = []
        self._arrived = asyncio.get_running_loop().create_future()

    def take(self, item: PopItem) -> None:
        """A queue hands ``item`` (already in flight) to this receive."""
        self.items.append(item)
        self.room -= 1
        if not self._arrived.done():
            self._arrived.set_result(None)

    async def wait(self, queues: Sequence[PopSource], timeout_s: float) -> list[PopItem]:
        """Wait on ``queues`` up to ``timeout_s`` seconds for a first entry, then take what the same
        dispatch rounds hand over; returns the entries (possibly none). Cancellable: entries taken before a
        cancellation stay in flight and become visible again after their invisible time."""
        try:
            for queue in queues:
                queue.add_waiter(self)
                if self.room <= 0:
                    break
            if not self.items and timeout_s > 0:
                try:
                    async with asyncio.timeout(timeout_s):
                        await asyncio.shield(self._arrived)
                except TimeoutError:
                    pass
            if self.items and self.room > 0:
                await asyncio.sleep(0)  # the other partitions' rounds of this loop iteration
        finally:
            for queue in self.queues:
                queue.remove_waiter(self)
            self.queues.clear()
        return self.items
