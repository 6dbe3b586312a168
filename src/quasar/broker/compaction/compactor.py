"""The two-phase compactor (Pulsar ``TwoPhaseCompactor``), run in bounded slices on the event loop.

``compact(topic, factory)``:

1. The horizon is the topic's last confirmed entry when compaction starts. Phase one reads the previous
   generation of the compacted view (if any) and then the topic through its durable subscription
   ``__compaction`` from after its mark-delete position (the previous horizon) up to the horizon, and keeps
   for every key the position (and batch index) of its latest message; a delete (empty payload or
   ``null_value``) is remembered as the key's latest message too, so it removes the key.
2. Phase two reads the same entries again and appends to the compacted ledger each entry that holds a
   message still latest for its key and not a delete (a batch rebuilt with those messages only, as
   ``RawBatchConverter``); messages without a key are dropped (Pulsar's ``topicCompactionRetainNullKey``
   false). Entries keep their original wire form and carry their original position.
3. The new generation and the horizon are recorded in one write of the ``__compaction`` cursor (mark-delete
   = horizon, properties = the generation's offsets), then the compacted ledger's ``__view`` cursor moves
   to the new generation so older generations are trimmed, and the topic switches to the new view.

Every slice reads at most ``SLICE_ENTRIES`` entries, parses them and waits for its appends before the next
one, so the loop keeps serving (reads and appends are the ledger's own non-blocking calls). Entries that
cannot be parsed hold no key and are dropped from the view (logged).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from quasar.broker.compaction.messages import EntryMessages, read_entry, rebuild_entry
from quasar.broker.compaction.view import (
    COMPACTION_SUBSCRIPTION,
    VIEW_CURSOR,
    VIEW_END,
    VIEW_START,
    CompactedView,
    open_compacted_ledger,
    original_position,
    original_properties,
)
from quasar.errors import QuasarError
from quasar.ledger.entry import Entry
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.managed_ledger import InitialPosition, ManagedLedger
from quasar.ledger.position import Position

__all__ = ["SLICE_ENTRIES", "CompactableTopic", "compact"]

log = logging.getLogger(__name__)

SLICE_ENTRIES = 100
"""Entries read, parsed and written per slice before the loop runs other work."""

_READ_BYTES = 1 << 20
"""Bytes read (and parsed) per slice at most (beyond one entry)."""

_Latest = dict[str, tuple[Position, int]]


class CompactableTopic(Protocol):
    """What the compactor uses of a persistent topic (``PersistentTopic``)."""

    @property
    def ledger(self) -> ManagedLedger: ...

    compacted_view: CompactedView | None


async def _topic_slices(ledger: ManagedLedger, start: int, end: int) -> AsyncIterator[list[Entry]]:
    offset = start
    while offset < end:
        entries, next_offset = ledger.read_from_offset(offset, min(SLICE_ENTRIES, end - offset), _READ_BYTES)
        entries = [e for e in entries if e.queue_offset < end]
        if not entries:
            return
        yield entries
        offset = next_offset
        await asyncio.sleep(0)


async def _view_slices(view: CompactedView | None) -> AsyncIterator[list[tuple[Position, Entry]]]:
    if view is None:
        return
    offset = view.start
    while offset < view.end:
        entries = view.read_slice(offset, SLICE_ENTRIES)
        if not entries:
            return
        yield [(original_position(e), e) for e in entries]
        offset = entries[-1].queue_offset + 1
        await asyncio.sleep(0)


def _parse(position: Position, entry: Entry) -> EntryMessages | None:
    try:
        return read_entry(entry.data)
    except QuasarError as exc:
        log.warning("compaction skips entry %s that cannot be read: %s", position, exc)
        return None


def _note_latest(
    latest: _Latest, deleted: set[str], position: Position, parsed: EntryMessages | None
) -> None:
    if parsed is None:
        return
    for index, message in enumerate(parsed.messages):
        if message.key is None:
            continue
        latest[message.key] = (position, index)
        if message.delete:
            deleted.add(message.key)
        else:
            deleted.discard(message.key)


def _surviving(latest: _Latest, deleted: set[str], position: Position, entry: Entry) -> bytes | None:
    parsed = _parse(position, entry)
    if parsed is None:
        return None
    keep = [
        m.key is not None and m.key not in deleted and latest.get(m.key) == (position, i)
        for i, m in enumerate(parsed.messages)
    ]
    return rebuild_entry(entry.data, parsed, keep)


async def compact(topic: CompactableTopic, factory: ManagedLedgerFactory) -> CompactedView | None:
    """Compact ``topic`` up to its last confirmed entry and switch it to the new view (module docstring).
    Returns the view (the previous one when nothing was published since; None for a topic with no entry).
    Raises the ledger's ``ManagedLedgerError``s (store, metadata) and ``asyncio.CancelledError``; on any
    error the previous view stays in force and the next run starts again from the previous horizon."""
    ledger = topic.ledger
    cursor = await ledger.open_cursor(COMPACTION_SUBSCRIPTION, InitialPosition.EARLIEST)
    previous = topic.compacted_view
    table = ledger.table
    end = ledger.confirmed_end_offset
    start = max(table.offset_after(cursor.mark_delete_position), ledger.first_available_offset)
    if start >= end:
        return previous
    horizon = table.position_of(end - 1)

    latest: _Latest = {}
    deleted: set[str] = set()
    async for pairs in _view_slices(previous):
        for position, entry in pairs:
            _note_latest(latest, deleted, position, _parse(position, entry))
    async for entries in _topic_slices(ledger, start, end):
        for entry in entries:
            _note_latest(latest, deleted, entry.position, _parse(entry.position, entry))

    compacted = await open_compacted_ledger(factory, ledger.name)
    view_cursor = await compacted.open_cursor(VIEW_CURSOR, InitialPosition.EARLIEST)
    written: list[Position] = []

    async def append(pairs: list[tuple[Position, Entry]]) -> None:
        futures = []
        for position, entry in pairs:
            data = _surviving(latest, deleted, position, entry)
            if data is not None:
                futures.append(compacted.add_entry_future(data, properties=original_properties(position)))
        written.extend(await asyncio.gather(*futures))

    async for pairs in _view_slices(previous):
        await append(pairs)
    async for entries in _topic_slices(ledger, start, end):
        await append([(e.position, e) for e in entries])

    compacted_table = compacted.table
    if written:
        first = compacted_table.offset_of(written[0])
        last = compacted_table.offset_of(written[-1])
        if first is None or last is None:  # pragma: no cover - the adds just confirmed them
            raise QuasarError(f"compacted entries of {ledger.name} vanished while compacting")
        view_start, view_end = first, last + 1
    else:
        view_start = view_end = compacted.confirmed_end_offset
    cursor.mark_delete(horizon, {VIEW_START: view_start, VIEW_END: view_end})
    await cursor.flush()
    keep_from = compacted_table.position_of(max(view_start, compacted_table.first_offset) - 1)
    if keep_from > view_cursor.mark_delete_position:
        view_cursor.mark_delete(keep_from)
        await view_cursor.flush()
    view = CompactedView(compacted, view_start, view_end, horizon)
    topic.compacted_view = view
    log.info(
        "%s: compacted up to %s: %d entries in the view (%d keys)",
        ledger.name,
        horizon,
        view.size,
        len(latest),
    )
    return view
