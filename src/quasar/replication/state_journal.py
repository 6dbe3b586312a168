"""The state journal: a broker's ledger and cursor state travels to its slaves in the commit log itself.

A managed ledger's ledger table, every cursor's mark-delete position and individually acked ranges, the
``pulsar.dedup`` cursor that holds the deduplication snapshot and the ledger-id counter live in the broker's
local metadata store (sqlite, ``quasar.ledger.paths``). A slave that is promoted must have them, or its
consumers start over and its producers' retries are no longer deduplicated. Kafka keeps consumer offsets in
the ``__consumer_offsets`` topic and Pulsar writes cursor positions to cursor ledgers in BookKeeper: state as
records of the replicated log. Quasar does the same (DESIGN.md, "Cluster"):

- on the master, :class:`JournaledMetadataStore` wraps the local store the managed-ledger layer uses: every
  ``put`` / ``delete`` / ``delete_recursive`` / ``multi`` that succeeded locally is appended as one record of
  the internal storage queue ``(JOURNAL_TOPIC, 0)`` to the same commit log, so the HA channel ships it with
  the data, in order, byte for byte. On a SYNC_MASTER the write returns once the record is also on the in-sync
  replicas (``replicated(end)``), so a ledger row is on the slave before any entry of that ledger is receipted;
- on a slave, :class:`JournalApplier` reads that queue by queue offset as it grows and applies each record to
  the slave's local store (puts without version checks: last write wins, in commit-log order), remembering
  the applied queue offset locally (``APPLIED_OFFSET_PATH``, not journaled). When the queue shrank below it
  (epoch truncation of a diverged tail, or a torn tail recovered after a crash) it clears the journaled roots
  and applies the queue again from its first record;
- :meth:`JournaledMetadataStore.snapshot` re-journals every value under the journaled roots (at promotion and
  every ``snapshot_interval_s``), so a slave that starts from an empty directory after retention removed old
  segments still gets the complete state.

Record body (big-endian)::

    magic  b"QSJ1"
    u32    number of operations
    per operation:
      u8   1 = put, 2 = delete (absent: ignored), 3 = delete recursive
      u16  path length, path (UTF-8)
      u32  value length, value            (put only)

Cursor positions are journaled as often as the ledger persists them (``cursor_persist_interval_ms``): after a
failover, at most the acks of that interval are redelivered (at-least-once, as Pulsar after a broker crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from quasar.metadata.errors import MetadataStoreError
from quasar.metadata.port import (
    Delete,
    GetResult,
    MetadataStore,
    Notification,
    Put,
    SessionEvent,
    Stat,
    decode_json,
    encode_json,
)
from quasar.replication.errors import ReplicationError
from quasar.storage.message_store import MessageStore
from quasar.storage.results import PutResult
from quasar.storage.status import GetStatus, PutStatus

__all__ = [
    "APPLIED_OFFSET_PATH",
    "JOURNALED_ROOTS",
    "JOURNAL_TOPIC",
    "JournalApplier",
    "JournalFormatError",
    "JournalOp",
    "JournaledMetadataStore",
    "decode_journal",
    "encode_journal",
]

log = logging.getLogger(__name__)

JOURNAL_TOPIC = "__quasar/state-journal"
"""The storage queue ``(JOURNAL_TOPIC, 0)`` of the journal records (no managed ledger has this name: theirs
are Pulsar topic names)."""

JOURNALED_ROOTS = ("/managed-ledgers", "/cursors", "/ledger-ids")
"""The subtrees of the local store the journal carries (``quasar.ledger.paths``)."""

APPLIED_OFFSET_PATH = "/replication/journal-applied"
"""Local, never journaled: the next journal queue offset a slave applies."""

MAGIC = b"QSJ1"
OP_PUT, OP_DELETE, OP_DELETE_RECURSIVE = 1, 2, 3
MAX_RECORD_BYTES = 1 << 20
"""Journal records are cut at about 1 MiB (a snapshot spans several records)."""
MAX_PATH_BYTES = 65535
_RESET = 1 << 62

_HEADER = struct.Struct(">4sI")
_OP = struct.Struct(">BH")
_LEN = struct.Struct(">I")


class JournalFormatError(ReplicationError):
    """A journal record does not decode (truncated, bad magic, bad operation)."""


@dataclass(frozen=True, slots=True)
class JournalOp:
    """One journaled change: ``kind`` OP_PUT / OP_DELETE / OP_DELETE_RECURSIVE, ``value`` bytes for a put."""

    kind: int
    path: str
    value: bytes = b""


def _encode_op(op: JournalOp) -> bytes:
    path = op.path.encode()
    if len(path) > MAX_PATH_BYTES:
        raise ValueError(f"journal path longer than {MAX_PATH_BYTES} bytes")
    head = _OP.pack(op.kind, len(path)) + path
    return head + _LEN.pack(len(op.value)) + op.value if op.kind == OP_PUT else head


def encode_journal(ops: Sequence[JournalOp]) -> bytes:
    """One record body holding ``ops`` (applied together on the slave). Raises ValueError for a path past
    65535 bytes."""
    return _HEADER.pack(MAGIC, len(ops)) + b"".join(_encode_op(op) for op in ops)


def decode_journal(body: bytes | memoryview) -> list[JournalOp]:
    """The operations of one record body; raises :class:`JournalFormatError` for anything that does not
    decode (counts and lengths are checked against the body before anything is allocated)."""
    data = bytes(body)
    if len(data) < _HEADER.size:
        raise JournalFormatError(f"journal record of {len(data)} bytes is shorter than its header")
    magic, count = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise JournalFormatError(f"journal record magic {magic!r} is not {MAGIC!r}")
    if count > len(data):  # every operation takes at least 3 bytes
        raise JournalFormatError(f"journal record claims {count} operations in {len(data)} bytes")
    ops: list[JournalOp] = []
    position = _HEADER.size
    for _ in range(count):
        if position + _OP.size > len(data):
            raise JournalFormatError("journal record truncated in an operation header")
        kind, path_len = _OP.unpack_from(data, position)
        position += _OP.size
        if kind not in (OP_PUT, OP_DELETE, OP_DELETE_RECURSIVE) or position + path_len > len(data):
            raise JournalFormatError(f"journal operation {kind} with a {path_len}-byte path does not decode")
        try:
            path = data[position : position + path_len].decode()
        except UnicodeDecodeError as exc:
            raise JournalFormatError(f"journal path is not UTF-8: {exc}") from None
        position += path_len
        value = b""
        if kind == OP_PUT:
            if position + _LEN.size > len(data):
                raise JournalFormatError("journal record truncated before a value length")
            (value_len,) = _LEN.unpack_from(data, position)
            position += _LEN.size
            if position + value_len > len(data):
                raise JournalFormatError(f"journal value of {value_len} bytes runs past the record")
            value = data[position : position + value_len]
            position += value_len
        ops.append(JournalOp(kind, path, value))
    if position != len(data):
        raise JournalFormatError(f"{len(data) - position} bytes after the last journal operation")
    return ops


def _journaled(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in JOURNALED_ROOTS)


class JournalSink(Protocol):
    """Where journal records are appended: the replicated store (``ReplicatedStore.put_unchecked``: wakes
    the HA channel, never refused for missing replicas)."""

    def put_unchecked(self, topic: str, queue_id: int, body: bytes) -> PutResult: ...


Replicated = Callable[[int], Awaitable[PutStatus]]
"""``replicated(commit_log_end)``: resolves when the bytes up to ``commit_log_end`` are flushed and, on a
SYNC_MASTER, on the in-sync replicas (the store adapter's ``wait_flushed``)."""


class JournaledMetadataStore:
    """The local metadata store of a replicated broker's managed-ledger layer (see the module docstring).

    Satisfies :class:`~quasar.metadata.port.MetadataStore` by delegating to ``inner``; writes under
    :data:`JOURNALED_ROOTS` that succeed are appended to ``store`` as journal records (through the replicated
    store, whose puts wake the HA channel), then awaited with ``replicated``. A journal record that cannot be
    appended or replicated is logged and the write still succeeds (it is durable locally; the next write of
    the same state and the periodic snapshot carry it): raising would fence the managed ledger over a slave's
    hiccup.
    """

    def __init__(self, inner: MetadataStore, store: JournalSink, replicated: Replicated) -> None:
        self._inner = inner
        self._store = store
        self._replicated = replicated
        self.enabled = True
        """Off on a slave (its store refuses appends; the applier writes the same state)."""
        self.records_written = 0
        self.records_failed = 0

    # -- reads: straight through
    async def get(self, path: str) -> GetResult | None:
        return await self._inner.get(path)

    async def exists(self, path: str) -> bool:
        return await self._inner.exists(path)

    async def get_children(self, path: str) -> list[str]:
        return await self._inner.get_children(path)

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        self._inner.register_listener(listener)

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._inner.register_session_listener(listener)

    async def close(self) -> None:
        await self._inner.close()

    # -- writes: local first, then the journal
    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False
    ) -> Stat:
        stat = await self._inner.put(path, value, expected_version, ephemeral=ephemeral)
        if not ephemeral and _journaled(path):
            await self._journal([JournalOp(OP_PUT, path, value)])
        return stat

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await self._inner.delete(path, expected_version)
        if _journaled(path):
            await self._journal([JournalOp(OP_DELETE, path)])

    async def delete_recursive(self, path: str) -> None:
        await self._inner.delete_recursive(path)
        if _journaled(path):
            await self._journal([JournalOp(OP_DELETE_RECURSIVE, path)])

    async def multi(self, ops: Sequence[Put | Delete]) -> list[Stat | None]:
        results = await self._inner.multi(ops)
        journal = [
            JournalOp(OP_PUT, op.path, op.value) if isinstance(op, Put) else JournalOp(OP_DELETE, op.path)
            for op in ops
            if _journaled(op.path)
        ]
        if journal:
            await self._journal(journal)
        return results

    async def _journal(self, ops: Sequence[JournalOp]) -> None:
        if not self.enabled:
            return
        for body in _chunks(ops):
            result = self._store.put_unchecked(JOURNAL_TOPIC, 0, body)
            if result.status is not PutStatus.PUT_OK:
                self.records_failed += 1
                log.warning(
                    "state journal: record not appended (%s); the next snapshot carries it", result.status
                )
                return
            self.records_written += 1
            status = await self._replicated(result.commit_log_offset + result.wrote_bytes)
            if status is not PutStatus.PUT_OK:
                self.records_failed += 1
                log.warning(
                    "state journal: record at %d not replicated (%s)", result.commit_log_offset, status
                )

    async def snapshot(self) -> int:
        """Journal every value under :data:`JOURNALED_ROOTS` again (after a promotion, and periodically);
        returns the number of values. Raises the port's MetadataStoreError when the local store fails."""
        ops = [JournalOp(OP_PUT, path, value) async for path, value in _walk(self._inner, JOURNALED_ROOTS)]
        if ops:
            await self._journal(ops)
        return len(ops)


def _chunks(ops: Sequence[JournalOp]) -> Iterable[bytes]:
    batch: list[JournalOp] = []
    size = 0
    for op in ops:
        cost = len(op.path) + len(op.value) + 16
        if batch and size + cost > MAX_RECORD_BYTES:
            yield encode_journal(batch)
            batch, size = [], 0
        batch.append(op)
        size += cost
    if batch:
        yield encode_journal(batch)


async def _walk(metadata: MetadataStore, roots: Iterable[str]) -> AsyncIterator[tuple[str, bytes]]:
    """Every (path, value) at or below ``roots``, depth first."""
    stack = list(roots)
    while stack:
        path = stack.pop()
        found = await metadata.get(path)
        if found is not None:
            yield path, found.value
        for child in reversed(await metadata.get_children(path)):
            stack.append(f"{path}/{child}")


class JournalApplier:
    """Applies the journal a slave receives to its local store (see the module docstring). Loop thread.

    :meth:`start` runs an owned task that applies new records whenever :meth:`wakeup` is called (the HA
    client after each append) or every ``poll_s``, except while ``paused()`` (the HA client truncates);
    :meth:`drain` applies everything stored now (before a promoted slave opens its managed ledgers);
    :meth:`stop` cancels the task.
    """

    def __init__(
        self,
        store: MessageStore,
        metadata: MetadataStore,
        *,
        poll_s: float = 0.2,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._paused = paused
        self._metadata = metadata
        self._poll_s = poll_s
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.next_offset: int | None = None
        """The next journal queue offset to apply (loaded at the first apply)."""
        self.records_applied = 0
        self.records_rejected = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="state-journal-applier")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def reset(self) -> None:
        """Forget what was applied: the next drain clears the journaled roots and applies the whole journal
        (a broker that becomes a slave: its own state may hold a tail the new master never had)."""
        self.next_offset = _RESET

    def wakeup(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_s):
                    await self._wakeup.wait()
            self._wakeup.clear()
            try:
                await self.drain()
            except MetadataStoreError as exc:
                log.warning("state journal: applying failed, retrying: %s", exc)

    async def drain(self) -> int:
        """Apply every journal record stored now; returns how many were applied. Raises the port's
        MetadataStoreError (the same records are applied again by the next call)."""
        async with self._lock:
            return await self._drain()

    async def _drain(self) -> int:
        store = self._store
        if self._paused():  # the store is being truncated under us: the next wakeup applies
            return 0
        if self.next_offset is None:
            found = await self._metadata.get(APPLIED_OFFSET_PATH)
            self.next_offset = int(decode_json(APPLIED_OFFSET_PATH, found.value)) if found else 0
        end = store.max_queue_offset(JOURNAL_TOPIC, 0)
        if self.next_offset > end:  # the journal was truncated below what was applied: start over
            if self.next_offset == _RESET:
                log.info(
                    "state journal: rebuilding the ledger and cursor state from the journal (%d records)", end
                )
            else:
                log.warning(
                    "state journal: applied up to %d but the journal ends at %d (truncated); re-applying it",
                    self.next_offset,
                    end,
                )
            for root in JOURNALED_ROOTS:
                await self._metadata.delete_recursive(root)
            self.next_offset = 0
        applied = 0
        offset = max(self.next_offset, store.min_queue_offset(JOURNAL_TOPIC, 0))
        while offset < end:
            result = store.get(JOURNAL_TOPIC, 0, offset, 64, MAX_RECORD_BYTES * 4)
            if result.status is not GetStatus.FOUND or not result.messages:
                offset = (
                    max(offset + 1, result.next_begin_offset) if result.next_begin_offset > offset else end
                )
                continue
            for message in result.messages:
                await self._apply(message.body, message.queue_offset)
                applied += 1
            offset = result.next_begin_offset
        if offset != self.next_offset:
            self.next_offset = offset
            await self._metadata.put(APPLIED_OFFSET_PATH, encode_json(offset))
        return applied

    async def _apply(self, body: memoryview, queue_offset: int) -> None:
        try:
            ops = decode_journal(body)
        except JournalFormatError as exc:
            self.records_rejected += 1
            log.error("state journal: record %d skipped: %s", queue_offset, exc)
            return
        batch: list[Put | Delete] = []
        for op in ops:
            if not _journaled(op.path):
                self.records_rejected += 1
                log.error(
                    "state journal: record %d writes %s, outside the journaled roots", queue_offset, op.path
                )
                return
            if op.kind == OP_DELETE_RECURSIVE:
                if batch:
                    await self._metadata.multi(batch)
                    batch = []
                await self._metadata.delete_recursive(op.path)
            elif op.kind == OP_PUT:
                batch.append(Put(op.path, op.value))
            else:
                batch.append(Delete(op.path))
        if batch:
            await self._metadata.multi(batch)
        self.records_applied += 1
