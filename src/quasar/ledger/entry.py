"""Entry: one stored unit of a managed ledger, as read back (Pulsar mledger ``Entry``).

The data is the body the store holds, handed out as a zero-copy ``memoryview`` into the store's mapped
segment (or the fake store's buffer). Entries are opaque bytes to this layer: a Pulsar entry is the wire form
of one SEND (checksum, MessageMetadata, payload), but the ledger never looks inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quasar.ledger.position import Position

__all__ = ["DEFAULT_READ_MAX_BYTES", "Entry"]

DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024
"""Default byte budget of one read (RocketMQ's default ``get`` limit)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry read from a managed ledger.

    - ``position``: its Position (ledger id, entry id).
    - ``data``: the stored body (``memoryview``, no copy; valid while referenced).
    - ``queue_offset``: its offset in the store's consume queue ``(ledger name, 0)``: the managed ledger's
      continuous sequence number.
    - ``store_timestamp``: when the store appended it (ms since the epoch, RocketMQ ``storeTimestamp``).
    - ``properties``: the store properties given to ``add_entry`` (empty when none), parsed on first access.
    """

    position: Position
    data: memoryview
    queue_offset: int
    store_timestamp: int
    stored: Any = field(default=None, repr=False, compare=False)
    """The store's message object (``StoredMessage``), kept so properties are decoded only when asked for."""

    @property
    def properties(self) -> Mapping[str, str]:
        stored = self.stored
        return {} if stored is None else (stored.properties or {})

    @property
    def ledger_id(self) -> int:
        return self.position.ledger_id

    @property
    def entry_id(self) -> int:
        return self.position.entry_id

    @property
    def length(self) -> int:
        """Size of ``data`` in bytes."""
        return self.data.nbytes
