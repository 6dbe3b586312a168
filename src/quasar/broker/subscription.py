"""Subscriptions and their dispatchers (Exclusive, Failover, Shared; Key_Shared in ``key_shared_dispatcher``),
bounded by consumer permits and unacked-message limits.

Follows Pulsar's PersistentDispatcherSingleActiveConsumer (Exclusive, Failover) and
PersistentDispatcherMultipleConsumers (Shared): read up to ``max_read_batch_size`` entries from the
cursor's read position, hand each entry to a consumer with permits (round robin for Shared), and charge it the
entry's message count. Entries of a consumer that goes away are redelivered: to the remaining consumers
(Shared), or to the next consumer by rewinding the cursor to the first unacknowledged entry when none is left.
The stored bytes go out unchanged (the MESSAGE frame is the command header + the stored span); a partly
acknowledged batch carries the cursor's batch-index ack set, and only its unacknowledged messages are charged
against permits (PIP-54). Shared and Key_Shared block a consumer at ``max_unacked_messages_per_consumer``
and the whole subscription at ``max_unacked_messages_per_subscription``, until acks bring the count to half.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quasar.broker.consumer import Consumer
from quasar.broker.delayed import DelayedDeliveryTracker
from quasar.broker.errors import ConsumerBusyError
from quasar.broker.key_shared import sticky_key_hash
from quasar.broker.key_shared_dispatcher import KeySharedDispatch, KeySharedMeta
from quasar.ledger.entry import Entry
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.position import Position
from quasar.protocol import num_messages, parse_headers_and_payload

if TYPE_CHECKING:
    from quasar.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


class SubType(enum.IntEnum):
    """CommandSubscribe.SubType (PulsarApi.proto)."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


_INDIVIDUAL_ACK_TYPES = frozenset({SubType.SHARED, SubType.KEY_SHARED})
_WORD = (1 << 64) - 1


def _to_signed_words(bits: int) -> list[int]:
    """A bit set as the int64 words of a Pulsar ack_set (bit i of word w = index 64*w+i)."""
    words = []
    while bits:
        word = bits & _WORD
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        bits >>= 64
    return words


def ack_set_bits(words: Iterable[int]) -> int:
    """Pulsar ack_set words (int64, possibly negative) as one non-negative bit set."""
    bits = 0
    for i, word in enumerate(words):
        bits |= (word & _WORD) << (64 * i)
    return bits


FAILOVER_RING_REPLICAS = 100  # Pulsar CONSUMER_CONSISTENT_HASH_REPLICAS


def failover_ring_pick(consumers: list[Consumer], topic_name: str) -> Consumer:
    """Active consumer of a non-partitioned Failover topic (Pulsar ``peekConsumerIndexFromHashRing``): a ring
    of 100 points per consumer at ``murmur3(consumer_name + str(j))``; the ceiling of ``murmur3(topic)``."""
    ring: dict[int, int] = {}
    for index, consumer in enumerate(consumers):
        for j in range(FAILOVER_RING_REPLICAS):
            ring[sticky_key_hash(f"{consumer.consumer_name}{j}".encode())] = index
    target = sticky_key_hash(topic_name.encode())
    points = sorted(ring)
    at = bisect.bisect_left(points, target)
    return consumers[ring[points[at if at < len(points) else 0]]]


def entry_dispatch_info(data: memoryview) -> tuple[int, int]:
    """(messages in the entry, deliver_at_time in ms or 0) from the stored entry's MessageMetadata."""
    metadata = parse_headers_and_payload(data).metadata
    return num_messages(metadata), metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0


def entry_num_messages(data: memoryview) -> int:
    """Messages in a stored entry: ``num_messages_in_batch`` when present, else 1 (parses metadata only)."""
    return num_messages(parse_headers_and_payload(data).metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionOptions:
    """Dispatcher settings (Pulsar broker.conf names in snake_case):
    ``max_read_batch_size`` entries per read (dispatcherMaxReadBatchSize 100);
    ``max_unacked_messages_per_consumer`` / ``_per_subscription`` (50,000 / 200,000; 0 disables; Shared and
    Key_Shared only); ``key_shared_use_consistent_hashing`` (subscriptionKeySharedUseConsistentHashing, true)
    and ``key_shared_replica_points`` (subscriptionKeySharedConsistentHashingReplicaPoints, 100)."""

    max_read_batch_size: int = 100
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    key_shared_use_consistent_hashing: bool = True
    key_shared_replica_points: int = 100
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_ms: int = 1000
    delayed_delivery_deliver_at_time_strict: bool = False


class Subscription:
    """A named subscription on a persistent topic, backed by a managed cursor.

    ``durable`` subscriptions keep their cursor (mark-delete position and acked ranges) across restarts;
    non-durable ones (readers) vanish with their consumer.
    """

    persistent = True

    def __init__(
        self,
        topic: PersistentTopic,
        name: str,
        cursor: ManagedCursor,
        *,
        durable: bool = True,
        options: SubscriptionOptions | None = None,
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType | None = None
        self.consumers: list[Consumer] = []
        options = options or SubscriptionOptions()
        self.options = options
        self.max_read_batch_size = options.max_read_batch_size
        self._rr_index = 0
        self._active: Consumer | None = None  # Exclusive / Failover: the one consumer that receives
        # position -> consumer holding it (delivered, not acked)
        self._pending: dict[Position, Consumer] = {}
        # positions to deliver again (redeliveries; Key_Shared: entries parked to keep key order)
        self.replay_positions: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        self._scheduled = False
        self.msg_out_counter = 0
        self.max_unacked_messages_per_consumer = options.max_unacked_messages_per_consumer
        self.max_unacked_messages_per_subscription = options.max_unacked_messages_per_subscription
        self.unacked_messages = 0  # over every consumer, kept by _add_pending / _remove_pending
        self.blocked_on_unacked = False
        self.key_shared: KeySharedDispatch | None = None
        self.delayed = DelayedDeliveryTracker(
            self._on_delayed_due,
            tick_ms=options.delayed_delivery_tick_time_ms,
            strict=options.delayed_delivery_deliver_at_time_strict,
        )

    # ------------------------------------------------------------------ consumers
    def add_consumer(
        self, consumer: Consumer, sub_type: SubType, key_shared_meta: KeySharedMeta | None = None
    ) -> None:
        """Attach ``consumer``. Raises ConsumerBusyError as Pulsar does: a second consumer on an Exclusive
        subscription, or a sub type different from the one the subscription has while consumers are attached;
        ConsumerAssignError for a Key_Shared consumer that cannot be placed (mode mismatch, STICKY ranges).
        """
        if self.consumers:
            if sub_type != self.sub_type:
                raise ConsumerBusyError(f"Subscription {self.name} is of different type")
            if sub_type == SubType.EXCLUSIVE:
                raise ConsumerBusyError(
                    f"Exclusive consumer is already connected on subscription {self.name}"
                )
        if sub_type == SubType.KEY_SHARED:
            meta = key_shared_meta or KeySharedMeta()
            if self.key_shared is None or not self.consumers:
                self.key_shared = KeySharedDispatch(
                    self,
                    meta,
                    use_consistent_hashing=self.options.key_shared_use_consistent_hashing,
                    replica_points=self.options.key_shared_replica_points,
                )
            self.key_shared.add_consumer(consumer, meta)
        else:
            self.key_shared = None
        self.sub_type = sub_type
        self.consumers.append(consumer)
        self._update_active_consumer()
        self._update_blocked()
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer``; its unacknowledged entries become redeliverable."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self.key_shared is not None:
            self.key_shared.remove_consumer(consumer)
        for position in consumer.pending_acks:
            if self._pending.get(position) is consumer:
                del self._pending[position]
                self.replay_positions.add(position)
        self.unacked_messages -= consumer.unacked_messages
        consumer.clear_pending()
        if not self.consumers:
            # Nobody left: the next consumer starts from the first unacknowledged entry.
            self._pending.clear()
            self.replay_positions.clear()
            self.unacked_messages = 0
            self.delayed.clear()  # re-read from the first unacknowledged entry: tracked again
            self.cursor.rewind()
        self._update_blocked()
        self._update_active_consumer()
        self.schedule_dispatch()

    def _update_active_consumer(self) -> None:
        """Failover: pick the active consumer as Pulsar's PersistentDispatcherSingleActiveConsumer does
        (consumers ordered by priority level, then name, the highest-priority group only; a partition picks
        ``partition_index % count``, a non-partitioned topic the hash-ring choice of ``failover_ring_pick``), tell
        every consumer whether it is active (ACTIVE_CONSUMER_CHANGE), and rewind the cursor on a change so the
        new active consumer receives everything not yet acknowledged."""
        if self.sub_type != SubType.FAILOVER or not self.consumers:
            self._active = self.consumers[0] if self.consumers else None
            return
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.consumer_name))
        top = [c for c in ordered if c.priority_level == ordered[0].priority_level]  # highest priority group
        if self.topic.partition_index >= 0:
            active = top[self.topic.partition_index % len(top)]
        else:
            active = failover_ring_pick(top, self.topic.name.full_name)
        changed = active is not self._active
        self._active = active
        if changed:
            for consumer in self.consumers:
                consumer.clear_pending()
            self.unacked_messages = 0
            self._pending.clear()
            self.replay_positions.clear()
            self.cursor.rewind()
        for consumer in self.consumers:
            consumer.cnx.send_active_consumer_change(consumer.consumer_id, consumer is active)

    # ------------------------------------------------------------------ acks
    def _forget(self, position: Position) -> None:
        """``position`` is fully acknowledged: it is no longer pending, redeliverable or counted."""
        holder = self._pending.pop(position, None)
        if holder is not None:
            count = holder.pending_acks.get(position, 0)
            if holder.remove_pending(position):
                self.unacked_messages -= count
        self.replay_positions.discard(position)
        self.redelivery_counts.pop(position, None)
        if self.key_shared is not None:
            self.key_shared.forget(position)

    def ack_individual(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        """Individually acknowledge whole entries (CommandAck Individual). Raises
        ``InvalidCursorPositionError`` (nothing acked) when a position names no entry of the topic."""
        acked = list(positions)
        if not acked:
            return
        self.cursor.delete(acked)
        for position in acked:
            self._forget(position)
        self._after_acks()

    def ack_batch_index(self, consumer: Consumer, position: Position, ack_set: int) -> None:
        """Batch-index ack (PIP-54): ``ack_set`` has bit i set for each index of the entry still
        unacknowledged by the client; ANDed into the cursor's set, the entry is deleted once it is empty.
        Raises ``InvalidCursorPositionError`` for a position that names no entry."""
        holder = self._pending.get(position)
        if holder is not None and self.cursor.batch_ack_set(position) is None:
            count = holder.pending_acks.get(position)
            if count is not None:  # bits past the batch would keep the entry forever
                ack_set &= (1 << count) - 1
        self.cursor.delete_batch_indexes(position, ack_set)
        if self.cursor.is_acked(position):
            self._forget(position)
        else:
            remaining = self.cursor.batch_ack_set(position)
            if remaining is not None and holder is not None:
                before = holder.pending_acks.get(position, 0)
                after = min(remaining.bit_count(), before)
                holder.set_pending(position, after)
                self.unacked_messages += after - before
        self._after_acks()

    def ack_cumulative(self, consumer: Consumer, position: Position, ack_set: int | None = None) -> None:
        """Acknowledge everything up to and including ``position`` (CommandAck Cumulative); with a partial
        ``ack_set`` everything before ``position`` plus the acked indexes of ``position``'s batch.

        Pulsar ignores cumulative acks on Shared and Key_Shared subscriptions (semantics.md gotcha #9).
        Raises ``InvalidCursorPositionError`` past the last entry.
        """
        if self.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            log.warning("received cumulative ack on shared subscription %s, ignoring", self.name)
            return
        cursor = self.cursor
        target = position
        if ack_set is not None:
            target = self.topic.ledger.previous_position(position)
        if target > cursor.mark_delete_position:
            cursor.mark_delete(target)
        if ack_set is not None:
            self.ack_batch_index(consumer, position, ack_set)
        mark_delete = cursor.mark_delete_position
        for pos in [p for p in consumer.pending_acks if p <= mark_delete]:
            self._forget(pos)
        self.replay_positions = {p for p in self.replay_positions if p > mark_delete}
        self._after_acks()

    def _on_delayed_due(self, positions: list[Position]) -> None:
        self.replay_positions.update(p for p in positions if not self.cursor.is_acked(p))
        self.schedule_dispatch()

    def expire_until(self, position: Position) -> None:
        """Move the mark-delete position to ``position`` for any sub type (message TTL, backlog eviction):
        the entries up to it count as acknowledged and are no longer pending or redelivered."""
        cursor = self.cursor
        if position <= cursor.mark_delete_position:
            return
        cursor.mark_delete(position)
        mark_delete = cursor.mark_delete_position
        for pos in [p for p in self._pending if p <= mark_delete]:
            self._forget(pos)
        self.replay_positions = {p for p in self.replay_positions if p > mark_delete}
        self._after_acks()

    def _after_acks(self) -> None:
        if self.key_shared is not None:
            self.key_shared.on_acks()
        self._update_blocked()
        self.schedule_dispatch()

    def _update_blocked(self) -> None:
        """Block / unblock consumers and the whole dispatcher on unacked messages (Shared and Key_Shared only,
        Pulsar ``isIndividualAckMode``): blocked at the limit, unblocked at half of it; 0 disables."""
        if self.sub_type not in (SubType.SHARED, SubType.KEY_SHARED):
            return
        limit = self.max_unacked_messages_per_consumer
        for consumer in self.consumers:
            if limit <= 0:
                consumer.blocked = False
            elif consumer.blocked:
                consumer.blocked = consumer.unacked_messages > limit // 2
            else:
                consumer.blocked = consumer.unacked_messages >= limit
        limit = self.max_unacked_messages_per_subscription
        if limit <= 0:
            self.blocked_on_unacked = False
        elif self.blocked_on_unacked:
            self.blocked_on_unacked = self.unacked_messages > limit // 2
        else:
            self.blocked_on_unacked = self.unacked_messages >= limit

    def redeliver_unacknowledged(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        """CommandRedeliverUnacknowledgedMessages: redeliver ``positions`` of ``consumer`` (Shared and
        Key_Shared: negative acks and ack timeouts), or all of its unacknowledged entries when ``positions``
        is None or the subscription is Exclusive/Failover. Each redelivered entry's redelivery_count grows by
        one (what the client's dead-letter policy reads)."""
        if positions is None or self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            targets = list(consumer.pending_acks)
        else:
            targets = [p for p in positions if p in consumer.pending_acks]
        for position in targets:
            count = consumer.pending_acks.get(position, 0)
            if consumer.remove_pending(position):
                self.unacked_messages -= count
            self._pending.pop(position, None)
            self.replay_positions.add(position)
            self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1
        if targets:
            self._update_blocked()
            self.schedule_dispatch()

    # ------------------------------------------------------------------ dispatch
    def schedule_dispatch(self) -> None:
        """Run a dispatch round soon (coalesced: at most one pending round per subscription)."""
        if not self._scheduled and self.consumers:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch_round)

    def _dispatch_round(self) -> None:
        self._scheduled = False
        try:
            for _ in range(16):  # bounded so one busy subscription cannot starve the loop
                if not self._dispatch_once():
                    return
            self.schedule_dispatch()
        except Exception:
            log.exception("dispatch failed on %s/%s", self.topic.name, self.name)

    def _ready_consumers(self) -> list[Consumer]:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            active = self._active
            return [active] if active is not None and active.permits > 0 and active.cnx.writable else []
        if self.blocked_on_unacked:
            return []
        return [c for c in self.consumers if c.permits > 0 and not c.blocked and c.cnx.writable]

    def _dispatch_once(self) -> bool:
        """One read + send round. Returns True when more may be dispatched right away."""
        if self.key_shared is not None:
            return self.key_shared.dispatch_once()
        ready = self._ready_consumers()
        if not ready:
            return False
        budget = min(sum(c.permits for c in ready), self.max_read_batch_size)
        from_cursor = not self.replay_positions
        entries = self.cursor.read_entries(budget) if from_cursor else self._read_redeliveries(budget)
        if not entries:
            return not from_cursor and bool(self.replay_positions)
        unsent = self._send(entries, ready)
        if unsent is not None and from_cursor:
            self.cursor.seek(entries[unsent].position)
        return unsent is None

    def _read_redeliveries(self, budget: int) -> list[Entry]:
        entries: list[Entry] = []
        for position in sorted(self.replay_positions):
            if len(entries) >= budget:
                break
            if self.cursor.is_acked(position):
                self.replay_positions.discard(position)
                continue
            entry = self.topic.ledger.get_entry(position)
            if entry is None:  # trimmed away
                self.replay_positions.discard(position)
                continue
            entries.append(entry)
        return entries

    def _send(self, entries: list[Entry], ready: list[Consumer]) -> int | None:
        """Send ``entries`` to consumers in ``ready``; returns the index of the first unsent entry, or None.
        On Shared subscriptions an entry whose deliver_at_time lies ahead goes to the delayed tracker."""
        track_delays = self.sub_type == SubType.SHARED and self.options.delayed_delivery_enabled
        for i, entry in enumerate(entries):
            count, deliver_at = entry_dispatch_info(entry.data)
            if deliver_at and track_delays and self.delayed.is_delayed(deliver_at):
                self.delayed.add(entry.position, deliver_at)
                self.replay_positions.discard(entry.position)
                continue
            consumer = self._pick(ready)
            if consumer is None:
                return i
            self.deliver(consumer, entry, count)
            if consumer.blocked:
                ready = [c for c in ready if not c.blocked]
        return None

    def deliver(self, consumer: Consumer, entry: Entry, count: int) -> None:
        """Send one entry (``count`` messages) to ``consumer``: charge permits, record it as pending, and send
        the stored bytes with the entry's redelivery count and, for a partly acked batch, its ack_set."""
        position = entry.position
        ack_words = None
        remaining = self.cursor.batch_ack_set(position)
        if remaining is not None:  # partly acked batch: only the unacked indexes count (PIP-54)
            count = min(remaining.bit_count(), count)
            ack_words = _to_signed_words(remaining)
        consumer.permits -= count
        consumer.add_pending(position, count)
        self.unacked_messages += count
        consumer.msg_out_counter += count
        consumer.bytes_out_counter += len(entry.data)
        self._pending[position] = consumer
        self.replay_positions.discard(position)
        self.msg_out_counter += count
        consumer.cnx.send_message(
            consumer.consumer_id,
            position,
            self.topic.partition_index,
            entry.data,
            self.redelivery_counts.get(position, 0),
            ack_words,
        )
        limit = self.max_unacked_messages_per_consumer
        if limit > 0 and consumer.unacked_messages >= limit and self.sub_type in _INDIVIDUAL_ACK_TYPES:
            self._update_blocked()

    def _pick(self, ready: list[Consumer]) -> Consumer | None:
        if self.blocked_on_unacked:
            return None
        n = len(ready)
        for k in range(n):
            consumer = ready[(self._rr_index + k) % n]
            if consumer.permits > 0 and not consumer.blocked and consumer.cnx.writable:
                self._rr_index = (self._rr_index + k + 1) % max(n, 1)
                return consumer
        return None

    # ------------------------------------------------------------------ stats
    def close_consumers(self) -> None:
        """Disconnect every consumer (broker-initiated CLOSE_CONSUMER); clients reconnect by themselves."""
        for consumer in list(self.consumers):
            consumer.cnx.send_close_consumer(consumer.consumer_id)
            self.remove_consumer(consumer)
