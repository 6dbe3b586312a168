"""Position: the address of an entry in a managed ledger.

``Position(ledger_id, entry_id)`` is Pulsar's ``Position`` / ``PositionImpl``: ordered by ledger id, then
entry id. Entry ids restart at 0 in each ledger; ``entry_id == -1`` means "just before the first entry of that
ledger" (Pulsar uses ``(ledgerId, -1)`` for an empty ledger's last confirmed entry and for the mark-delete
position of a cursor that acked nothing).

Bounds: ``EARLIEST = Position(-1, -1)`` sorts before every entry and ``LATEST = Position(INT64_MAX,
INT64_MAX)`` after every entry, matching Pulsar's ``PositionFactory.EARLIEST`` / ``LATEST`` and the C++
client's ``MessageId::earliest()`` / ``latest()``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["EARLIEST", "INT64_MAX", "LATEST", "Position"]

INT64_MAX = (1 << 63) - 1


class Position(NamedTuple):
    """Address of one entry: ``ledger_id`` (int, unique per broker) and ``entry_id`` (int, 0-based in that
    ledger; -1 = before the ledger's first entry). Immutable, hashable, ordered (ledger id, then entry id).

    A ``NamedTuple`` rather than a dataclass: it is frozen, has no per-instance ``__dict__`` (like
    ``slots=True``) and compares in C, which matters on the ack and dispatch hot paths.
    """

    ledger_id: int
    entry_id: int

    def __repr__(self) -> str:
        return f"Position({self.ledger_id}:{self.entry_id})"

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


EARLIEST = Position(-1, -1)
LATEST = Position(INT64_MAX, INT64_MAX)
