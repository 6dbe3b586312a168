"""CursorStore: durable state of the cursors of one managed ledger, in the metadata store.

Pulsar writes a cursor's mark-delete position and individually deleted ranges as ``PositionInfo`` entries of
a cursor ledger, or inline in ``ManagedCursorInfo`` (``cursorsLedgerId = -1``) when few ranges are left
(reference/semantics.md B2). Quasar always stores it inline, as one JSON value per cursor written with one
``put`` of the metadata port (so a crash never leaves half a state), with at most
``max_unacked_ranges_to_persist`` ranges: the lowest ones, as Pulsar keeps them. Acks in ranges above the cap
live only in memory and are redelivered after a crash (broker.conf
``managedLedgerMaxUnackedRangesToPersist``).

Path: ``/cursors/<ledger name>/<cursor name>``, both percent-encoded into one segment each (``paths``).

Value (JSON object)::

    key                   type                     meaning
    version               int                      1
    name                  str                      cursor name
    mark_delete           [ledger_id, entry_id]    mark-delete position (``ManagedCursorInfo.markDelete*``)
    individually_deleted  [[ledger_id, lo, hi]...] open-closed ranges (ledger_id:lo, ledger_id:hi], ascending,
                                                   at most max_unacked_ranges_to_persist (``MessageRange``)
    last_active_ms        int                      when the state was taken, ms since epoch (``lastActive``)
    properties            {str: int}               cursor properties (``ManagedCursorInfo.properties``)
    batch_deleted         [[ledger_id, entry_id,   batch-index ack sets of partly acked entries: the words of
                            [word, ...]]...]       the bit set of indexes still unacked, bit i of word w =
                                                   index 64*w+i, unsigned 64-bit, lowest positions first, at
                                                   most max_batch_deleted_index_to_persist
                                                   (``BatchedEntryDeletionIndexInfo``); optional
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quasar.ledger.errors import MetadataError, metadata_errors
from quasar.ledger.paths import cursor_path, cursors_path
from quasar.ledger.position import Position
from quasar.ledger.range_set import PositionRangeSet
from quasar.metadata.errors import NotFoundError
from quasar.metadata.port import MetadataStore, decode_json, decode_segment, encode_json

__all__ = ["CursorSnapshot", "CursorStore"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class CursorSnapshot:
    """An immutable copy of one cursor's durable state.

    ``individually_deleted``: ``(ledger_id, lower_entry_exclusive, upper_entry_inclusive)`` triples.
    """

    name: str
    mark_delete_position: Position
    individually_deleted: tuple[tuple[int, int, int], ...] = ()
    last_active_ms: int = 0
    properties: Mapping[str, int] = field(default_factory=dict)
    batch_deleted: tuple[tuple[int, int, int], ...] = ()
    """``(ledger_id, entry_id, unacked index bit set)`` of partly acknowledged batch entries."""

    @classmethod
    def take(
        cls,
        name: str,
        mark_delete_position: Position,
        individually_deleted: PositionRangeSet,
        *,
        max_ranges: int,
        now_ms: int,
        properties: Mapping[str, int] | None = None,
        batch_deleted: Mapping[Position, int] | None = None,
        max_batch_entries: int = 10_000,
    ) -> CursorSnapshot:
        """Copy the state, keeping only the lowest ``max_ranges`` ranges and ``max_batch_entries`` batch-index
        sets."""
        ranges: list[tuple[int, int, int]] = []
        if max_ranges > 0:
            for ledger_id, first, last in individually_deleted.runs():
                ranges.append((ledger_id, first - 1, last))
                if len(ranges) >= max_ranges:
                    break
        batches: tuple[tuple[int, int, int], ...] = ()
        if batch_deleted and max_batch_entries > 0:
            batches = tuple(
                (p.ledger_id, p.entry_id, bits)
                for p, bits in sorted(batch_deleted.items())[:max_batch_entries]
            )
        return cls(name, mark_delete_position, tuple(ranges), now_ms, dict(properties or {}), batches)

    def batch_deleted_map(self) -> dict[Position, int]:
        """The persisted batch-index sets by position."""
        return {Position(ledger_id, entry_id): bits for ledger_id, entry_id, bits in self.batch_deleted}

    def range_set(self) -> PositionRangeSet:
        """The persisted ranges as a new PositionRangeSet."""
        ranges = PositionRangeSet()
        for ledger_id, lower, upper in self.individually_deleted:
            ranges.add_open_closed(Position(ledger_id, lower), Position(ledger_id, upper))
        return ranges

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "mark_delete": list(self.mark_delete_position),
            "individually_deleted": [list(r) for r in self.individually_deleted],
            "last_active_ms": self.last_active_ms,
            "properties": dict(self.properties),
            "batch_deleted": [[lid, eid, _to_words(bits)] for lid, eid, bits in self.batch_deleted],
        }

    @classmethod
    def from_json(cls, value: Any) -> CursorSnapshot:
        """Parse a stored value; raises ``MetadataError`` on anything malformed."""
        try:
            if value["version"] != FORMAT_VERSION:
                raise ValueError(f"unknown cursor state version {value['version']!r}")
            ledger_id, entry_id = value["mark_delete"]
            ranges = []
            for ledger, lower, upper in value["individually_deleted"]:
                if not (_is_int(ledger) and _is_int(lower) and _is_int(upper)) or not (
                    ledger >= 0 and -1 <= lower < upper
                ):
                    raise ValueError(f"bad range {[ledger, lower, upper]!r}")
                ranges.append((ledger, lower, upper))
            if not (_is_int(ledger_id) and _is_int(entry_id)):
                raise ValueError(f"bad mark-delete position {value['mark_delete']!r}")
            name = value["name"]
            if not isinstance(name, str):
                raise ValueError(f"bad cursor name {name!r}")
            properties = dict(value.get("properties") or {})
            if not all(isinstance(k, str) and _is_int(v) for k, v in properties.items()):
                raise ValueError(f"bad cursor properties {properties!r}")
            batches = []
            for ledger, entry, words in value.get("batch_deleted") or ():
                if not (_is_int(ledger) and _is_int(entry) and ledger >= 0 and entry >= 0):
                    raise ValueError(f"bad batch position {[ledger, entry]!r}")
                bits = _from_words(words)
                if bits == 0:
                    raise ValueError(f"empty batch-index set at {[ledger, entry]!r}")
                batches.append((ledger, entry, bits))
            return cls(
                name,
                Position(ledger_id, entry_id),
                tuple(ranges),
                int(value["last_active_ms"]),
                properties,
                tuple(batches),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"malformed cursor state {value!r}: {exc}") from exc


def _is_int(value: Any) -> bool:
    return type(value) is int


_WORD = (1 << 64) - 1


def _to_words(bits: int) -> list[int]:
    """``bits`` as unsigned 64-bit words, least significant first; linear (one pass through bytes)."""
    count = (bits.bit_length() + 63) // 64
    return list(struct.unpack(f"<{count}Q", bits.to_bytes(8 * count, "little")))


def _from_words(words: Any) -> int:
    """The bit set of stored unsigned 64-bit ``words``; linear. Raises ValueError for anything else."""
    if not isinstance(words, list):
        raise ValueError(f"bad batch-index words {words!r}")
    for word in words:
        if not _is_int(word) or not 0 <= word <= _WORD:
            raise ValueError(f"bad batch-index word {word!r}")
    return int.from_bytes(struct.pack(f"<{len(words)}Q", *words), "little")


class CursorStore:
    """Loads, saves and deletes the cursor states of managed ledger ``ledger_name`` through the metadata
    port ``metadata``. Every method is a coroutine (the port never blocks the event loop) and raises
    ``MetadataError`` on a failure of the port or on a stored value it cannot parse."""

    __slots__ = ("_ledger_name", "_metadata", "_parent")

    def __init__(self, metadata: MetadataStore, ledger_name: str) -> None:
        self._metadata = metadata
        self._ledger_name = ledger_name
        self._parent = cursors_path(ledger_name)

    def path(self, cursor_name: str) -> str:
        """``/cursors/<ledger>/<cursor>``."""
        return cursor_path(self._ledger_name, cursor_name)

    async def load_all(self) -> dict[str, CursorSnapshot]:
        """Every persisted cursor of this ledger, by name (read concurrently; a cursor deleted meanwhile is
        left out)."""
        with metadata_errors(f"cannot list the cursors of {self._ledger_name}"):
            children = await self._metadata.get_children(self._parent)
        names = [decode_segment(child) for child in children]
        snapshots = await asyncio.gather(*(self.load(name) for name in names))
        return {s.name: s for s in snapshots if s is not None}

    async def load(self, cursor_name: str) -> CursorSnapshot | None:
        """The persisted state of ``cursor_name``, or None."""
        path = self.path(cursor_name)
        with metadata_errors(f"cannot read cursor {cursor_name!r} of {self._ledger_name}"):
            stored = await self._metadata.get(path)
            if stored is None:
                return None
            value = decode_json(path, stored.value)
        snapshot = CursorSnapshot.from_json(value)
        if snapshot.name != cursor_name:
            raise MetadataError(f"cursor state under {path} names cursor {snapshot.name!r}")
        return snapshot

    async def save(self, snapshot: CursorSnapshot) -> None:
        """Write ``snapshot`` (one put: all of it or nothing)."""
        with metadata_errors(f"cannot persist cursor {snapshot.name!r} of {self._ledger_name}"):
            await self._metadata.put(self.path(snapshot.name), encode_json(snapshot.to_json()))

    async def delete(self, cursor_name: str) -> None:
        """Remove the state of ``cursor_name`` (no error if absent)."""
        with metadata_errors(f"cannot delete cursor {cursor_name!r} of {self._ledger_name}"):
            try:
                await self._metadata.delete(self.path(cursor_name))
            except NotFoundError:
                return
