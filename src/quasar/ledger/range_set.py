"""PositionRangeSet: a set of positions kept as open-closed ranges (Pulsar ``LongPairRangeSet``).

This is the structure behind a cursor's ``individually_deleted`` (Pulsar ``individualDeletedMessages``).
Like Pulsar's ``OpenLongPairRangeSet`` (and the Position-specific ``PositionRangeSet`` of apache/pulsar
PR #26127), it holds a set of discrete positions, grouped per ledger into maximal runs of consecutive entry
ids. A run of entries ``first .. last`` of ledger ``L`` is reported as the open-closed range
``(Position(L, first - 1), Position(L, last)]``. Runs of the same ledger merge when they touch or overlap;
runs of different ledgers never merge, because a range set does not know how many entries a ledger holds.

Vocabulary from ``LongPairRangeSet``: ``add_open_closed``, ``contains``, ``range_containing``,
``remove_at_most``, ``first_range``, ``last_range``, ``span``, ``cardinality``, iteration over the ranges,
``len()`` = number of ranges.

Representation: two parallel sorted lists of integer keys, ``_lo`` and ``_hi`` (first and last entry of each
run), with ``key(L, e) = (L << 64) + e``. Every operation is a ``bisect`` plus one list splice:
O(log n) comparisons of small ints, and no scan of the ranges.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from quasar.ledger.position import INT64_MAX, Position

__all__ = ["PositionRangeSet"]

_SHIFT = 64
_ENTRY_MASK = (1 << _SHIFT) - 1


def _key(ledger_id: int, entry_id: int) -> int:
    return (ledger_id << _SHIFT) + entry_id


class PositionRangeSet:
    """A set of positions stored as per-ledger open-closed ranges ``(lower, upper]``. Not thread-safe (one
    event loop owns it, as Pulsar's cursor lock owns its range set)."""

    __slots__ = ("_count", "_hi", "_lo")

    def __init__(self, ranges: Iterable[tuple[Position, Position]] = ()) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        self._count = 0
        for lower, upper in ranges:
            self.add_open_closed(lower, upper)

    # ------------------------------------------------------------------ updates
    def add_open_closed(self, lower: Position, upper: Position) -> None:
        """Add every position in ``(lower, upper]``.

        Within one ledger that is the entries ``lower.entry_id + 1 .. upper.entry_id``. When the two ends are
        in different ledgers only the upper ledger's entries ``0 .. upper.entry_id`` are added: the tail of
        the lower ledger and the ledgers in between are unknown here. A cursor acks ``(previous position,
        p]``, where the previous position of a ledger's first entry is the last entry of the ledger before,
        so the result is exact (Pulsar ``OpenLongPairRangeSet.addOpenClosed`` behaves the same way).

        Raises ``ValueError`` if ``upper < lower`` or an entry id or ledger id is out of range
        (0 <= ledger_id <= INT64_MAX, -1 <= entry_id <= INT64_MAX). ``lower`` may be ``EARLIEST``.
        """
        lower_ledger, lower_entry = lower
        upper_ledger, upper_entry = upper
        if upper < lower:
            raise ValueError(f"range ({lower}, {upper}] has its upper end below its lower end")
        if not (0 <= upper_ledger <= INT64_MAX and -1 <= upper_entry <= INT64_MAX):
            raise ValueError(f"upper end {upper!r} is not a valid position")
        if not (-1 <= lower_entry <= INT64_MAX and lower_ledger <= INT64_MAX):
            raise ValueError(f"lower end {lower!r} is not a valid position")
        first = lower_entry + 1 if lower_ledger == upper_ledger else 0
        if first > upper_entry:
            return
        self._add_run(_key(upper_ledger, first), _key(upper_ledger, upper_entry))

    def _add_run(self, lo: int, hi: int) -> None:
        los, his = self._lo, self._hi
        # Runs that overlap or touch [lo, hi]. ``lo - 1`` of entry 0 falls on an impossible entry of the
        # ledger before, and ``hi + 1`` stays in the same ledger, so runs of other ledgers never merge.
        i = bisect_left(his, lo - 1)
        j = bisect_right(los, hi + 1, lo=i)
        if i == j:
            los.insert(i, lo)
            his.insert(i, hi)
            self._count += hi - lo + 1
            return
        removed = 0
        for k in range(i, j):
            removed += his[k] - los[k] + 1
        new_lo = min(lo, los[i])
        new_hi = max(hi, his[j - 1])
        los[i:j] = (new_lo,)
        his[i:j] = (new_hi,)
        self._count += (new_hi - new_lo + 1) - removed

    def remove_at_most(self, position: Position) -> None:
        """Remove every position ``<= position`` (Pulsar ``removeAtMost``); any Position is accepted."""
        k = _key(position[0], position[1])
        los, his = self._lo, self._hi
        i = bisect_right(los, k)
        if i == 0:
            return
        removed = 0
        last = i - 1
        if his[last] > k:
            removed += k - los[last] + 1
            los[last] = k + 1
            i = last
        for n in range(i):
            removed += his[n] - los[n] + 1
        del los[:i]
        del his[:i]
        self._count -= removed

    def clear(self) -> None:
        """Remove everything."""
        self._lo.clear()
        self._hi.clear()
        self._count = 0

    # ------------------------------------------------------------------ queries
    def contains(self, position: Position) -> bool:
        """Whether ``position`` is in the set."""
        k = _key(position[0], position[1])
        i = bisect_right(self._lo, k) - 1
        return i >= 0 and self._hi[i] >= k

    __contains__ = contains

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        """The open-closed range ``(lower, upper]`` holding ``position``, or None."""
        k = _key(position[0], position[1])
        i = bisect_right(self._lo, k) - 1
        if i < 0 or self._hi[i] < k:
            return None
        return self._range(i)

    def first_range(self) -> tuple[Position, Position] | None:
        """The lowest range ``(lower, upper]``, or None when empty (Pulsar ``firstRange``)."""
        return self._range(0) if self._lo else None

    def last_range(self) -> tuple[Position, Position] | None:
        """The highest range ``(lower, upper]``, or None when empty (Pulsar ``lastRange``)."""
        return self._range(len(self._lo) - 1) if self._lo else None

    def span(self) -> tuple[Position, Position] | None:
        """``(lower of the first range, upper of the last range]``, or None when empty (Pulsar ``span``)."""
        if not self._lo:
            return None
        return self._range(0)[0], self._range(len(self._lo) - 1)[1]

    @property
    def cardinality(self) -> int:
        """Number of positions in the set (not ranges)."""
        return self._count

    @property
    def is_empty(self) -> bool:
        return not self._lo

    def __len__(self) -> int:
        """Number of ranges (Pulsar ``size()``)."""
        return len(self._lo)

    def __bool__(self) -> bool:
        return bool(self._lo)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        """The ranges ``(lower, upper]`` in ascending order."""
        for i in range(len(self._lo)):
            yield self._range(i)

    def runs(self) -> Iterator[tuple[int, int, int]]:
        """The ranges as ``(ledger_id, first_entry_id, last_entry_id)`` triples (both ends inclusive)."""
        for lo, hi in zip(self._lo, self._hi, strict=True):
            yield lo >> _SHIFT, lo & _ENTRY_MASK, hi & _ENTRY_MASK

    def _range(self, i: int) -> tuple[Position, Position]:
        lo, hi = self._lo[i], self._hi[i]
        ledger_id = lo >> _SHIFT
        return Position(ledger_id, (lo & _ENTRY_MASK) - 1), Position(ledger_id, hi & _ENTRY_MASK)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionRangeSet):
            return NotImplemented
        return self._lo == other._lo and self._hi == other._hi

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"({lo}, {hi}]" for lo, hi in list(self)[:8])
        more = f", ... {len(self) - 8} more" if len(self) > 8 else ""
        return f"PositionRangeSet[{shown}{more}]"
