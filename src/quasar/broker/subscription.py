"""Persistent subscriptions: a managed cursor, the consumers attached to it, and its dispatch policy.

Follows Pulsar's ``PersistentSubscription``: the subscription keeps what every dispatch policy shares, and its
:class:`~quasar.broker.dispatchers.Dispatcher` (Exclusive, Failover, Shared, Key_Shared; chosen by the first
consumer's sub type) decides who receives which entry. A round reads up to ``max_read_batch_size`` entries
from the cursor's read position (redeliveries first), hands each entry to a consumer with permits, and charges
it the entry's message count. Entries of a consumer that goes away are redelivered: to the remaining consumers
(Shared, Key_Shared), or to the next consumer by rewinding the cursor to the first unacknowledged entry when
none is left. The stored bytes go out unchanged (the MESSAGE frame is the command header + the stored span); a
partly acknowledged batch carries the cursor's batch-index ack set, and only its unacknowledged messages are
charged against permits (PIP-54). Shared and Key_Shared block a consumer at
``max_unacked_messages_per_consumer`` and the whole subscription at ``max_unacked_messages_per_subscription``,
until acks bring the count to half.

Timers the subscription owns (cancelled by :meth:`Subscription.close`, which the topic calls when it drops
the subscription): the coalesced dispatch round, a reader's idle timer (``drop_if_idle_after``), and the
delayed-delivery timer of a Shared dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from quasar.broker.compaction.reads import CompactedReads
from quasar.broker.compaction.view import CompactedView
from quasar.broker.consumer import Consumer, ConsumerTopic
from quasar.broker.dispatchers import Dispatcher, MultipleConsumersDispatcher, SingleActiveConsumerDispatcher
from quasar.broker.errors import ConsumerBusyError
from quasar.broker.key_shared import KeySharedMeta
from quasar.broker.key_shared_dispatcher import KeySharedDispatcher
from quasar.broker.topic_stats import RateMeter, TopicCounters
from quasar.errors import QuasarError
from quasar.ledger.entry import Entry
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.position import Position
from quasar.protocol.ack_set import ack_set_words
from quasar.protocol.enums import SubType

if TYPE_CHECKING:
    from quasar.ledger.managed_ledger import ManagedLedger
    from quasar.protocol import TopicName

__all__ = ["Subscription", "SubscriptionOptions", "SubscriptionTopic"]

log = logging.getLogger(__name__)

DISPATCH_ROUNDS_PER_CALLBACK = 16
"""Dispatch rounds per event-loop callback, so one busy subscription cannot starve the loop."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionOptions:
    """Dispatcher settings (Pulsar broker.conf names in snake_case):
    ``max_read_batch_size`` entries per read (dispatcherMaxReadBatchSize 100);
    ``max_unacked_messages_per_consumer`` / ``_per_subscription`` (50,000 / 200,000; 0 disables; Shared and
    Key_Shared only); ``key_shared_use_consistent_hashing`` (subscriptionKeySharedUseConsistentHashing, true)
    and ``key_shared_replica_points`` (subscriptionKeySharedConsistentHashingReplicaPoints, 100);
    ``delayed_delivery_enabled``, ``delayed_delivery_tick_time_ms`` (1000) and
    ``delayed_delivery_deliver_at_time_strict`` (false): Shared delayed delivery."""

    max_read_batch_size: int = 100
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    key_shared_use_consistent_hashing: bool = True
    key_shared_replica_points: int = 100
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_ms: int = 1000
    delayed_delivery_deliver_at_time_strict: bool = False


class SubscriptionTopic(ConsumerTopic, Protocol):
    """What a persistent subscription, its dispatcher and the consumer commands use of its topic
    (``PersistentTopic`` implements it)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    def remove_non_durable_if_idle(self, subscription: Subscription) -> None:
        """Drop ``subscription`` if it is a reader's and no consumer is attached."""
        ...

    def find_position_by_publish_time(self, publish_time_ms: int) -> Position:
        """First entry published at or after ``publish_time_ms`` (the position after the last when none)."""
        ...

    @property
    def compacted_view(self) -> CompactedView | None:
        """The topic's compacted view (``compaction.view``), None before its first compaction."""
        ...

    @property
    def counters(self) -> TopicCounters:
        """The topic's counters; dispatch rounds record their latency there (``topic_stats``)."""
        ...

    last_active: float
    """``time.monotonic()`` when the topic last lost a producer or consumer (idle-topic unload)."""


class Subscription:
    """A named subscription on a persistent topic, backed by a managed cursor.

    ``durable`` subscriptions keep their cursor (mark-delete position and acked ranges) across restarts;
    non-durable ones (readers) vanish with their consumer.
    """

    persistent = True

    def __init__(
        self,
        topic: SubscriptionTopic,
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
        self.consumers: list[Consumer] = []
        options = options or SubscriptionOptions()
        self.options = options
        self.max_read_batch_size = options.max_read_batch_size
        self.dispatcher: Dispatcher | None = None  # chosen by the first consumer; kept for its sub type
        # position -> consumer holding it (delivered, not acked)
        self._pending: dict[Position, Consumer] = {}
        # positions to deliver again (redeliveries; Key_Shared: entries parked to keep key order)
        self.replay_positions: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        self._dispatch_handle: asyncio.Handle | None = None  # the pending dispatch round, if any
        self._end_of_topic_handle: asyncio.Handle | None = None  # REACHED_END_OF_TOPIC after a SUBSCRIBE
        self._idle_timer: asyncio.TimerHandle | None = None
        self.msg_out_counter = 0
        self.bytes_out_counter = 0  # entry bytes dispatched (Pulsar's subscription bytesOutCounter)
        self.rate_out = RateMeter()  # msgRateOut / msgThroughputOut over the stats period
        self._dispatch_asked = 0.0  # perf_counter() when the pending dispatch round was asked for
        self.max_unacked_messages_per_consumer = options.max_unacked_messages_per_consumer
        self.max_unacked_messages_per_subscription = options.max_unacked_messages_per_subscription
        self.unacked_messages = 0  # over every consumer, kept by deliver / _forget / redeliveries
        self.blocked_on_unacked = False
        self.read_compacted = (
            False  # consumers read the compacted view up to its horizon (Exclusive/Failover)
        )
        self._compacted = CompactedReads()

    @property
    def sub_type(self) -> SubType | None:
        """The sub type of the consumers (of the last ones, while none is attached); None before the first."""
        return None if self.dispatcher is None else self.dispatcher.sub_type

    @property
    def _individual_ack(self) -> bool:
        return self.dispatcher is not None and self.dispatcher.individual_ack

    # ------------------------------------------------------------------ consumers
    def add_consumer(
        self, consumer: Consumer, sub_type: SubType, key_shared_meta: KeySharedMeta | None = None
    ) -> None:
        """Attach ``consumer``. Raises ConsumerBusyError as Pulsar does: a second consumer on an Exclusive
        subscription, or a sub type different from the one the subscription has while consumers are attached;
        ConsumerAssignError for a Key_Shared consumer that cannot be placed (mode mismatch, STICKY ranges).
        The first consumer (while none is attached) chooses the dispatch policy.
        """
        dispatcher = self.dispatcher
        if self.consumers and dispatcher is not None:
            if sub_type != dispatcher.sub_type:
                raise ConsumerBusyError(f"Subscription {self.name} is of different type")
        else:
            dispatcher = self._new_dispatcher(sub_type, key_shared_meta)
        dispatcher.add_consumer(consumer, key_shared_meta)
        if dispatcher is not self.dispatcher:
            if self.dispatcher is not None:
                self.dispatcher.close()
            self.dispatcher = dispatcher
        self.consumers.append(consumer)
        dispatcher.consumers_changed()
        self._update_blocked()
        self.schedule_dispatch()
        if self.topic.ledger.is_terminated and self._end_of_topic_handle is None:
            # told after the SUBSCRIBE's SUCCESS, which follows this call
            self._end_of_topic_handle = asyncio.get_running_loop().call_soon(
                self._end_of_topic_after_subscribe
            )

    def _new_dispatcher(self, sub_type: SubType, meta: KeySharedMeta | None) -> Dispatcher:
        """The dispatch policy for ``sub_type`` (``meta``: the first Key_Shared consumer's keySharedMeta)."""
        options = self.options
        if sub_type == SubType.Shared:
            return MultipleConsumersDispatcher(
                self,
                delayed_delivery_enabled=options.delayed_delivery_enabled,
                tick_ms=options.delayed_delivery_tick_time_ms,
                strict=options.delayed_delivery_deliver_at_time_strict,
            )
        if sub_type == SubType.Key_Shared:
            return KeySharedDispatcher(
                self,
                meta or KeySharedMeta(),
                use_consistent_hashing=options.key_shared_use_consistent_hashing,
                replica_points=options.key_shared_replica_points,
            )
        return SingleActiveConsumerDispatcher(self, sub_type)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer``; its unacknowledged entries become redeliverable."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self.topic.last_active = time.monotonic()
        dispatcher = self.dispatcher
        if dispatcher is not None:
            dispatcher.remove_consumer(consumer)
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
            if dispatcher is not None:
                dispatcher.close()  # delayed entries are read (and tracked) again after the rewind
            self.cursor.rewind()
            self._compacted.reset()
        self._update_blocked()
        if dispatcher is not None:
            dispatcher.consumers_changed()
        self.schedule_dispatch()

    def rewind_delivery(self) -> None:
        """Forget every delivery in flight and rewind the cursor to the first unacknowledged entry (a Failover
        subscription whose active consumer changed: the new one receives everything not yet acknowledged)."""
        for consumer in self.consumers:
            consumer.clear_pending()
        self.unacked_messages = 0
        self._pending.clear()
        self.replay_positions.clear()
        self.cursor.rewind()
        self._compacted.reset()

    def close_consumers(self) -> None:
        """Disconnect every consumer (broker-initiated CLOSE_CONSUMER); clients reconnect by themselves."""
        for consumer in list(self.consumers):
            consumer.cnx.send_close_consumer(consumer.consumer_id)
            self.remove_consumer(consumer)

    def drop_if_idle(self) -> None:
        """Ask the topic to drop this subscription now if it is non-durable and no consumer is attached."""
        self.topic.remove_non_durable_if_idle(self)

    def drop_if_idle_after(self, delay_s: float) -> None:
        """In ``delay_s`` seconds, ask the topic to drop this (non-durable) subscription if no consumer is
        attached then. A reader's subscription outlives a SEEK this way, so that its re-subscribe finds the
        reset cursor. A later call replaces the timer; :meth:`close` cancels it."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = asyncio.get_running_loop().call_later(delay_s, self._on_idle_timer)

    def _on_idle_timer(self) -> None:
        self._idle_timer = None
        self.drop_if_idle()

    def close(self) -> None:
        """Cancel the subscription's timers: the pending dispatch round, the idle timer and the dispatcher's
        (delayed delivery). The topic calls this when it drops the subscription. Idempotent."""
        if self._dispatch_handle is not None:
            self._dispatch_handle.cancel()
            self._dispatch_handle = None
        if self._end_of_topic_handle is not None:
            self._end_of_topic_handle.cancel()
            self._end_of_topic_handle = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self.dispatcher is not None:
            self.dispatcher.close()

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
        if self.dispatcher is not None:
            self.dispatcher.forget(position)

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
        if self._individual_ack:
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
        if self.dispatcher is not None:
            self.dispatcher.on_acks()
        self._update_blocked()
        self.schedule_dispatch()
        if self.topic.ledger.is_terminated:
            self.notify_end_of_topic()

    def _end_of_topic_after_subscribe(self) -> None:
        self._end_of_topic_handle = None
        self.notify_end_of_topic()

    def notify_end_of_topic(self) -> None:
        """REACHED_END_OF_TOPIC to every consumer once the topic is terminated and this subscription has
        acknowledged everything (Pulsar ``PersistentSubscription.topicTerminated`` and the dispatchers'
        ``NoMoreEntriesToReadException`` path: only when the backlog is 0)."""
        if not self.topic.ledger.is_terminated or self.cursor.number_of_entries_in_backlog > 0:
            return
        for consumer in list(self.consumers):
            consumer.cnx.send_reached_end_of_topic(consumer.consumer_id)

    def _update_blocked(self) -> None:
        """Block / unblock consumers and the whole dispatcher on unacked messages (Shared and Key_Shared only,
        Pulsar ``isIndividualAckMode``): blocked at the limit, unblocked at half of it; 0 disables."""
        if not self._individual_ack:
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

    def redeliver_unacknowledged(
        self,
        consumer: Consumer,
        positions: Iterable[Position] | None,
        *,
        count_redelivery: bool = True,
    ) -> None:
        """CommandRedeliverUnacknowledgedMessages: redeliver ``positions`` of ``consumer`` (Shared and
        Key_Shared: negative acks and ack timeouts), or all of its unacknowledged entries when ``positions``
        is None or the subscription is Exclusive/Failover. Each redelivered entry's redelivery_count grows by
        one (what the client's dead-letter policy reads), unless ``count_redelivery`` is False (entries
        handed back unseen, ``pop_consumer``)."""
        if positions is None or not self._individual_ack:
            targets = list(consumer.pending_acks)
        else:
            targets = [p for p in positions if p in consumer.pending_acks]
        for position in targets:
            count = consumer.pending_acks.get(position, 0)
            if consumer.remove_pending(position):
                self.unacked_messages -= count
            self._pending.pop(position, None)
            self.replay_positions.add(position)
            if count_redelivery:
                self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1
        if targets:
            self._update_blocked()
            self.schedule_dispatch()

    # ------------------------------------------------------------------ dispatch
    def schedule_dispatch(self) -> None:
        """Run a dispatch round soon (coalesced: at most one pending round per subscription)."""
        if self._dispatch_handle is None and self.consumers:
            self._dispatch_asked = time.perf_counter()
            self._dispatch_handle = asyncio.get_running_loop().call_soon(self._dispatch_round)

    def _dispatch_round(self) -> None:
        self._dispatch_handle = None
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        asked, sent_before = self._dispatch_asked, self.msg_out_counter
        try:
            for _ in range(DISPATCH_ROUNDS_PER_CALLBACK):
                if not dispatcher.dispatch_once():
                    return
            self.schedule_dispatch()
        except QuasarError:  # a read that failed, an entry that cannot be parsed: retried on the next trigger
            log.exception("dispatch failed on %s/%s", self.topic.name, self.name)
        finally:  # one observation per round, weighted by the messages it sent (O(1) per round)
            sent = self.msg_out_counter - sent_before
            if sent > 0:
                self.topic.counters.dispatch_latency.observe(time.perf_counter() - asked, sent)

    def add_replays(self, positions: Iterable[Position]) -> None:
        """Deliver ``positions`` again (delayed entries now due), skipping those acknowledged meanwhile."""
        self.replay_positions.update(p for p in positions if not self.cursor.is_acked(p))
        self.schedule_dispatch()

    def read_new(self, budget: int) -> list[Entry]:
        """Up to ``budget`` new entries from the read position: from the compacted view up to its horizon
        when ``read_compacted`` (``compaction.reads``), else (and then) from the cursor."""
        view = self.topic.compacted_view if self.read_compacted else None
        if view is not None:
            entries = self._compacted.read(view, self.cursor, budget)
            if entries is not None:
                if not entries:  # only acknowledged entries so far: go on in the next round
                    self.schedule_dispatch()
                return entries
        return self.cursor.read_entries(budget)

    def unread(self, position: Position) -> None:
        """``position`` and what :meth:`read_new` returned after it were not sent: read them again next."""
        view = self.topic.compacted_view if self.read_compacted else None
        self._compacted.unread(view, self.cursor, position)

    def read_redeliveries(self, budget: int) -> list[Entry]:
        """Up to ``budget`` entries of the replay set, in position order (acknowledged and trimmed positions
        leave the set)."""
        entries: list[Entry] = []
        for position in sorted(self.replay_positions):
            if len(entries) >= budget:
                break
            if self.cursor.is_acked(position):
                self.replay_positions.discard(position)
                continue
            view = self.topic.compacted_view if self.read_compacted else None
            entry = view.get(position) if view is not None else None
            if entry is None:
                entry = self.topic.ledger.get_entry(position)
            if entry is None:  # trimmed away
                self.replay_positions.discard(position)
                continue
            entries.append(entry)
        return entries

    def deliver(self, consumer: Consumer, entry: Entry, count: int) -> None:
        """Send one entry (``count`` messages) to ``consumer``: charge permits, record it as pending, and send
        the stored bytes with the entry's redelivery count and, for a partly acked batch, its ack_set."""
        position = entry.position
        ack_words = None
        remaining = self.cursor.batch_ack_set(position)
        if remaining is not None:  # partly acked batch: only the unacked indexes count (PIP-54)
            count = min(remaining.bit_count(), count)
            ack_words = ack_set_words(remaining)
        consumer.permits -= count
        consumer.add_pending(position, count)
        self.unacked_messages += count
        consumer.msg_out_counter += count
        consumer.bytes_out_counter += len(entry.data)
        self._pending[position] = consumer
        self.replay_positions.discard(position)
        self.msg_out_counter += count
        self.bytes_out_counter += len(entry.data)
        consumer.cnx.send_message(
            consumer.consumer_id,
            position,
            self.topic.partition_index,
            entry.data,
            self.redelivery_counts.get(position, 0),
            ack_words,
        )
        limit = self.max_unacked_messages_per_consumer
        if limit > 0 and consumer.unacked_messages >= limit and self._individual_ack:
            self._update_blocked()
