"""Subscriptions and their dispatcher (Exclusive and Shared), bounded by consumer permits.

Follows Pulsar's PersistentDispatcherSingleActiveConsumer (Exclusive) and
PersistentDispatcherMultipleConsumers (Shared): read up to ``dispatcher_max_read_batch_size`` entries from the
cursor's read position, hand each entry to a consumer with permits (round robin for Shared), and charge it the
entry's message count. Entries of a consumer that goes away are redelivered: to the remaining consumers
(Shared), or to the next consumer by rewinding the cursor to the first unacknowledged entry when none is left.
The stored bytes go out unchanged (the MESSAGE frame is the command header + the stored span).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from quasar.broker.consumer import Consumer
from quasar.broker.errors import ConsumerBusyError
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


def entry_num_messages(data: memoryview) -> int:
    """Messages in a stored entry: ``num_messages_in_batch`` when present, else 1 (parses metadata only)."""
    return num_messages(parse_headers_and_payload(data).metadata)


class Subscription:
    """A named subscription on a persistent topic, backed by a managed cursor.

    ``durable`` subscriptions keep their cursor (mark-delete position and acked ranges) across restarts;
    non-durable ones (readers) vanish with their consumer.
    """

    def __init__(
        self,
        topic: PersistentTopic,
        name: str,
        cursor: ManagedCursor,
        *,
        durable: bool = True,
        max_read_batch_size: int = 100,
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType | None = None
        self.consumers: list[Consumer] = []
        self._max_read_batch_size = max_read_batch_size
        self._rr_index = 0
        self._active: Consumer | None = None  # Exclusive / Failover: the one consumer that receives
        # position -> consumer holding it (delivered, not acked)
        self._pending: dict[Position, Consumer] = {}
        # positions to deliver again before reading new entries
        self._redeliver: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        self._scheduled = False
        self.msg_out_counter = 0

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        """Attach ``consumer``. Raises ConsumerBusyError as Pulsar does: a second consumer on an Exclusive
        subscription, or a sub type different from the one the subscription has while consumers are attached.
        Key_Shared with several consumers arrives with the topic-semantics issue and is refused until then.
        """
        if self.consumers:
            if sub_type != self.sub_type:
                raise ConsumerBusyError(f"Subscription {self.name} is of different type")
            if sub_type == SubType.EXCLUSIVE:
                raise ConsumerBusyError(f"Exclusive consumer is already connected on subscription {self.name}")
            if sub_type == SubType.KEY_SHARED:
                raise ConsumerBusyError("Key_Shared with several consumers is not supported yet")
        else:
            self.sub_type = sub_type
        self.consumers.append(consumer)
        self._update_active_consumer()
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer``; its unacknowledged entries become redeliverable."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        for position in consumer.pending_acks:
            if self._pending.get(position) is consumer:
                del self._pending[position]
                self._redeliver.add(position)
        consumer.pending_acks.clear()
        if not self.consumers:
            # Nobody left: the next consumer starts from the first unacknowledged entry.
            self._pending.clear()
            self._redeliver.clear()
            self.cursor.rewind()
        self._update_active_consumer()
        self.schedule_dispatch()

    def _update_active_consumer(self) -> None:
        """Failover: pick the active consumer as Pulsar's PersistentDispatcherSingleActiveConsumer does
        (consumers ordered by priority level, then name; a partition picks ``partition_index % count``), tell
        every consumer whether it is active (ACTIVE_CONSUMER_CHANGE), and rewind the cursor on a change so the
        new active consumer receives everything not yet acknowledged."""
        if self.sub_type != SubType.FAILOVER or not self.consumers:
            self._active = self.consumers[0] if self.consumers else None
            return
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.consumer_name))
        index = self.topic.partition_index % len(ordered) if self.topic.partition_index >= 0 else 0
        active = ordered[index]
        changed = active is not self._active
        self._active = active
        if changed:
            for consumer in self.consumers:
                consumer.pending_acks.clear()
            self._pending.clear()
            self._redeliver.clear()
            self.cursor.rewind()
        for consumer in self.consumers:
            consumer.cnx.send_active_consumer_change(consumer.consumer_id, consumer is active)

    # ------------------------------------------------------------------ acks
    def ack_individual(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        """Individually acknowledge ``positions`` (CommandAck Individual)."""
        acked = []
        for position in positions:
            holder = self._pending.pop(position, None)
            if holder is not None:
                holder.pending_acks.pop(position, None)
            self._redeliver.discard(position)
            self.redelivery_counts.pop(position, None)
            acked.append(position)
        if acked:
            self.cursor.delete(acked)
            self.schedule_dispatch()

    def ack_cumulative(self, consumer: Consumer, position: Position) -> None:
        """Acknowledge everything up to and including ``position`` (CommandAck Cumulative).

        Pulsar ignores cumulative acks on Shared and Key_Shared subscriptions (semantics.md gotcha #9).
        """
        if self.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            log.warning("received cumulative ack on shared subscription %s, ignoring", self.name)
            return
        for pos in [p for p in consumer.pending_acks if p <= position]:
            consumer.pending_acks.pop(pos, None)
            self._pending.pop(pos, None)
            self.redelivery_counts.pop(pos, None)
        self._redeliver = {p for p in self._redeliver if p > position}
        self.cursor.mark_delete(position)
        self.schedule_dispatch()

    def redeliver_unacknowledged(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        """CommandRedeliverUnacknowledgedMessages: redeliver ``positions`` of ``consumer`` (Shared), or all
        of its unacknowledged entries when ``positions`` is None (Exclusive/Failover, or no ids given)."""
        if positions is None or self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            targets = list(consumer.pending_acks)
        else:
            targets = [p for p in positions if p in consumer.pending_acks]
        for position in targets:
            consumer.pending_acks.pop(position, None)
            self._pending.pop(position, None)
            self._redeliver.add(position)
            self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1
        if targets:
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
        return [c for c in self.consumers if c.permits > 0 and c.cnx.writable]

    def _dispatch_once(self) -> bool:
        """One read + send round. Returns True when more may be dispatched right away."""
        ready = self._ready_consumers()
        if not ready:
            return False
        budget = min(sum(c.permits for c in ready), self._max_read_batch_size)
        from_cursor = not self._redeliver
        entries = self.cursor.read_entries(budget) if from_cursor else self._read_redeliveries(budget)
        if not entries:
            return not from_cursor and bool(self._redeliver)
        unsent = self._send(entries, ready)
        if unsent is not None and from_cursor:
            self.cursor.seek(entries[unsent].position)
        return unsent is None

    def _read_redeliveries(self, budget: int) -> list[Entry]:
        entries: list[Entry] = []
        for position in sorted(self._redeliver):
            if len(entries) >= budget:
                break
            if self.cursor.is_acked(position):
                self._redeliver.discard(position)
                continue
            entry = self.topic.ledger.get_entry(position)
            if entry is None:  # trimmed away
                self._redeliver.discard(position)
                continue
            entries.append(entry)
        return entries

    def _send(self, entries: list[Entry], ready: list[Consumer]) -> int | None:
        """Send ``entries`` to consumers in ``ready``; returns the index of the first unsent entry, or None."""
        partition = self.topic.partition_index
        for i, entry in enumerate(entries):
            consumer = self._pick(ready)
            if consumer is None:
                return i
            count = entry_num_messages(entry.data)
            consumer.permits -= count
            consumer.pending_acks[entry.position] = count
            consumer.msg_out_counter += count
            consumer.bytes_out_counter += len(entry.data)
            self._pending[entry.position] = consumer
            self._redeliver.discard(entry.position)
            self.msg_out_counter += count
            consumer.cnx.send_message(
                consumer.consumer_id,
                entry.position,
                partition,
                entry.data,
                self.redelivery_counts.get(entry.position, 0),
            )
        return None

    def _pick(self, ready: list[Consumer]) -> Consumer | None:
        n = len(ready)
        for k in range(n):
            consumer = ready[(self._rr_index + k) % n]
            if consumer.permits > 0 and consumer.cnx.writable:
                self._rr_index = (self._rr_index + k + 1) % max(n, 1)
                return consumer
        return None

    # ------------------------------------------------------------------ stats
    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)

    def close_consumers(self) -> None:
        """Disconnect every consumer (broker-initiated CLOSE_CONSUMER); clients reconnect by themselves."""
        for consumer in list(self.consumers):
            consumer.cnx.send_close_consumer(consumer.consumer_id)
            self.remove_consumer(consumer)
