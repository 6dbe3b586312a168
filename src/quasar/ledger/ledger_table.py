"""LedgerTable: the ledgers of one managed ledger, and Position <-> queue offset mapping (pure, no I/O).

A managed ledger is one store queue ``(name, 0)``. Its queue offsets are a continuous sequence; a ledger is a
consecutive range of them (DESIGN.md "Mapping Pulsar onto RocketMQ storage"). The table lists the ledgers in
creation order; ledger ids only grow (they come from a per-broker counter), so ordering positions by
``(ledger_id, entry_id)`` orders them by queue offset too. Entry ids restart at 0 in each ledger::

    ledger  first_queue_offset   entries (queue offsets)
    7       0                    0:0 .. 7:2  -> offsets 0, 1, 2
    9       3                    9:0 .. 9:4  -> offsets 3 .. 7
    12      8                    open-ended: 12:0 is offset 8, 12:k is offset 8 + k, up to ``next_offset``

The last ledger is open-ended: its size is ``next_offset - first_queue_offset``, where ``next_offset`` (the
next queue offset to be written) comes from the store after a crash. A position whose ledger id is not in the
table (e.g. one that was never persisted) still has a well-defined place by ordering.

Persisted form of one row (JSON object inside ``{"ledgers": [...]}`` under ``/managed-ledgers/<name>``)::

    key                  type        meaning
    ledger_id            int         unique per broker
    first_queue_offset   int         queue offset of entry 0 of this ledger
    created_ms           int         creation time, ms since the epoch (for time-based rollover)
    entries              int | null  entry count, set when the ledger is closed (null while open)
    size_bytes           int | null  sum of entry data sizes in bytes, set when closed (null if unknown)
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from quasar.ledger.errors import MetadataError
from quasar.ledger.position import Position

__all__ = ["LedgerInfo", "LedgerTable", "LedgerTableView"]


@dataclass(slots=True)
class LedgerInfo:
    """One ledger of a managed ledger (Pulsar ``MLDataFormats.ManagedLedgerInfo.LedgerInfo``)."""

    ledger_id: int
    first_queue_offset: int
    created_ms: int
    entries: int | None = None
    size_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "first_queue_offset": self.first_queue_offset,
            "created_ms": self.created_ms,
            "entries": self.entries,
            "size_bytes": self.size_bytes,
        }

    @classmethod
    def from_json(cls, value: Any) -> LedgerInfo:
        """Parse one persisted row; raises ``MetadataError`` on anything malformed."""
        try:
            info = cls(
                ledger_id=_int(value["ledger_id"]),
                first_queue_offset=_int(value["first_queue_offset"]),
                created_ms=_int(value["created_ms"]),
                entries=None if value.get("entries") is None else _int(value["entries"]),
                size_bytes=None if value.get("size_bytes") is None else _int(value["size_bytes"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise MetadataError(f"malformed ledger row {value!r}: {exc}") from exc
        if info.ledger_id < 0 or info.first_queue_offset < 0:
            raise MetadataError(f"malformed ledger row {value!r}: negative id or offset")
        return info


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


class LedgerTableView(Protocol):
    """Read-only view of a :class:`LedgerTable`: what cursors and readers may use (only the managed ledger
    changes its table). Offsets are queue offsets; see :class:`LedgerTable` for each method."""

    @property
    def next_offset(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    def __len__(self) -> int: ...

    def ledger_end(self, index: int) -> int: ...

    def ledger_at(self, index: int) -> tuple[int, int, int]: ...

    def index_of_offset(self, offset: int) -> int: ...

    def position_of(self, offset: int) -> Position: ...

    def offset_after(self, position: Position) -> int: ...

    def ceil_offset(self, position: Position) -> int: ...

    def offset_of(self, position: Position) -> int | None: ...

    def next_position(self, position: Position) -> Position: ...

    def previous_position(self, position: Position) -> Position: ...


class LedgerTable:
    """The ledger rows of one managed ledger plus ``next_offset``, with O(log n) mapping between positions
    and queue offsets. Rows are appended by the managed ledger on rollover; this class does no I/O."""

    __slots__ = ("_firsts", "_ids", "next_offset", "rows", "terminated")

    def __init__(self, rows: list[LedgerInfo], next_offset: int, *, terminated: bool = False) -> None:
        """``rows``: at least one, ids strictly increasing, first queue offsets non-decreasing.
        ``next_offset``: the next queue offset to be written (>= the last row's first offset).
        ``terminated``: the managed ledger takes no more entries (Pulsar ``ManagedLedgerInfo.terminatedPosition``;
        persisted as ``"terminated": true``).
        Raises ``MetadataError`` when the rows break those rules."""
        if not rows:
            raise MetadataError("a ledger table needs at least one ledger")
        for prev, row in itertools.pairwise(rows):
            if row.ledger_id <= prev.ledger_id or row.first_queue_offset < prev.first_queue_offset:
                raise MetadataError(f"ledger rows out of order: {prev} then {row}")
        if next_offset < rows[-1].first_queue_offset:
            raise MetadataError(f"next offset {next_offset} is below the last ledger's first offset")
        self.rows = rows
        self._ids = [r.ledger_id for r in rows]
        self._firsts = [r.first_queue_offset for r in rows]
        self.next_offset = next_offset
        self.terminated = terminated

    # ------------------------------------------------------------------ structure
    def append(self, info: LedgerInfo) -> None:
        """Add a new last ledger, starting at ``next_offset`` (``ValueError`` otherwise)."""
        if info.ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger id {info.ledger_id} is not above the last one {self._ids[-1]}")
        if info.first_queue_offset != self.next_offset:
            raise ValueError(f"a new ledger must start at the next offset {self.next_offset}")
        self.rows.append(info)
        self._ids.append(info.ledger_id)
        self._firsts.append(info.first_queue_offset)

    def drop_first(self, count: int) -> list[LedgerInfo]:
        """Remove the ``count`` oldest ledgers (trimming) and return them; the last ledger always stays
        (``ValueError`` otherwise)."""
        if not 0 <= count < len(self.rows):
            raise ValueError(f"can drop 0..{len(self.rows) - 1} ledgers, not {count}")
        dropped = self.rows[:count]
        del self.rows[:count]
        del self._ids[:count]
        del self._firsts[:count]
        return dropped

    @property
    def last(self) -> LedgerInfo:
        return self.rows[-1]

    @property
    def first_offset(self) -> int:
        """Queue offset of the first ledger's entry 0."""
        return self._firsts[0]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[LedgerInfo]:
        return iter(self.rows)

    def ledger_end(self, index: int) -> int:
        """One past the last queue offset of the ledger at ``index`` (the next ledger's first offset)."""
        return self._firsts[index + 1] if index + 1 < len(self._firsts) else self.next_offset

    def ledger_at(self, index: int) -> tuple[int, int, int]:
        """``(ledger_id, first_queue_offset, end)`` of the ledger at ``index`` (end as :meth:`ledger_end`)."""
        return self._ids[index], self._firsts[index], self.ledger_end(index)

    def entries_in(self, index: int) -> int:
        """Entries in the ledger at ``index``."""
        return self.ledger_end(index) - self._firsts[index]

    def index_of_offset(self, offset: int) -> int:
        """Index of the ledger holding ``offset`` (>= first_offset); the last one for offsets past it."""
        return max(bisect_right(self._firsts, offset) - 1, 0)

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"ledgers": [r.to_json() for r in self.rows]}
        if self.terminated:
            value["terminated"] = True
        return value

    # ------------------------------------------------------------------ mapping
    def position_of(self, offset: int) -> Position:
        """Position of queue ``offset``; ``first_offset - 1`` maps to ``(first ledger, -1)``. Offsets at or
        past ``next_offset`` map into the open-ended last ledger (the positions entries will get)."""
        if offset < self._firsts[0]:
            if offset == self._firsts[0] - 1:
                return Position(self._ids[0], -1)
            raise ValueError(f"queue offset {offset} is below the first ledger (starts at {self._firsts[0]})")
        i = bisect_right(self._firsts, offset) - 1
        # Empty ledgers share their first offset with the next one: bisect_right picks the last of them.
        return Position(self._ids[i], offset - self._firsts[i])

    def offset_after(self, position: Position) -> int:
        """The smallest queue offset whose position is > ``position``, capped at ``next_offset``."""
        ledger_id, entry_id = position
        ids = self._ids
        i = bisect_right(ids, ledger_id) - 1
        if i < 0:
            return self._firsts[0]
        if ids[i] != ledger_id:
            return self.ledger_end(i)
        offset = self._firsts[i] + entry_id + 1
        end = self.ledger_end(i)
        return end if offset > end else max(offset, self._firsts[i])

    def ceil_offset(self, position: Position) -> int:
        """The smallest queue offset whose position is >= ``position``, capped at ``next_offset``."""
        return self.offset_after(Position(position[0], position[1] - 1))

    def offset_of(self, position: Position) -> int | None:
        """Queue offset of the entry at ``position``, or None when no written entry has that position."""
        ledger_id, entry_id = position
        i = bisect_right(self._ids, ledger_id) - 1
        if i < 0 or self._ids[i] != ledger_id or entry_id < 0:
            return None
        offset = self._firsts[i] + entry_id
        return offset if offset < self.ledger_end(i) else None

    def next_position(self, position: Position) -> Position:
        """Position of the first entry after ``position`` (the next one to be written when at the end)."""
        return self.position_of(self.offset_after(position))

    def previous_position(self, position: Position) -> Position:
        """Position of the last entry before ``position`` (``(first ledger, -1)`` when there is none)."""
        return self.position_of(max(self.ceil_offset(position) - 1, self._firsts[0] - 1))
