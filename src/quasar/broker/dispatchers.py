"""Dispatch policies of a persistent subscription: which attached consumer receives which entry.

One :class:`Dispatcher` per subscription, chosen by the sub type of its first consumer:

- ``SingleActiveConsumerDispatcher`` (Exclusive, Failover; Pulsar ``PersistentDispatcherSingleActiveConsumer``):
  every entry goes to the one active consumer. Exclusive refuses a second consumer (ConsumerBusy). Failover
  orders the consumers by priority level, then name, and picks among the highest-priority group: a partition
  takes ``partition_index % count``, a non-partitioned topic the hash ring of ``failover_ring_pick``; every
  consumer hears whether it is active (ACTIVE_CONSUMER_CHANGE), and a change of active consumer rewinds the
  cursor so the new one receives everything not yet acknowledged.
- ``MultipleConsumersDispatcher`` (Shared; Pulsar ``PersistentDispatcherMultipleConsumers``): round robin over
  the consumers with permits; entries whose ``deliver_at_time`` lies ahead wait in the delayed-delivery
  tracker (``delayed``).
- ``KeySharedDispatcher`` (Key_Shared; ``key_shared_dispatcher``): by sticky-key hash.

The subscription keeps the state every policy shares (cursor, pending entries per consumer, replay set,
unacked counts) and asks its dispatcher for rounds; a dispatcher sees it through the :class:`DispatchSource`
port and hands entries out with ``DispatchSource.deliver``. ``individual_ack`` marks the policies whose
consumers acknowledge one by one (Shared, Key_Shared: cumulative acks are ignored and the unacked-message
limits apply, Pulsar ``isIndividualAckMode``). ``Subscription`` picks the policy for a sub type.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from quasar.broker.delayed import DelayedDeliveryTracker
from quasar.broker.errors import ConsumerBusyError
from quasar.broker.key_shared import KeySharedMeta, ring_points, sticky_key_hash
from quasar.protocol.enums import SubType
from quasar.protocol.metadata import entry_dispatch_info

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer
    from quasar.ledger.entry import Entry
    from quasar.ledger.managed_cursor import ManagedCursor
    from quasar.ledger.managed_ledger import ManagedLedger
    from quasar.ledger.position import Position
    from quasar.protocol import TopicName

__all__ = [
    "FAILOVER_RING_REPLICAS",
    "DispatchSource",
    "DispatchTopic",
    "Dispatcher",
    "MultipleConsumersDispatcher",
    "SingleActiveConsumerDispatcher",
    "entry_dispatch_info",
    "entry_num_messages",
    "failover_active_consumer",
    "failover_ring_pick",
]

FAILOVER_RING_REPLICAS = 100  # Pulsar CONSUMER_CONSISTENT_HASH_REPLICAS


class DispatchTopic(Protocol):
    """What a dispatcher reads of the subscription's topic (``PersistentTopic``)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def partition_index(self) -> int: ...

    @property
    def ledger(self) -> ManagedLedger: ...


class DispatchSource(Protocol):
    """The subscription as its dispatcher sees it (``Subscription`` implements it)."""

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> DispatchTopic: ...

    @property
    def consumers(self) -> list[Consumer]:
        """Attached consumers, in attach order."""
        ...

    @property
    def cursor(self) -> ManagedCursor: ...

    @property
    def max_read_batch_size(self) -> int: ...

    @property
    def replay_positions(self) -> set[Position]:
        """Positions to deliver again before new entries (mutable; parked Key_Shared entries go here)."""
        ...

    @property
    def blocked_on_unacked(self) -> bool:
        """The whole subscription reached max_unacked_messages_per_subscription."""
        ...

    def deliver(self, consumer: Consumer, entry: Entry, count: int) -> None:
        """Send ``entry`` (``count`` messages) to ``consumer`` and record it as pending."""
        ...

    def read_redeliveries(self, budget: int) -> list[Entry]: ...

    def read_new(self, budget: int) -> list[Entry]:
        """Up to ``budget`` new entries from the read position (the compacted view first when reading
        compacted), moving the read position past them."""
        ...

    def unread(self, position: Position) -> None:
        """Put the read position back to ``position`` (read by ``read_new``, not sent)."""
        ...

    def rewind_delivery(self) -> None:
        """Forget every delivery in flight and rewind the cursor to the first unacknowledged entry."""
        ...

    def add_replays(self, positions: Iterable[Position]) -> None:
        """Deliver ``positions`` again (delayed entries now due) and run a round."""
        ...

    def schedule_dispatch(self) -> None: ...


class Dispatcher(Protocol):
    """The dispatch policy of one subscription (Pulsar's ``Dispatcher``)."""

    @property
    def sub_type(self) -> SubType: ...

    @property
    def individual_ack(self) -> bool: ...

    def add_consumer(self, consumer: Consumer, meta: KeySharedMeta | None) -> None:
        """Admit ``consumer`` before it joins the subscription's consumers; raises ConsumerBusyError /
        ConsumerAssignError to refuse it."""
        ...

    def remove_consumer(self, consumer: Consumer) -> None:
        """``consumer`` left the subscription's consumers (its pending entries are not replayed yet)."""
        ...

    def consumers_changed(self) -> None:
        """The subscription's consumers changed (after an add or a remove)."""
        ...

    def dispatch_once(self) -> bool:
        """One read-and-send round; True when more may be dispatched right away."""
        ...

    def on_acks(self) -> None:
        """Acks moved the cursor."""
        ...

    def forget(self, position: Position) -> None:
        """``position`` was fully acknowledged."""
        ...

    def close(self) -> None:
        """Cancel the policy's timers (the subscription has no consumer left, or is dropped)."""
        ...


def entry_num_messages(data: memoryview) -> int:
    """Messages in a stored entry: ``num_messages_in_batch`` when present, else 1 (the metadata's wire format
    only: ``quasar.protocol.entry_dispatch_info``). Raises MalformedFrameError for a damaged entry."""
    return entry_dispatch_info(data)[0]


class _Named(Protocol):
    @property
    def consumer_name(self) -> str: ...


_C = TypeVar("_C", bound=_Named)


def failover_ring_pick(consumers: Sequence[_C], topic_name: str) -> _C:
    """Active consumer of a non-partitioned Failover topic (Pulsar ``peekConsumerIndexFromHashRing``): a ring
    of 100 points per consumer at ``murmur3(consumer_name + str(j))``; the ceiling of ``murmur3(topic)``."""
    ring: dict[int, int] = {}
    for index, consumer in enumerate(consumers):
        for point in ring_points(consumer.consumer_name, FAILOVER_RING_REPLICAS):
            ring[point] = index
    target = sticky_key_hash(topic_name.encode())
    points = sorted(ring)
    at = bisect.bisect_left(points, target)
    return consumers[ring[points[at if at < len(points) else 0]]]


def failover_active_consumer(
    consumers: Sequence[Consumer], partition_index: int, topic_name: str
) -> Consumer:
    """The active consumer of a Failover subscription with ``consumers`` (non-empty): among the
    highest-priority group (lowest ``priority_level``) ordered by name, ``partition_index % count`` for a
    partition, else ``failover_ring_pick`` over ``topic_name``."""
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.consumer_name))
    top = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    if partition_index >= 0:
        return top[partition_index % len(top)]
    return failover_ring_pick(top, topic_name)


def _read_and_send(
    sub: DispatchSource,
    budget: int,
    send: Callable[[list[Entry], list[Consumer]], int | None],
    ready: list[Consumer],
) -> bool:
    """Read up to ``budget`` entries (the replay set first, else new ones from the cursor), hand them to
    ``send``, and put the cursor back before the first entry ``send`` could not place. True when every entry
    read went out (more may follow now)."""
    from_cursor = not sub.replay_positions
    entries = sub.read_new(budget) if from_cursor else sub.read_redeliveries(budget)
    if not entries:
        return not from_cursor and bool(sub.replay_positions)
    unsent = send(entries, ready)
    if unsent is not None and from_cursor:
        sub.unread(entries[unsent].position)
    return unsent is None


class SingleActiveConsumerDispatcher:
    """Exclusive and Failover: one active consumer receives every entry (module docstring)."""

    individual_ack = False

    def __init__(self, source: DispatchSource, sub_type: SubType) -> None:
        if sub_type not in (SubType.Exclusive, SubType.Failover):
            raise ValueError(
                f"a single-active-consumer dispatcher serves Exclusive or Failover, not {sub_type}"
            )
        self._sub = source
        self.sub_type = sub_type
        self.active: Consumer | None = None

    def add_consumer(self, consumer: Consumer, meta: KeySharedMeta | None) -> None:
        """Raises ConsumerBusyError for a second consumer on an Exclusive subscription."""
        if self.sub_type == SubType.Exclusive and self._sub.consumers:
            raise ConsumerBusyError(
                f"Exclusive consumer is already connected on subscription {self._sub.name}"
            )

    def remove_consumer(self, consumer: Consumer) -> None:
        pass  # the active consumer is chosen again by consumers_changed

    def consumers_changed(self) -> None:
        """Pick the active consumer again; Failover: tell every consumer whether it is active and, when the
        active consumer changed, rewind the subscription's delivery (Pulsar rewinds the cursor)."""
        sub = self._sub
        consumers = sub.consumers
        if self.sub_type != SubType.Failover or not consumers:
            self.active = consumers[0] if consumers else None
            return
        active = failover_active_consumer(consumers, sub.topic.partition_index, sub.topic.name.full_name)
        changed = active is not self.active
        self.active = active
        if changed:
            sub.rewind_delivery()
        for consumer in consumers:
            consumer.cnx.send_active_consumer_change(consumer.consumer_id, consumer is active)

    def on_acks(self) -> None:
        pass

    def forget(self, position: Position) -> None:
        pass

    def close(self) -> None:
        pass  # no timer of its own

    def dispatch_once(self) -> bool:
        active = self.active
        if active is None or active.permits <= 0 or not active.cnx.writable:
            return False
        return _read_and_send(
            self._sub, min(active.permits, self._sub.max_read_batch_size), self._send, [active]
        )

    def _send(self, entries: list[Entry], ready: list[Consumer]) -> int | None:
        """Send ``entries`` to the active consumer (``ready[0]``) while it has permits and a writable
        connection; returns the index of the first unsent entry, or None."""
        active = ready[0]
        deliver = self._sub.deliver
        for i, entry in enumerate(entries):
            if active.permits <= 0 or not active.cnx.writable:
                return i
            deliver(active, entry, entry_num_messages(entry.data))
        return None


class MultipleConsumersDispatcher:
    """Shared: round robin over the consumers that have permits (module docstring). With
    ``delayed_delivery_enabled``, entries due later wait in ``delayed`` (``tick_ms``, ``strict``: see
    ``DelayedDeliveryTracker``)."""

    sub_type = SubType.Shared
    individual_ack = True

    def __init__(
        self,
        source: DispatchSource,
        *,
        delayed_delivery_enabled: bool = True,
        tick_ms: int = 1000,
        strict: bool = False,
    ) -> None:
        self._sub = source
        self._rr_index = 0
        self._track_delays = delayed_delivery_enabled
        self.delayed = DelayedDeliveryTracker(source.add_replays, tick_ms=tick_ms, strict=strict)

    def add_consumer(self, consumer: Consumer, meta: KeySharedMeta | None) -> None:
        pass  # any number of consumers

    def remove_consumer(self, consumer: Consumer) -> None:
        pass

    def consumers_changed(self) -> None:
        pass

    def on_acks(self) -> None:
        pass

    def forget(self, position: Position) -> None:
        pass

    def close(self) -> None:
        """Forget the delayed entries and cancel their timer: with no consumer left the cursor is rewound,
        and the entries are read (and tracked) again."""
        self.delayed.clear()

    def dispatch_once(self) -> bool:
        sub = self._sub
        if sub.blocked_on_unacked:
            return False
        ready = [c for c in sub.consumers if c.permits > 0 and not c.blocked and c.cnx.writable]
        if not ready:
            return False
        budget = min(sum(c.permits for c in ready), sub.max_read_batch_size)
        return _read_and_send(sub, budget, self._send, ready)

    def _send(self, entries: list[Entry], ready: list[Consumer]) -> int | None:
        """Send ``entries`` to consumers in ``ready``; returns the index of the first unsent entry, or None.
        An entry whose deliver_at_time lies ahead goes to the delayed tracker instead."""
        sub = self._sub
        track_delays = self._track_delays
        delayed = self.delayed
        for i, entry in enumerate(entries):
            count, deliver_at = entry_dispatch_info(entry.data)
            if deliver_at and track_delays and delayed.is_delayed(deliver_at):
                delayed.add(entry.position, deliver_at)
                sub.replay_positions.discard(entry.position)
                continue
            consumer = self._pick(ready)
            if consumer is None:
                return i
            sub.deliver(consumer, entry, count)
            if consumer.blocked:
                ready = [c for c in ready if not c.blocked]
        return None

    def _pick(self, ready: list[Consumer]) -> Consumer | None:
        if self._sub.blocked_on_unacked:
            return None
        n = len(ready)
        for k in range(n):
            consumer = ready[(self._rr_index + k) % n]
            if consumer.permits > 0 and not consumer.blocked and consumer.cnx.writable:
                self._rr_index = (self._rr_index + k + 1) % max(n, 1)
                return consumer
        return None
