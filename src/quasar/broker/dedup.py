"""Message deduplication of one persistent topic (Pulsar ``MessageDeduplication``, seed 000, semantics.md B4).

Two maps per producer name:

- ``highest_sequenced_pushed``: updated *before* the entry is persisted, with
  ``max(sequence_id, highest_sequence_id)`` of the SEND;
- ``highest_sequenced_persisted``: updated *after* the add completed (in receipt order).

A SEND whose ``sequence_id`` is at or below ``pushed`` is a duplicate: **DUP** when it is also at or below
``persisted`` (the broker answers with a receipt for ledger -1 / entry -1 and stores nothing), **UNKNOWN**
otherwise (an earlier copy is still in flight: the broker answers SEND_ERROR PersistenceError and the client
reconnects and resends). Batches are judged by their first sequence id and recorded with
``highest_sequence_id``.

Snapshot: every ``entries_interval`` (Pulsar ``brokerDeduplicationEntriesInterval`` = 1,000) persisted entries
the broker mark-deletes the special cursor ``pulsar.dedup`` at the last persisted position with the
properties ``producer name -> highest persisted sequence id`` (at most ``max_producers`` of them). Recovery
loads those properties into both maps, then replays every entry after the cursor's mark-delete position,
parsing only the MessageMetadata (``producer_name``, ``sequence_id``, ``highest_sequence_id``), so the
maps are exact after a restart or a SIGKILL even though the snapshot lags.
"""

from __future__ import annotations

import enum
import logging

from quasar.errors import QuasarError
from quasar.ledger.errors import ManagedLedgerError
from quasar.ledger.managed_cursor import ManagedCursor
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.position import Position
from quasar.protocol import parse_headers_and_payload

__all__ = [
    "DEDUP_CURSOR_NAME",
    "DUPLICATE_POSITION",
    "DedupStatus",
    "DisabledDeduplication",
    "MessageDeduplication",
]

log = logging.getLogger(__name__)

DEDUP_CURSOR_NAME = "pulsar.dedup"
"""Name of the cursor holding the deduplication snapshot (Pulsar ``DEDUPLICATION_CURSOR_NAME``)."""

DUPLICATE_POSITION = Position(-1, -1)
"""The (ledgerId, entryId) of the receipt sent for a definite duplicate."""

_REPLAY_BATCH = 100  # entries per read while replaying, as Pulsar


class DedupStatus(enum.Enum):
    """Result of ``MessageDeduplication.is_duplicate`` (Pulsar ``MessageDupStatus``)."""

    NOT_DUP = "not_dup"
    DUP = "dup"
    UNKNOWN = "unknown"


class MessageDeduplication:
    """Deduplication state of one managed ledger (topic partition).

    ``entries_interval``: persisted entries between two snapshots (Pulsar 1,000); ``max_producers``: most
    producers kept in a snapshot (Pulsar ``brokerDeduplicationMaxNumberOfProducers`` 10,000).
    Disabled until ``enable()``; while disabled ``is_duplicate`` is never consulted by the producer.
    """

    def __init__(
        self, ledger: ManagedLedger, *, entries_interval: int = 1000, max_producers: int = 10_000
    ) -> None:
        if entries_interval <= 0:
            raise ValueError(f"entries_interval must be positive, got {entries_interval}")
        self._ledger = ledger
        self._entries_interval = entries_interval
        self._max_producers = max_producers
        self.enabled = False
        self.highest_sequenced_pushed: dict[str, int] = {}
        self.highest_sequenced_persisted: dict[str, int] = {}
        self._cursor: ManagedCursor | None = None
        self._since_snapshot = 0
        self._last_persisted: Position | None = None

    # ------------------------------------------------------------------ status
    async def enable(self) -> None:
        """Turn deduplication on: open (or create, at the end of the ledger) the ``pulsar.dedup`` cursor
        (awaiting the metadata store), load its snapshot and replay the entries after it. Idempotent.
        Raises ``ManagedLedgerError`` when the cursor cannot be opened or read."""
        if self.enabled:
            return
        cursor = await self._ledger.open_cursor(DEDUP_CURSOR_NAME, "latest")
        if self.enabled:  # a concurrent enable finished while the cursor was opening
            return
        pushed: dict[str, int] = dict(cursor.properties)
        cursor.rewind()
        replayed = 0
        while True:
            entries = cursor.read_entries(_REPLAY_BATCH)
            if not entries:
                break
            for entry in entries:
                replayed += 1
                try:
                    metadata = parse_headers_and_payload(entry.data).metadata
                except QuasarError as exc:
                    log.warning("%s: dedup replay skips entry %s: %s", self._ledger.name, entry.position, exc)
                    continue
                sequence_id = max(metadata.sequence_id, metadata.highest_sequence_id)
                name = metadata.producer_name
                if sequence_id > pushed.get(name, -1):
                    pushed[name] = sequence_id
                self._last_persisted = entry.position
        self.highest_sequenced_pushed = pushed
        self.highest_sequenced_persisted = dict(pushed)
        self._cursor = cursor
        self._since_snapshot = replayed
        self.enabled = True
        log.info(
            "%s: deduplication enabled (%d producers, %d entries replayed)",
            self._ledger.name,
            len(pushed),
            replayed,
        )

    async def disable(self) -> None:
        """Turn deduplication off: forget both maps and delete the ``pulsar.dedup`` cursor (as Pulsar, so it
        no longer holds the backlog). Idempotent. Raises ``ManagedLedgerError`` when the cursor state cannot be
        removed."""
        if not self.enabled:
            return
        self.enabled = False
        self.highest_sequenced_pushed.clear()
        self.highest_sequenced_persisted.clear()
        self._cursor = None
        self._since_snapshot = 0
        self._last_persisted = None
        if DEDUP_CURSOR_NAME in self._ledger.cursors:
            await self._ledger.delete_cursor(DEDUP_CURSOR_NAME)

    # ------------------------------------------------------------------ publish path
    def is_duplicate(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DedupStatus:
        """Judge a SEND of ``producer_name`` with ``sequence_id`` (a batch: its first message's) and
        ``highest_sequence_id`` (a batch: its last message's; 0 or absent for a single message). NOT_DUP
        records ``max(sequence_id, highest_sequence_id)`` as pushed (Pulsar ``isDuplicate``)."""
        pushed = self.highest_sequenced_pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            persisted = self.highest_sequenced_persisted.get(producer_name)
            if persisted is not None and sequence_id <= persisted:
                return DedupStatus.DUP
            return DedupStatus.UNKNOWN
        self.highest_sequenced_pushed[producer_name] = max(sequence_id, highest_sequence_id)
        return DedupStatus.NOT_DUP

    def record_persisted(self, producer_name: str, sequence_id: int, position: Position) -> None:
        """The entry at ``position`` carrying up to ``sequence_id`` of ``producer_name`` is durable (called in
        receipt order). Takes a snapshot every ``entries_interval`` entries."""
        if not self.enabled:
            return
        if sequence_id > self.highest_sequenced_persisted.get(producer_name, -1):
            self.highest_sequenced_persisted[producer_name] = sequence_id
        self._last_persisted = position
        self._since_snapshot += 1
        if self._since_snapshot >= self._entries_interval:
            self.take_snapshot()

    def record_failed(self, producer_name: str) -> None:
        """The add of an entry of ``producer_name`` failed: its pushed sequence falls back to the persisted
        one, so the client's resend is judged afresh (Pulsar ``resetHighestSequenceIdPushed``)."""
        if not self.enabled:
            return
        persisted = self.highest_sequenced_persisted.get(producer_name)
        if persisted is None:
            self.highest_sequenced_pushed.pop(producer_name, None)
        else:
            self.highest_sequenced_pushed[producer_name] = persisted

    def take_snapshot(self) -> None:
        """Mark-delete the ``pulsar.dedup`` cursor at the last persisted entry with the persisted map as its
        properties (persisted by the ledger's cursor flusher). Errors are logged: replay covers the gap."""
        cursor, position = self._cursor, self._last_persisted
        if cursor is None or position is None or cursor.is_closed:
            return
        properties = self.highest_sequenced_persisted
        if len(properties) > self._max_producers:
            properties = dict(sorted(properties.items(), key=lambda kv: kv[1])[-self._max_producers :])
        try:
            if position >= cursor.mark_delete_position:
                cursor.mark_delete(position, dict(properties))
            self._since_snapshot = 0
        except ManagedLedgerError as exc:
            log.warning("%s: dedup snapshot at %s failed: %s", self._ledger.name, position, exc)

    @property
    def entries_since_snapshot(self) -> int:
        """Entries persisted (or replayed) since the last snapshot."""
        return self._since_snapshot

    def last_published_sequence_id(self, producer_name: str) -> int:
        """``last_sequence_id`` for PRODUCER_SUCCESS: the highest pushed sequence id, -1 when unknown or
        disabled (Pulsar ``getLastPublishedSequenceId``)."""
        if not self.enabled:
            return -1
        return self.highest_sequenced_pushed.get(producer_name, -1)

    @property
    def status(self) -> str:
        """``deduplicationStatus`` in topic stats: ``Enabled`` or ``Disabled``."""
        return "Enabled" if self.enabled else "Disabled"


class DisabledDeduplication:
    """Deduplication of a topic that never deduplicates (non-persistent topics, as in Pulsar)."""

    enabled = False
    status = "Disabled"

    def is_duplicate(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DedupStatus:
        return DedupStatus.NOT_DUP

    def record_persisted(self, producer_name: str, sequence_id: int, position: Position) -> None:
        pass

    def record_failed(self, producer_name: str) -> None:
        pass

    def last_published_sequence_id(self, producer_name: str) -> int:
        return -1
