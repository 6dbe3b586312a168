"""Key_Shared dispatch of one subscription (Pulsar ``PersistentStickyKeyDispatcherMultipleConsumersClassic``).

Each entry goes to the consumer its sticky-key hash selects (``key_shared``). Order per key is kept:

- an entry whose consumer cannot take it now (no permits, blocked on unacked messages, not writable, or a
  recently joined consumer, below) is parked in the subscription's replay set, and so is every later entry
  for that consumer in the same round; replays go out in position order before new entries;
- **recently joined consumers** (``allowOutOfOrderDelivery=false``, the default): a consumer joining while
  entries were delivered and not yet acknowledged is recorded with the cursor's read position at join time;
  it receives entries at or after that position only once the mark-delete position has reached it, so a
  key moving to it never overtakes an earlier delivery of that key still unacknowledged elsewhere.
  ``allowOutOfOrderDelivery=true`` skips this guard.

A round reads no new entries while the replay set holds ``max_replay`` positions or more (Pulsar stops
reading when its redelivery set is that large, too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quasar.broker.key_shared import (
    NONE_KEY,
    ConsistentHashingSelector,
    ConsumerAssignError,
    HashRangeAutoSplitSelector,
    HashRangeExclusiveSelector,
    StickyKeySelector,
    sticky_key_hash,
)
from quasar.ledger.position import Position
from quasar.protocol import num_messages, parse_headers_and_payload

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer
    from quasar.broker.subscription import Subscription

__all__ = ["AUTO_SPLIT", "STICKY", "KeySharedDispatch", "KeySharedMeta", "entry_key_info"]

AUTO_SPLIT = 0
STICKY = 1


@dataclass(frozen=True, slots=True)
class KeySharedMeta:
    """CommandSubscribe.keySharedMeta: ``mode`` (AUTO_SPLIT 0 / STICKY 1), inclusive ``hash_ranges`` in
    0..65535 (STICKY), ``allow_out_of_order_delivery``."""

    mode: int = AUTO_SPLIT
    hash_ranges: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    allow_out_of_order_delivery: bool = False


def entry_key_info(data: memoryview) -> tuple[int, int]:
    """(messages in the entry, sticky-key hash) from the stored entry's MessageMetadata: ordering_key, else
    partition_key, else NONE_KEY (Pulsar ``peekStickyKey``)."""
    metadata = parse_headers_and_payload(data).metadata
    if metadata.HasField("ordering_key"):
        key = metadata.ordering_key
    elif metadata.HasField("partition_key"):
        key = metadata.partition_key.encode()
    else:
        key = NONE_KEY
    return num_messages(metadata), sticky_key_hash(key)


class KeySharedDispatch:
    """Key_Shared state and dispatch rounds of ``subscription``; created with its first consumer's meta."""

    def __init__(
        self,
        subscription: Subscription,
        meta: KeySharedMeta,
        *,
        use_consistent_hashing: bool = True,
        replica_points: int = 100,
        max_replay: int = 10_000,
    ) -> None:
        self._sub = subscription
        self.mode = meta.mode
        self.allow_out_of_order_delivery = meta.allow_out_of_order_delivery
        self.selector: StickyKeySelector
        if meta.mode == STICKY:
            self.selector = HashRangeExclusiveSelector()
        elif use_consistent_hashing:
            self.selector = ConsistentHashingSelector(replica_points)
        else:
            self.selector = HashRangeAutoSplitSelector()
        self.recently_joined: dict[Consumer, Position] = {}
        self._hashes: dict[Position, int] = {}  # sticky-key hash of parked (replay) entries
        self._max_replay = max_replay

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Consumer, meta: KeySharedMeta) -> None:
        """Place ``consumer`` in the selector. Raises ConsumerAssignError for a mode other than the
        subscription's, or (STICKY) bad or overlapping ranges."""
        if meta.mode != self.mode:
            raise ConsumerAssignError(
                f"Key_Shared mode {meta.mode} does not match the subscription's mode {self.mode}"
            )
        self.selector.add_consumer(consumer, meta.hash_ranges)
        sub = self._sub
        cursor = sub.cursor
        if (
            not self.allow_out_of_order_delivery
            and len(sub.consumers) > 0
            and cursor.read_position > cursor.ledger.next_valid_position(cursor.mark_delete_position)
        ):
            self.recently_joined[consumer] = cursor.read_position

    def remove_consumer(self, consumer: Consumer) -> None:
        """Take ``consumer`` out of the selector (before its pending entries are replayed, as Pulsar)."""
        self.selector.remove_consumer(consumer)
        self.recently_joined.pop(consumer, None)

    def on_acks(self) -> None:
        """Lift the recently-joined restriction of consumers whose join position the mark-delete reached."""
        if not self.recently_joined:
            return
        cursor = self._sub.cursor
        first_unacked = cursor.ledger.next_valid_position(cursor.mark_delete_position)
        for consumer in [c for c, joined in self.recently_joined.items() if first_unacked >= joined]:
            del self.recently_joined[consumer]

    def forget(self, position: Position) -> None:
        self._hashes.pop(position, None)

    # ------------------------------------------------------------------ dispatch
    def _can_take(self, target: Consumer | None, position: Position, ready: set[Consumer]) -> bool:
        if target is None or target not in ready:
            return False
        joined = self.recently_joined.get(target)
        return joined is None or position < joined

    def dispatch_once(self) -> bool:
        """One round: replays in position order, then new entries. Returns True when more may be sent now."""
        sub = self._sub
        if sub.blocked_on_unacked:
            return False
        ready = {c for c in sub.consumers if c.permits > 0 and not c.blocked and c.cnx.writable}
        if not ready:
            return False
        budget = min(sum(c.permits for c in ready), sub.max_read_batch_size)
        sent = 0
        select = self.selector.select
        cursor = sub.cursor
        replay = sub.replay_positions
        hashes = self._hashes
        if replay:
            ledger = sub.topic.ledger
            for position in sorted(replay):
                if sent >= budget or not ready:
                    break
                if cursor.is_acked(position):
                    replay.discard(position)
                    hashes.pop(position, None)
                    continue
                key_hash = hashes.get(position)
                if key_hash is not None:
                    target = select(key_hash)
                    if not self._can_take(target, position, ready):
                        if target is not None:
                            ready.discard(target)  # later entries for it wait behind this one
                        continue
                entry = ledger.get_entry(position)
                if entry is None:  # trimmed away
                    replay.discard(position)
                    hashes.pop(position, None)
                    continue
                count, key_hash = entry_key_info(entry.data)
                target = select(key_hash)
                if target is None or not self._can_take(target, position, ready):
                    hashes[position] = key_hash
                    if target is not None:
                        ready.discard(target)
                    continue
                hashes.pop(position, None)
                sub.deliver(target, entry, count)
                sent += 1
                if target.permits <= 0 or target.blocked:
                    ready.discard(target)
        if sent >= budget or not ready or len(replay) >= self._max_replay:
            return sent > 0 and bool(ready)
        entries = cursor.read_entries(budget - sent)
        for entry in entries:
            count, key_hash = entry_key_info(entry.data)
            target = select(key_hash)
            position = entry.position
            if target is None or not self._can_take(target, position, ready):
                replay.add(position)
                hashes[position] = key_hash
                if target is not None:
                    ready.discard(target)
                continue
            sub.deliver(target, entry, count)
            sent += 1
            if target.permits <= 0 or target.blocked:
                ready.discard(target)
        return bool(entries) and bool(ready)
