"""AckState: the acknowledgement state of one cursor, as pure data (no I/O, no locks, no callbacks).

Pulsar keeps this logic inside ``ManagedCursorImpl.asyncDelete`` / ``internalDelete`` /
``setAcknowledgedPosition``, interleaved with locking, metrics and persistence (reference/style.md §3.2-3.3).
Here it is one small object that ``ManagedCursor`` wraps with reads and persistence:

- ``mark_delete_position``: everything at or below it is acknowledged (Pulsar ``markDeletePosition``).
- ``individually_deleted``: acknowledged positions above it, as open-closed ranges
  (Pulsar ``individualDeletedMessages``).

Knowledge of the ledger's shape is passed in as ``next_position(p)``: the position of the first entry after
``p`` (it crosses ledger boundaries: the entry after the last one of ledger 7 is entry 0 of the next ledger),
or the position the next entry will get when ``p`` is at or past the end.

Invariants (tested with hypothesis): the mark-delete position never moves backwards through
``ack_individual`` / ``ack_cumulative``, and nothing at or below it remains in ``individually_deleted``.

Batch-index acknowledgement (Pulsar ``batchDeletedIndexes``, semantics.md B2/B7): per entry, a bit set of the
batch indexes still **unacknowledged** (bit i set = index i not acked), held as a Python int (bit i of word w
is bit ``64*w + i``). Each incoming ``ack_set`` is ANDed into it (the first one is taken as is); when it
becomes empty the entry is deleted through ``ack_individual`` and the set dropped. A whole-entry ack, a
cumulative ack covering the entry or a reset drops the set too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from quasar.ledger.errors import MarkDeletingMarkedPositionError
from quasar.ledger.position import Position
from quasar.ledger.range_set import PositionRangeSet

__all__ = ["AckState", "NextPosition"]

NextPosition = Callable[[Position], Position]
"""``next_position(p)``: the position of the first entry after ``p`` (see the module docstring)."""


@dataclass(slots=True)
class AckState:
    """Mark-delete position plus individually deleted ranges of one cursor."""

    mark_delete_position: Position
    individually_deleted: PositionRangeSet = field(default_factory=PositionRangeSet)
    batch_deleted_indexes: dict[Position, int] = field(default_factory=dict)

    def is_acked(self, position: Position) -> bool:
        """Whether ``position`` is at or below the mark-delete position or individually deleted."""
        return position <= self.mark_delete_position or self.individually_deleted.contains(position)

    def ack_individual(self, positions: Iterable[Position], next_position: NextPosition) -> Position:
        """Acknowledge each of ``positions`` individually and return the (possibly new) mark-delete position.

        Each position ``p`` adds the range ``(Position(p.ledger_id, p.entry_id - 1), p]``, so adjacent acks
        in a ledger merge into one range. Positions at or below the mark-delete position, or already deleted,
        are ignored ("already deleted", Pulsar ``internalDelete``). Then the mark-delete position jumps over
        every range that starts right after it, across ledger boundaries (``setAcknowledgedPosition``).
        Callers must pass positions that name real entries (the cursor validates them).
        """
        mark_delete = self.mark_delete_position
        deleted = self.individually_deleted
        batches = self.batch_deleted_indexes
        for position in positions:
            ledger_id, entry_id = position
            if batches:
                batches.pop(position, None)
            if position <= mark_delete or deleted.contains(position):
                continue
            deleted.add_open_closed(Position(ledger_id, entry_id - 1), position)
        return self._advance(next_position)

    def ack_batch_indexes(self, position: Position, ack_set: int, next_position: NextPosition) -> Position:
        """Acknowledge batch indexes of the entry at ``position``: ``ack_set`` has bit i set for each index
        still unacknowledged *in the consumer's view* (Pulsar's ack_set). It is ANDed into the stored set; an
        empty result deletes the whole entry. Returns the (possibly new) mark-delete position. Ignored for an
        entry already deleted."""
        if position <= self.mark_delete_position or self.individually_deleted.contains(position):
            return self.mark_delete_position
        current = self.batch_deleted_indexes.get(position)
        remaining = ack_set if current is None else current & ack_set
        if remaining == 0:
            return self.ack_individual((position,), next_position)
        self.batch_deleted_indexes[position] = remaining
        return self.mark_delete_position

    def batch_ack_set(self, position: Position) -> int | None:
        """The stored unacknowledged-index set of ``position``, None when the entry has none."""
        return self.batch_deleted_indexes.get(position)

    def ack_cumulative(self, position: Position, next_position: NextPosition) -> Position:
        """Acknowledge everything up to and including ``position`` (Pulsar ``asyncMarkDelete``) and return the
        new mark-delete position: ``position``, or further when deleted ranges follow right after it.

        Raises ``MarkDeletingMarkedPositionError`` when ``position`` is below the mark-delete position; the
        same position is a no-op.
        """
        mark_delete = self.mark_delete_position
        if position < mark_delete:
            raise MarkDeletingMarkedPositionError(
                f"cannot mark-delete {position}: it is behind the mark-delete position {mark_delete}",
                position=position,
                mark_delete_position=mark_delete,
            )
        if position == mark_delete:
            return mark_delete
        self.mark_delete_position = position
        self.individually_deleted.remove_at_most(position)
        self._drop_batches_at_most(position)
        return self._advance(next_position)

    def reset(self, mark_delete_position: Position) -> None:
        """Move the mark-delete position anywhere (backwards too) and forget every individual ack
        (Pulsar ``internalResetCursor``)."""
        self.mark_delete_position = mark_delete_position
        self.individually_deleted.clear()
        self.batch_deleted_indexes.clear()

    def _drop_batches_at_most(self, position: Position) -> None:
        batches = self.batch_deleted_indexes
        if batches:
            for key in [p for p in batches if p <= position]:
                del batches[key]

    def _advance(self, next_position: NextPosition) -> Position:
        deleted = self.individually_deleted
        mark_delete = self.mark_delete_position
        if not deleted:
            return mark_delete
        while True:
            found = deleted.range_containing(next_position(mark_delete))
            if found is None:
                break
            mark_delete = found[1]
        if mark_delete != self.mark_delete_position:
            self.mark_delete_position = mark_delete
            deleted.remove_at_most(mark_delete)
            self._drop_batches_at_most(mark_delete)
        return mark_delete
