"""The compacted view of a topic and where it is recorded (Pulsar ``CompactedTopicImpl``).

Storage: every topic that was compacted has one compacted managed ledger on the same store, named
``__compacted://<tenant>/<namespace>/<topic>`` (not a topic name: it is never listed nor served as a topic).
Each compaction appends one *generation* to it: the surviving messages, one entry per surviving original
entry (a batch rebuilt with its surviving messages), in original order and original wire form. Each entry
carries its original position in its store properties (``ledgerId``, ``entryId``), so consumers get the
original message ids and acknowledge original positions.

Identity: the topic's durable cursor ``__compaction`` (the compactor's subscription) records the current
generation as the compacted ledger's queue offsets ``[compactedViewStart, compactedViewEnd)`` in its
properties, and the horizon (the last original entry the view covers) as its mark-delete position; both are
written in one cursor write, so they survive restarts and travel with the cursor state (state journal) to
replicas. The compacted ledger's own durable cursor ``__view`` is mark-deleted just before the current
generation, so the ledger trimmer (retention 0) deletes older generations ledger by ledger once a new one
is recorded (Pulsar deletes the previous compacted ledger).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from quasar.errors import QuasarError
from quasar.ledger.entry import Entry
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.managed_ledger import InitialPosition, ManagedLedger
from quasar.ledger.position import Position
from quasar.protocol.metadata import entry_dispatch_info

__all__ = [
    "COMPACTION_SUBSCRIPTION",
    "VIEW_CURSOR",
    "VIEW_END",
    "VIEW_START",
    "CompactedView",
    "compacted_last_message_id",
    "compacted_ledger_name",
    "load_compacted_view",
    "open_compacted_ledger",
    "original_position",
]

log = logging.getLogger(__name__)

COMPACTION_SUBSCRIPTION = "__compaction"
"""The compactor's durable subscription on the topic (Pulsar ``Compactor.COMPACTION_SUBSCRIPTION``)."""
VIEW_CURSOR = "__view"
"""Durable cursor of the compacted ledger, just before the current generation (keeps it from trimming)."""
VIEW_START = "compactedViewStart"
VIEW_END = "compactedViewEnd"
"""``__compaction`` cursor properties: the current generation's compacted-ledger queue offsets."""

_LEDGER_ID = "ledgerId"
_ENTRY_ID = "entryId"


def compacted_ledger_name(topic_ledger_name: str) -> str:
    """``persistent://t/ns/x`` -> ``__compacted://t/ns/x``."""
    _, _, rest = topic_ledger_name.partition("://")
    return f"__compacted://{rest or topic_ledger_name}"


def original_properties(position: Position) -> dict[str, str]:
    """The store properties a compacted entry carries for its original ``position``."""
    return {_LEDGER_ID: str(position.ledger_id), _ENTRY_ID: str(position.entry_id)}


def original_position(entry: Entry) -> Position:
    """The original position a compacted-ledger entry carries. Raises ``ValueError`` when it has none."""
    properties = entry.properties
    try:
        return Position(int(properties[_LEDGER_ID]), int(properties[_ENTRY_ID]))
    except (KeyError, ValueError):
        raise ValueError(f"compacted entry {entry.position} carries no original position") from None


async def open_compacted_ledger(factory: ManagedLedgerFactory, topic_ledger_name: str) -> ManagedLedger:
    """Open (creating when new) the compacted ledger of a topic, with retention 0 so that generations
    behind its ``__view`` cursor are trimmed. Raises the factory's ``ManagedLedgerError``s."""
    ledger = await factory.open(compacted_ledger_name(topic_ledger_name))
    ledger.set_retention(0, 0)
    return ledger


@dataclass(frozen=True, slots=True)
class CompactedView:
    """One generation of a topic's compacted ledger: queue offsets ``[start, end)`` of ``ledger``, covering
    the topic up to and including ``horizon``. Reads are synchronous store reads (like cursor reads)."""

    ledger: ManagedLedger
    start: int
    end: int
    horizon: Position

    @property
    def size(self) -> int:
        """Entries in the view."""
        return self.end - self.start

    def _read(self, offset: int, count: int) -> list[Entry]:
        out: list[Entry] = []
        while offset < self.end and len(out) < count:
            entries, next_offset = self.ledger.read_from_offset(
                offset, min(count - len(out), self.end - offset), 4 << 20
            )
            if not entries:
                break
            out.extend(e for e in entries if e.queue_offset < self.end)
            offset = next_offset
        return out

    def _original_at(self, offset: int) -> Position | None:
        entries = self._read(offset, 1)
        return original_position(entries[0]) if entries else None

    def first_offset_at_or_after(self, position: Position) -> int:
        """Queue offset of the first view entry whose original position is >= ``position`` (binary search,
        one read per probe: Pulsar ``CompactedTopicImpl.findStartPoint``); ``end`` when none."""
        low, high = self.start, self.end
        while low < high:
            middle = (low + high) // 2
            original = self._original_at(middle)
            if original is None:  # the store lost this part of the view: nothing more to read in it
                return self.end
            if original < position:
                low = middle + 1
            else:
                high = middle
        return low

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` view entries whose original positions are >= ``start``, as entries of the
        topic: ``position`` is the original position, ``data`` the compacted bytes."""
        offset = self.first_offset_at_or_after(start)
        return [_as_original(entry) for entry in self._read(offset, max_entries)]

    def get(self, position: Position) -> Entry | None:
        """The view entry of original ``position``, or None when the view does not hold it."""
        if position > self.horizon:
            return None
        entries = self._read(self.first_offset_at_or_after(position), 1)
        if entries and original_position(entries[0]) == position:
            return _as_original(entries[0])
        return None

    def read_slice(self, offset: int, batch: int) -> list[Entry]:
        """The raw compacted-ledger entries from ``offset`` (at most ``batch``, within the view)."""
        return self._read(offset, batch)


def _as_original(entry: Entry) -> Entry:
    return Entry(
        original_position(entry), entry.data, entry.queue_offset, entry.store_timestamp, entry.stored
    )


async def load_compacted_view(
    factory: ManagedLedgerFactory, topic_ledger: ManagedLedger
) -> CompactedView | None:
    """The view recorded in the topic's ``__compaction`` cursor, opening the compacted ledger; None when the
    topic was never compacted, or (logged) when the compacted ledger cannot be opened: the topic still loads
    and ``read_compacted`` consumers read it whole until the next compaction records a view."""
    cursor = topic_ledger.cursors.get(COMPACTION_SUBSCRIPTION)
    if cursor is None:
        return None
    try:
        return await view_of_cursor(factory, topic_ledger, cursor)
    except QuasarError as exc:
        log.warning("%s: its compacted view cannot be opened: %s", topic_ledger.name, exc)
        return None


async def view_of_cursor(
    factory: ManagedLedgerFactory, topic_ledger: ManagedLedger, cursor: ManagedCursor
) -> CompactedView | None:
    """The view the ``__compaction`` ``cursor`` records (None when its properties name none)."""
    properties = cursor.properties
    if VIEW_START not in properties or VIEW_END not in properties:
        return None
    ledger = await open_compacted_ledger(factory, topic_ledger.name)
    await ledger.open_cursor(VIEW_CURSOR, InitialPosition.EARLIEST)
    return CompactedView(ledger, properties[VIEW_START], properties[VIEW_END], cursor.mark_delete_position)


def compacted_last_message_id(
    view: CompactedView | None, topic_last: Position
) -> tuple[int, int, int] | None:
    """GET_LAST_MESSAGE_ID for a ``read_compacted`` consumer (Pulsar ``ServerCnx.handleGetLastMessageId``
    asks the compaction service when nothing follows the horizon): when the topic's last entry
    ``topic_last`` is at or before the view's horizon, the last message of the view as ``(ledger id, entry
    id, batch index)`` — ``(-1, -1, -1)`` for an empty view — so a reader's ``has_message_available`` does
    not wait for a message that compaction removed. None otherwise (the topic's last message answers)."""
    if view is None or topic_last > view.horizon:
        return None
    if view.size == 0:
        return -1, -1, -1
    entries = view.read_slice(view.end - 1, 1)
    if not entries:
        return None
    position = original_position(entries[0])
    count = entry_dispatch_info(entries[0].data)[0]
    return position.ledger_id, position.entry_id, (count - 1 if count > 1 else -1)
