"""Where a ``read_compacted`` subscription stands in its topic's compacted view (Pulsar
``CompactedTopicImpl.asyncReadEntriesOrWait``).

While the subscription's next position is at or before the view's horizon, new entries come from the view:
the surviving entries whose original positions are at or after that position, with their original positions;
once the view is exhausted the cursor moves past the horizon and the topic is read as usual. Acks, the
mark-delete position and redeliveries all use original positions.

The next position lives here, not only in the cursor: the cursor addresses entries that the topic still
holds, while the view may hold entries whose original ledgers were trimmed since. A cursor at the head of
the topic (nothing held before its read position) reads the view from its start, so a subscription from
Earliest sees the compacted part even after trimming; :meth:`CompactedReads.reset` (rewinds, seeks,
consumer changes) derives the position from the cursor again.
"""

from __future__ import annotations

from quasar.broker.compaction.view import CompactedView
from quasar.broker.errors import NotAllowedError
from quasar.ledger.entry import Entry
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.position import EARLIEST, Position
from quasar.protocol.enums import SubType

__all__ = ["CompactedReads", "check_read_compacted"]


_MAX_READS_PER_CALL = 16
"""View reads per call that may find only acknowledged entries before the call gives the loop back."""


def _acked(cursor: ManagedCursor, position: Position, first_held: Position) -> bool:
    """Whether the cursor acknowledged ``position``. Below the topic's first held entry (trimmed ledgers) only
    an individual ack counts: a fresh cursor's mark-delete position lies past those entries."""
    if position >= first_held:
        return cursor.is_acked(position)
    return cursor.individually_deleted.contains(position)


class CompactedReads:
    """The view position of one subscription (module docstring)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: Position | None = None

    def reset(self) -> None:
        """Take the position from the cursor again at the next read (rewind, seek, consumer change)."""
        self._next = None

    def _start(self, cursor: ManagedCursor) -> Position:
        ledger = cursor.ledger
        read_position = cursor.read_position
        at_head = ledger.table.ceil_offset(read_position) <= ledger.first_available_offset
        if self._next is None:
            self._next = EARLIEST if at_head else read_position
        elif not at_head and read_position > self._next:  # acks moved the cursor on
            self._next = read_position
        return self._next

    def read(self, view: CompactedView, cursor: ManagedCursor, max_entries: int) -> list[Entry] | None:
        """Up to ``max_entries`` entries of ``view`` from the subscription's position that the cursor has not
        acknowledged, or None once the view is behind the position (the cursor then reads the topic past
        the horizon). ``[]`` when a bounded number of reads found only acknowledged entries: read again."""
        start = self._start(cursor)
        if start > view.horizon:
            return None
        first_held = cursor.ledger.table.position_of(cursor.ledger.first_available_offset)
        for _ in range(_MAX_READS_PER_CALL):
            entries = view.read(start, max_entries)
            if not entries:
                self._next = Position(view.horizon.ledger_id, view.horizon.entry_id + 1)
                cursor.seek(cursor.ledger.next_valid_position(view.horizon))
                return None
            last = entries[-1].position
            start = self._next = Position(last.ledger_id, last.entry_id + 1)
            cursor.seek(start)
            fresh = [e for e in entries if not _acked(cursor, e.position, first_held)]
            if fresh:
                return fresh
        return []

    def unread(self, view: CompactedView | None, cursor: ManagedCursor, position: Position) -> None:
        """``position`` (read earlier) was not sent: read it again next."""
        if view is not None and self._next is not None and position <= view.horizon:
            self._next = position
        cursor.seek(position)


def check_read_compacted(persistent: bool, sub_type: SubType) -> None:
    """Refuse ``read_compacted`` where Pulsar refuses it (``PersistentTopic.subscribe``,
    ``NonPersistentTopic.subscribe``): NotAllowedError on a non-persistent topic, or for a subscription
    that is not Exclusive or Failover."""
    if not persistent:
        raise NotAllowedError("readCompacted only valid on persistent topics")
    if sub_type not in (SubType.Exclusive, SubType.Failover):
        raise NotAllowedError("readCompacted only allowed on failover or exclusive subscriptions")
