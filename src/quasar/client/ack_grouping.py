"""Acknowledgement trackers of a consumer (seed 001; Java ``PersistentAcknowledgmentsGroupingTracker``,
C++ ``AckGroupingTrackerEnabled``, ``BatchMessageAcker``). Pure: no I/O, no timers; the consumer calls
:meth:`AckGroupingTracker.flush` on its timer and writes the ACK frames it returns.

* Individual acks collect in a dict keyed by entry ``(ledger_id, entry_id)``; :meth:`add_individual` reports
  when the group must be flushed at once: ``group_time_ms == 0``, properties attached, or
  ``max_size`` (1000) pending.
* Cumulative acks keep only the highest message id and its ack set (``doCumulativeAckAsync``): a lower id is
  ignored.
* :meth:`is_duplicate` drops incoming messages already covered by the last cumulative ack or by a pending
  individual whole-entry ack.
* Batches (:class:`BatchAcker`): without batch-index ack, an entry is acked only when all its items were
  acked; a cumulative ack in the middle of a batch acks the previous entry ``(L, E-1)``. With batch-index ack
  a partial ack carries ``ack_set`` = Java ``BitSet.toLongArray`` words where bit i set means item i is still
  unacked (int64 words, bit i in word i // 64; :func:`quasar.protocol.ack_set.ack_set_words` builds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from quasar.protocol import AckType

__all__ = ["AckGroupingTracker", "BatchAcker", "PendingAck"]

EntryKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class PendingAck:
    """One ACK command to send: ``ack_type`` and parallel lists of entries and ack sets (None = whole entry)."""

    ack_type: AckType
    entries: list[EntryKey]
    ack_sets: list[list[int] | None]


class AckGroupingTracker:
    """Groups acknowledgements (see the module docstring).

    Args:
        group_time_ms: ``acknowledgements_group_time_ms`` (0 = no grouping).
        max_size: ``ack_group_max_size``.
    """

    def __init__(self, group_time_ms: int = 100, max_size: int = 1000) -> None:
        self.group_time_ms = group_time_ms
        self.max_size = max_size
        self._individual: dict[EntryKey, list[int] | None] = {}
        self._cumulative: tuple[int, int, int] | None = None  # (ledger, entry, batch_index) last cumulative
        self._cumulative_ack_set: list[int] | None = None
        self._cumulative_dirty = False

    def __len__(self) -> int:
        return len(self._individual)

    def add_individual(
        self, entry: EntryKey, ack_set: list[int] | None = None, *, has_properties: bool = False
    ) -> bool:
        """Record an individual ack of ``entry`` (``ack_set`` for a partial batch ack).

        Returns:
            True when the caller must flush now (group time 0, properties, or ``max_size`` reached).
        """
        current = self._individual.get(entry, _MISSING)
        if current is _MISSING:
            self._individual[entry] = ack_set
        elif current is not None:
            if ack_set is None:
                self._individual[entry] = None
            else:  # both partial: the broker ANDs sets; do it here
                self._individual[entry] = [a & b for a, b in zip(current, ack_set, strict=False)]
        return self.group_time_ms == 0 or has_properties or len(self._individual) >= self.max_size

    def add_cumulative(
        self, ledger_id: int, entry_id: int, batch_index: int = -1, ack_set: list[int] | None = None
    ) -> bool:
        """Record a cumulative ack; ignored unless it is beyond the last one. Returns True to flush now."""
        key = (ledger_id, entry_id, batch_index)
        if self._cumulative is None or key > self._cumulative:
            self._cumulative = key
            self._cumulative_ack_set = ack_set
            self._cumulative_dirty = True
        return self.group_time_ms == 0

    @property
    def active(self) -> bool:
        """True when :meth:`is_duplicate` can return True (a cumulative ack or pending individual acks)."""
        return self._cumulative is not None or bool(self._individual)

    @property
    def last_cumulative(self) -> tuple[int, int, int] | None:
        """``(ledger, entry, batch_index)`` of the highest cumulative ack, or None."""
        return self._cumulative

    def is_duplicate(self, ledger_id: int, entry_id: int, batch_index: int = -1) -> bool:
        """True when the message is covered by the last cumulative ack or a pending whole-entry ack."""
        cumulative = self._cumulative
        if cumulative is not None:
            entry_key = (ledger_id, entry_id)
            if entry_key < cumulative[:2]:
                return True
            if entry_key == cumulative[:2] and (cumulative[2] < 0 or batch_index <= cumulative[2]):
                return True
        entry = (ledger_id, entry_id)
        return entry in self._individual and self._individual[entry] is None

    def flush(self) -> list[PendingAck]:
        """Everything pending as ACK commands (the cumulative one first); the tracker is then empty."""
        out: list[PendingAck] = []
        if self._cumulative_dirty and self._cumulative is not None:
            ledger_id, entry_id, _ = self._cumulative
            out.append(PendingAck(AckType.Cumulative, [(ledger_id, entry_id)], [self._cumulative_ack_set]))
            self._cumulative_dirty = False
        if self._individual:
            individual, self._individual = self._individual, {}
            out.append(PendingAck(AckType.Individual, list(individual), list(individual.values())))
        return out

    def clear(self) -> None:
        """Forget pending individual acks (after a reconnect the broker redelivers anyway)."""
        self._individual.clear()


_MISSING: list[int] | None = [-1]


class BatchAcker:
    """Tracks which items of delivered batches are still unacked (C++ ``BatchMessageAcker``)."""

    def __init__(self) -> None:
        self._unacked: dict[EntryKey, list[int]] = {}  # entry -> [bitmap of unacked items, batch size]

    def __len__(self) -> int:
        return len(self._unacked)

    def track(self, entry: EntryKey, size: int, unacked: int | None = None) -> None:
        """Start tracking a delivered batch of ``size`` items (``unacked`` bitmap, default all)."""
        if entry not in self._unacked:
            self._unacked[entry] = [(1 << size) - 1 if unacked is None else unacked, size]

    def ack(self, entry: EntryKey, index: int) -> tuple[bool, int, int]:
        """Mark item ``index`` acked. Returns ``(entry_complete, remaining_bitmap, size)``."""
        state = self._unacked.get(entry)
        if state is None:
            return True, 0, 0
        remaining = self.ack_index(entry, index)
        return remaining == 0, remaining, state[1]

    def ack_index(self, entry: EntryKey, index: int) -> int:
        """:meth:`ack` for the consumer's hot path: returns only the bitmap of items still unacked, 0 when the
        entry is complete (or not tracked: a whole entry)."""
        state = self._unacked.get(entry)
        if state is None:
            return 0
        bitmap = state[0] & ~(1 << index)
        if bitmap:
            state[0] = bitmap
        else:
            del self._unacked[entry]
        return bitmap

    def size(self, entry: EntryKey) -> int:
        """Items of the tracked batch at ``entry`` (0 when not tracked)."""
        state = self._unacked.get(entry)
        return 0 if state is None else state[1]

    def ack_up_to(self, entry: EntryKey, index: int) -> tuple[bool, int, int]:
        """Mark items ``0..index`` acked (cumulative). Returns ``(entry_complete, remaining_bitmap, size)``."""
        state = self._unacked.get(entry)
        if state is None:
            return True, 0, 0
        bitmap, size = state
        bitmap &= ~((1 << (index + 1)) - 1)
        if bitmap == 0:
            del self._unacked[entry]
            return True, 0, size
        state[0] = bitmap
        return False, bitmap, size

    def forget(self, entry: EntryKey) -> None:
        """Drop the batch at ``entry`` (it is being redelivered whole)."""
        self._unacked.pop(entry, None)

    def forget_up_to(self, entry: EntryKey) -> None:
        """Drop every tracked batch at or before ``entry`` (covered by a cumulative ack)."""
        for key in [k for k in self._unacked if k <= entry]:
            del self._unacked[key]

    def clear(self) -> None:
        """Forget everything (reconnect: the broker redelivers whole batches)."""
        self._unacked.clear()
