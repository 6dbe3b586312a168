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

from typing import TYPE_CHECKING

from quasar.broker.errors import ConsumerAssignError
from quasar.broker.key_shared import NONE_KEY, KeySharedMeta, StickyKeySelector, new_selector, sticky_key_hash
from quasar.ledger.position import Position
from quasar.protocol import num_messages, parse_headers_and_payload
from quasar.protocol.enums import SubType

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer
    from quasar.broker.dispatchers import DispatchSource

__all__ = ["KeySharedDispatcher", "entry_key_info"]


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


class KeySharedDispatcher:
    """Key_Shared state and dispatch rounds of a subscription (``source``); created with its first consumer's
    meta; ``use_consistent_hashing`` / ``replica_points``: the AUTO_SPLIT selector (``key_shared.new_selector``).

    A :class:`~quasar.broker.dispatchers.Dispatcher`: Key_Shared acknowledges individually (cumulative acks
    are ignored, unacked-message limits apply).
    """

    sub_type = SubType.Key_Shared
    individual_ack = True

    def __init__(
        self,
        source: DispatchSource,
        meta: KeySharedMeta,
        *,
        use_consistent_hashing: bool = True,
        replica_points: int = 100,
        max_replay: int = 10_000,
    ) -> None:
        self._sub = source
        self.mode = meta.mode
        self.allow_out_of_order_delivery = meta.allow_out_of_order_delivery
        self.selector: StickyKeySelector = new_selector(
            meta.mode, use_consistent_hashing=use_consistent_hashing, replica_points=replica_points
        )
        self.recently_joined: dict[Consumer, Position] = {}
        self._hashes: dict[Position, int] = {}  # sticky-key hash of parked (replay) entries
        self._max_replay = max_replay

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Consumer, meta: KeySharedMeta | None) -> None:
        """Place ``consumer`` in the selector (before it joins the subscription's consumers). Raises
        ConsumerAssignError for a mode other than the subscription's, or (STICKY) bad or overlapping ranges."""
        meta = meta or KeySharedMeta()
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

    def consumers_changed(self) -> None:
        pass  # the selector was updated by add_consumer / remove_consumer

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

    def close(self) -> None:
        pass  # no timer of its own

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
        sent = self._dispatch_replays(ready, budget) if sub.replay_positions else 0
        if sent >= budget or not ready or len(sub.replay_positions) >= self._max_replay:
            return sent > 0 and bool(ready)
        return self._dispatch_new(ready, budget - sent)

    def _dispatch_replays(self, ready: set[Consumer], budget: int) -> int:
        """Send parked entries in position order to consumers in ``ready`` (shrunk as consumers fill up or
        must wait); returns how many entries went out."""
        sub = self._sub
        select = self.selector.select
        cursor = sub.cursor
        replay = sub.replay_positions
        hashes = self._hashes
        ledger = sub.topic.ledger
        sent = 0
        for position in sorted(replay):
            if sent >= budget or not ready:
                break
            if cursor.is_acked(position):
                replay.discard(position)
                hashes.pop(position, None)
                continue
            key_hash = hashes.get(position)
            if key_hash is not None:  # known key: skip the read while its consumer cannot take it
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
        return sent

    def _dispatch_new(self, ready: set[Consumer], budget: int) -> bool:
        """Read up to ``budget`` new entries and send each to its consumer, parking those it cannot take now.
        Returns True when more may be sent now."""
        sub = self._sub
        select = self.selector.select
        replay = sub.replay_positions
        hashes = self._hashes
        entries = sub.cursor.read_entries(budget)
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
            if target.permits <= 0 or target.blocked:
                ready.discard(target)
        return bool(entries) and bool(ready)
