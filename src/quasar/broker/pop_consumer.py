"""Pop consumption: RocketMQ 5's POP (receive, invisible time, ack) on a Pulsar subscription.

One :class:`PopQueue` serves one consumer group on one topic partition: the durable subscription of the
group's name on that partition. It attaches one virtual Shared consumer to the subscription while receives wait
or messages are in flight, so the subscription's own dispatcher (redeliveries first, delayed delivery, Shared
round robin with Pulsar consumers of the same subscription) decides what is handed out, and acks go through the
cursor like any Pulsar individual ack.

- A receive is a :class:`PopWaiter` with room for ``batch`` entries; it may wait on several queues (RocketMQ's
  queue id ``-1``: any partition). The virtual consumer's permits are the waiting room, so nothing is read ahead
  of a receive; an entry the dispatcher hands over when no waiter has room goes back to the subscription without
  counting as a redelivery.
- An entry handed to a waiter is *in flight*: invisible to every other receive until ``retrieve_ms +
  invisible_ms`` (wall clock, ms). Its receipt is ``(queue offset, retrieve_ms)``, plus the batch index for a
  message of a Pulsar batch entry; changing the invisible time gives a new ``retrieve_ms`` (strictly larger),
  so an older receipt no longer matches. The messages of a batch entry each have their own receipt and
  invisible time; the entry becomes visible again when every message of it not yet acked is due (RocketMQ's
  ChangeInvisibleDuration acks the old checkpoint).
- Not acked in time: the entry is redelivered through the subscription (Pulsar's redelivery count + 1, so the
  next delivery's ``attempt`` = count + 1). An entry handed over with ``attempt > max_delivery_attempts`` is
  dead-lettered instead (the owner's ``dead_letter`` coroutine copies it, then it is acked), as the RocketMQ
  proxy does on pop (reference rocketmq-grpc.md §6).
- Auto-renew (push consumers): entries received with ``auto_renew`` are renewed ``RENEW_AHEAD_MS`` before
  they would become visible, by their invisible time again, while their client is connected and for at most
  ``MAX_RENEW_MS``; the receipt stays the same. ChangeInvisibleDuration ends the renewals.
- ``accept`` (the group's tag filter) is applied on hand-over; entries it refuses are acked for this group (the
  proxy auto-acks messages whose tag does not match).
- FIFO (``fifo``, RocketMQ orderly consumption): entries of one message group (``key_of``, the ordering key) are
  handed out one at a time, in queue order: the next waits in the queue until the previous one is acked or
  dead-lettered; an expired one is handed out again first, with attempt + 1 (its redelivery count grows the
  same way). At most ``MAX_PARKED`` entries wait per queue; beyond that the dispatcher stops handing over.

The entries and the waiting receive are ``pop_receive`` (``PopItem``, ``PopWaiter``; re-exported here).

Owned asyncio objects: one expiry timer per queue and the dead-letter tasks; :meth:`PopQueue.close` cancels
both (the owner calls it when the queue's topic is unloaded or the broker stops).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from quasar.broker.consumer import Consumer
from quasar.broker.pop_receive import PopItem, PopWaiter
from quasar.broker.subscription import Subscription
from quasar.errors import QuasarError
from quasar.ledger.position import Position
from quasar.protocol.enums import SubType

__all__ = [
    "MAX_PARKED",
    "MAX_RENEW_MS",
    "RENEW_AHEAD_MS",
    "PopItem",
    "PopQueue",
    "PopWaiter",
]  # items: pop_receive

log = logging.getLogger(__name__)

MAX_RENEW_MS = 3 * 3600 * 1000
"""Auto-renewal stops this long after an entry was handed out (the proxy's ``renewMaxTimeMillis``, 3 h)."""
RENEW_AHEAD_MS = 10_000
"""An auto-renewed entry is renewed this long before it would become visible (the proxy's 10 s)."""

MAX_PARKED = 1000
"""Entries of blocked FIFO message groups one queue holds at most before it stops taking more."""

_POP_CONSUMER_ID = -1  # not on any connection: never reused by a Pulsar consumer id


@dataclass(slots=True, eq=False)
class _PopConnection:
    """The virtual consumer's connection: deliveries go to the queue instead of a socket."""

    queue: PopQueue
    writable: bool = True
    remote_address: str = "rocketmq-pop"

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        partition: int,
        headers_and_payload: memoryview,
        redelivery_count: int,
        ack_set: list[int] | None = None,
    ) -> None:
        self.queue.on_message(position, headers_and_payload, redelivery_count)

    def send_close_consumer(self, consumer_id: int) -> None:
        self.queue.on_closed_by_broker()

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        pass

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        pass


@dataclass(slots=True, eq=False)
class _Chain:
    """The entries of one FIFO message group held by a queue; only the head may be in flight."""

    items: deque[PopItem] = field(default_factory=deque)


class PopQueue:
    """Pop state of one consumer group on one partition's subscription (module docstring).

    ``dead_letter(item)`` copies an entry to the group's dead-letter topic (raises on failure; the copy is
    then tried again every ``retry_after_ms`` while the entry stays invisible). ``key_of(data)`` gives an
    entry's FIFO message group. ``is_alive(owner)`` tells whether the client that received an auto-renewed
    entry is still connected (without it, auto-renewed entries are renewed until ``MAX_RENEW_MS``).
    ``is_current()`` tells whether the subscription is still its topic's (False after an unload or a delete:
    the queue then closes itself when its timer fires instead of touching the dropped subscription).
    """

    def __init__(
        self,
        subscription: Subscription,
        *,
        group: str,
        dead_letter: Callable[[PopItem], Awaitable[None]],
        key_of: Callable[[memoryview], str | None],
        max_delivery_attempts: int = 17,
        fifo: bool = False,
        retry_after_ms: int = 10_000,
        is_alive: Callable[[str], bool] | None = None,
        is_current: Callable[[], bool] | None = None,
    ) -> None:
        self.subscription = subscription
        self.group = group
        self.max_delivery_attempts = max_delivery_attempts
        self.fifo = fifo
        self.accept: Callable[[memoryview], bool] | None = None
        self._dead_letter = dead_letter
        self._key_of = key_of
        self._retry_after_ms = retry_after_ms
        self._is_alive = is_alive
        self._is_current = is_current
        self._consumer: Consumer | None = None
        self._waiters: list[PopWaiter] = []
        self._ready: deque[PopItem] = deque()
        self._inflight: dict[int, PopItem] = {}  # queue offset -> item
        self._chains: dict[str, _Chain] = {}
        self._parked = 0
        self._expiry: list[tuple[int, int, int]] = []  # (due ms, queue offset, item version)
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    # ------------------------------------------------------------------ receive side
    @property
    def idle(self) -> bool:
        """No receive waits and nothing is in flight or held (the virtual consumer is detached)."""
        return self._consumer is None and not self._inflight and not self._waiters

    @property
    def in_flight(self) -> int:
        """Entries handed out and neither acked nor visible again."""
        return len(self._inflight)

    def add_waiter(self, waiter: PopWaiter) -> None:
        """Let ``waiter`` take entries of this queue (ready ones at once, then as the dispatcher hands them
        over). Raises ``ConsumerBusyError`` when the subscription serves an Exclusive/Failover consumer."""
        if self.closed:
            return
        self._attach()
        waiter.queues.append(self)
        self._waiters.append(waiter)
        self._drain()
        self._update_permits()

    def remove_waiter(self, waiter: PopWaiter) -> None:
        """``waiter`` stops taking entries; non-FIFO entries nobody waits for go back to the subscription."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if not self._waiters and not self.fifo:
            self._give_back_ready()
        self._update_permits()
        self._detach_if_idle()

    def _attach(self) -> None:
        if self._consumer is not None:
            return
        consumer = Consumer(
            _POP_CONSUMER_ID, f"rocketmq-pop-{self.group}", _PopConnection(self), self.subscription
        )
        self.subscription.add_consumer(consumer, SubType.Shared)
        self._consumer = consumer

    def _detach_if_idle(self) -> None:
        consumer = self._consumer
        if consumer is None or self._waiters or self._inflight or self._ready or self._parked:
            return
        self._consumer = None
        self.subscription.remove_consumer(consumer)

    def _update_permits(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        room = sum(w.room for w in self._waiters) - len(self._ready)
        consumer.permits = max(room, 0) if self._parked < MAX_PARKED else 0
        if consumer.permits > 0:
            self.subscription.schedule_dispatch()

    def on_message(self, position: Position, data: memoryview, redelivery_count: int) -> None:
        """The dispatcher handed ``position`` (stored bytes ``data``, redelivered ``redelivery_count`` times)
        to the virtual consumer."""
        offset = self.subscription.topic.ledger.table.offset_of(position)
        if offset is None:  # names no entry any more (trimmed meanwhile)
            self._ack_position(position)
            return
        item = PopItem(self, position, offset, data, redelivery_count + 1)
        if self.fifo:
            try:
                item.key = self._key_of(data)
            except QuasarError:
                item.key = None
            if item.key is not None:
                chain = self._chains.setdefault(item.key, _Chain())
                chain.items.append(item)
                if len(chain.items) > 1:  # waits for the message before it
                    self._parked += 1
                    self._update_permits()
                    return
        self._ready.append(item)
        self._drain()
        if not self._waiters and not self.fifo:
            self._give_back_ready()
        self._update_permits()

    def _drain(self) -> None:
        """Hand ready entries to waiters with room (dead-letter or filter them on the way)."""
        while self._ready:
            waiter = next((w for w in self._waiters if w.room > 0), None)
            if waiter is None:
                return
            item = self._ready.popleft()
            if item.attempt > self.max_delivery_attempts:
                self._start_dead_letter(item)
                continue
            accept = self.accept
            if accept is not None and not accept(item.data):
                self._finish(item)  # not for this group: acked, as the proxy does
                continue
            now = _now_ms()
            item.index_retrieve.clear()
            item.index_expires.clear()
            item.retrieve_ms = now
            item.invisible_ms = waiter.invisible_ms
            item.owner = waiter.owner
            item.renew_step_ms = waiter.invisible_ms if waiter.auto_renew else 0
            item.renew_until_ms = now + MAX_RENEW_MS if waiter.auto_renew else 0
            self._track(item)
            waiter.take(item)

    def _give_back_ready(self) -> None:
        consumer = self._consumer
        if consumer is None or not self._ready:
            return
        positions = [item.position for item in self._ready if item.key is None]
        self._ready = deque(item for item in self._ready if item.key is not None)
        if positions:
            self.subscription.redeliver_unacknowledged(consumer, positions, count_redelivery=False)

    def give_back(self, item: PopItem) -> None:
        """Return an in-flight entry that never reached its client (the receive was cancelled): visible
        again at once, without counting a delivery attempt."""
        if self._inflight.get(item.queue_offset) is not item:
            return
        del self._inflight[item.queue_offset]
        if item.key is not None:
            self._ready.appendleft(item)
            self._drain()
        elif self._consumer is not None:
            self.subscription.redeliver_unacknowledged(
                self._consumer, [item.position], count_redelivery=False
            )
        self._update_permits()
        self._detach_if_idle()

    # ------------------------------------------------------------------ receipts
    def lookup(self, queue_offset: int, retrieve_ms: int, index: int | None = None) -> PopItem | None:
        """The in-flight entry a receipt names (``index``: the message's batch index), or None when it is
        unknown, stale (superseded by a newer receipt, acked, visible again) or expired."""
        item = self._inflight.get(queue_offset)
        if item is None or item.dead_lettering:
            return None
        current = item.retrieve_ms if index is None else item.index_retrieve.get(index, item.retrieve_ms)
        if current != retrieve_ms or item.message_expires_ms(index) <= _now_ms():
            return None
        return item

    def _entry_expires_ms(self, item: PopItem) -> int:
        """When the entry is due again: the latest due time of its messages not yet acked."""
        if not item.index_expires:
            return item.expires_ms
        unacked = self.subscription.cursor.batch_ack_set(item.position)
        base = item.expires_ms
        times = [
            item.index_expires.get(index, base)
            for index in range(max(item.index_expires) + 1 if unacked is None else unacked.bit_length())
            if unacked is None or unacked >> index & 1
        ]
        if unacked is None:
            times.append(base)  # the messages past the last changed index
        return max(times, default=base)

    def ack(self, item: PopItem) -> None:
        """Acknowledge an in-flight entry (an individual ack on the cursor)."""
        if self._inflight.get(item.queue_offset) is not item:
            return
        del self._inflight[item.queue_offset]
        self._finish(item)

    def ack_index(self, item: PopItem, index: int, size: int) -> None:
        """Acknowledge message ``index`` of the ``size`` messages of a batch entry in flight (a batch-index
        ack on the cursor, PIP-54); the entry counts as acked once every index is. Raises ValueError for an
        index outside the batch."""
        if not 0 <= index < size:
            raise ValueError(f"batch index {index} is outside a batch of {size} messages")
        if self._inflight.get(item.queue_offset) is not item or self._consumer is None:
            return
        remaining = ((1 << size) - 1) & ~(1 << index)
        cursor = self.subscription.cursor
        try:
            self.subscription.ack_batch_index(self._consumer, item.position, remaining)
        except QuasarError as exc:
            log.debug("pop batch ack of %s on %s failed: %s", item.position, self.group, exc)
            return
        if cursor.is_acked(item.position):
            self.ack(item)
        elif item.index_expires:  # the acked message may have been the last one due
            self._track(item)

    def acked_indexes(self, item: PopItem) -> int | None:
        """Bit set of the batch indexes of ``item`` still unacknowledged, or None when none was acked."""
        return self.subscription.cursor.batch_ack_set(item.position)

    def change_invisible(self, item: PopItem, invisible_ms: int, index: int | None = None) -> int:
        """Make ``item`` (``index``: one message of a batch entry) invisible for ``invisible_ms`` from now;
        returns the new ``retrieve_ms`` of its receipt (strictly larger than the previous one), so the previous
        receipt no longer matches; the other messages' receipts stay valid."""
        now = _now_ms()
        if index is None:
            item.retrieve_ms = max(now, item.retrieve_ms + 1)
            item.invisible_ms = invisible_ms
            retrieve = item.retrieve_ms
        else:
            retrieve = max(now, item.index_retrieve.get(index, item.retrieve_ms) + 1)
            item.index_retrieve[index] = retrieve
            item.index_expires[index] = retrieve + invisible_ms
        item.renew_until_ms = 0  # the client chose the time (a push consumer's nack): no more renewals
        self._track(item)
        return retrieve

    def dead_letter_now(self, item: PopItem) -> None:
        """ForwardMessageToDeadLetterQueue: copy ``item`` to the dead-letter topic, then ack it."""
        if self._inflight.get(item.queue_offset) is not item:
            return
        del self._inflight[item.queue_offset]
        self._start_dead_letter(item)

    # ------------------------------------------------------------------ expiry
    def _track(self, item: PopItem) -> None:
        self._inflight[item.queue_offset] = item
        item.version += 1
        due = self._entry_expires_ms(item)
        if item.renew_until_ms:  # renewed ahead by at most half a step: the next due time is always later
            due -= min(RENEW_AHEAD_MS, item.renew_step_ms // 2)
        heapq.heappush(self._expiry, (due, item.queue_offset, item.version))
        if len(self._expiry) > 4 * len(self._inflight) + 1024:  # superseded entries pile up: drop them
            self._expiry = [
                e for e in self._expiry if (i := self._inflight.get(e[1])) is not None and i.version == e[2]
            ]
            heapq.heapify(self._expiry)
        self._arm()

    def _renew(self, item: PopItem, now: int) -> bool:
        """Extend an auto-renewed entry whose client is still there; False when it is not renewable."""
        if not item.renew_until_ms or item.renew_until_ms <= now:
            return False  # (a timer late past the expiry still renews: the entry was not handed out again)
        is_alive = self._is_alive
        if is_alive is not None and not is_alive(item.owner):
            return False
        item.invisible_ms = now + item.renew_step_ms - item.retrieve_ms  # same receipt, later expiry
        self._track(item)
        return True

    def _arm(self) -> None:
        while self._expiry:
            _, offset, version = self._expiry[0]
            item = self._inflight.get(offset)
            if item is not None and item.version == version and not item.dead_lettering:
                break
            heapq.heappop(self._expiry)  # superseded
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._expiry and not self.closed:
            delay = max(self._expiry[0][0] - _now_ms(), 0) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._is_current is not None and not self._is_current():
            self.close()
            return
        now = _now_ms()
        expired: list[PopItem] = []
        while self._expiry and self._expiry[0][0] <= now:
            _, offset, version = heapq.heappop(self._expiry)
            item = self._inflight.get(offset)
            if item is not None and item.version == version and not item.dead_lettering:
                if self._renew(item, now):
                    continue
                if self._entry_expires_ms(item) > now:  # renewal ended, or a message changed: later
                    item.renew_until_ms = 0
                    self._track(item)
                    continue
                del self._inflight[offset]
                expired.append(item)
        fifo_again = [item for item in expired if item.key is not None]
        positions = [item.position for item in expired if item.key is None]
        for item in reversed(fifo_again):  # head of its chain again, handed out first
            counts = self.subscription.redelivery_counts
            counts[item.position] = counts.get(item.position, 0) + 1
            item.attempt += 1
            self._ready.appendleft(item)
        if positions and self._consumer is not None:
            self.subscription.redeliver_unacknowledged(self._consumer, positions)
        if fifo_again:
            self._drain()
        self._update_permits()
        self._arm()

    # ------------------------------------------------------------------ ack and dead letters
    def _finish(self, item: PopItem) -> None:
        """``item`` is done for this group (acked, filtered out or dead-lettered): ack it, and let its FIFO
        message group's next entry go."""
        self._ack_position(item.position)
        if item.key is not None:
            chain = self._chains.get(item.key)
            if chain is not None and chain.items and chain.items[0] is item:
                chain.items.popleft()
                if chain.items:
                    self._parked -= 1
                    self._ready.append(chain.items[0])
                    self._drain()
                else:
                    del self._chains[item.key]
        self._update_permits()
        self._detach_if_idle()

    def _ack_position(self, position: Position) -> None:
        consumer = self._consumer
        if consumer is None or self.subscription.cursor.is_acked(position):
            return
        try:
            self.subscription.ack_individual(consumer, [position])
        except QuasarError as exc:  # trimmed away meanwhile: nothing left to ack
            log.debug("pop ack of %s on %s failed: %s", position, self.group, exc)

    def _start_dead_letter(self, item: PopItem) -> None:
        item.dead_lettering = True
        self._inflight[item.queue_offset] = item
        task = asyncio.get_running_loop().create_task(
            self._run_dead_letter(item), name=f"pop-dead-letter:{self.group}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_dead_letter(self, item: PopItem) -> None:
        while True:
            try:
                await self._dead_letter(item)
                break
            except asyncio.CancelledError:
                raise
            except Exception:  # the copy failed: tried again after the retry time, still invisible
                log.exception("dead-lettering %s of group %s failed", item.position, self.group)
            await asyncio.sleep(self._retry_after_ms / 1000)
        if self._inflight.get(item.queue_offset) is item:
            del self._inflight[item.queue_offset]
            self._finish(item)

    # ------------------------------------------------------------------ life cycle
    def on_closed_by_broker(self) -> None:
        """The subscription disconnected its consumers (admin, unload): forget the pop state."""
        self._consumer = None
        self.close()

    def close(self) -> None:
        """Cancel the expiry timer and dead-letter tasks and let waiters go; in-flight entries become
        visible again when the subscription is next read (they were never acked). Idempotent."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        for waiter in list(self._waiters):
            if self in waiter.queues:
                waiter.queues.remove(self)
        self._waiters.clear()
        self._inflight.clear()
        self._ready.clear()
        self._chains.clear()
        self._parked = 0
        self._expiry.clear()
        consumer, self._consumer = self._consumer, None
        current = self._is_current is None or self._is_current()
        if consumer is not None and current and consumer in self.subscription.consumers:
            try:  # the entries it held become redeliverable to the subscription's other consumers
                self.subscription.remove_consumer(consumer)
            except QuasarError as exc:  # the cursor closed under it (broker stopping)
                log.debug("pop queue of %s closed with its cursor: %s", self.group, exc)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
