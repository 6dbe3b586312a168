"""IndexService: the index files under ``<root>/index/`` and the key dispatcher that fills them (RocketMQ
``index/IndexService`` and ``CommitLogDispatcherBuildIndex``, semantics.md A4).

Keys indexed per record, each as ``topic + "#" + key``: every space-separated word of the ``KEYS`` property,
the ``UNIQ_KEY`` property, and whatever the store's ``key_extractor(topic, body)`` returns (the broker passes
one that reads the Pulsar partition key and the keys of the messages inside a batch; it runs here, on the
reput thread, never on the event loop). Rolled-back transaction records are skipped.

Writes happen on one thread (the reput thread, or ``open``/``close``); :meth:`IndexService.query_offsets` may
run on the event loop at the same time: both take a lock, held per record and per query, never across I/O
other than an index file roll.

Durability (checkpoint fields, semantics.md A5): when an index file is full it is flushed and the checkpoint's
``index_msg_timestamp`` becomes its end timestamp (RocketMQ ``IndexService.flush``); Quasar also flushes the
newest file on the consume queue thorough flush and at close, recording the same timestamp plus
``index_flushed_offset`` (every record below it is in a flushed index file). After an unclean exit, files whose
``end_timestamp`` is past ``index_msg_timestamp`` are destroyed (RocketMQ ``IndexService.load``) and rebuilt by
re-dispatching the commit log from the end of what the kept files cover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.dispatch import DispatchRequest
from quasar.storage.errors import StoreLoadError
from quasar.storage.index_file import INDEX_FILE_NAME_LENGTH, IndexFile, index_file_name, index_key_hash
from quasar.storage.mapped_file import fsync_dir
from quasar.storage.record import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK

log = logging.getLogger(__name__)

KeyExtractor = Callable[[str, memoryview], Iterable[str]]
"""``key_extractor(topic, body) -> keys``: message keys found in a record's body (e.g. Pulsar metadata)."""

MAX_KEYS_PER_RECORD = 10_000
"""Keys indexed per record at most (the first ones, in order). Bounds the reput thread's work per record: a
Pulsar batch of tiny keyed messages, e.g. a 500-byte ZSTD entry inflating to 5 MB, can carry 350,000 keys,
about a second of CPU each time it is indexed (and again at every recovery). Pulsar's producers batch at
most 1,000 messages by default; a record with more keys is indexed in part and counted in
``keys_dropped`` (logged at most once a minute)."""

EXTRACTOR_LOG_INTERVAL_S = 60.0
"""A key extractor failure or a record cut to :data:`MAX_KEYS_PER_RECORD` is logged at most once per this
many seconds, with the number of records affected since the last line (a client can send many)."""

MAX_MSGS_NUM_BATCH = 64
"""RocketMQ ``maxMsgsNumBatch``: a query returns at most this many offsets."""


def build_key(topic: str, key: str) -> str:
    """RocketMQ ``IndexService.buildKey``: ``topic#key``."""
    return f"{topic}#{key}"


class IndexService:
    """The index files of one store, in ``store_path`` (``<root>/index``)."""

    def __init__(
        self,
        store_path: Path,
        checkpoint_getter: Callable[[], StoreCheckpoint | None],
        *,
        hash_slot_num: int,
        index_num: int,
        key_extractor: KeyExtractor | None = None,
    ) -> None:
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.key_extractor = key_extractor
        self._checkpoint = checkpoint_getter
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self.last_indexed_offset = -1
        """Commit log offset of the newest indexed record (-1: none); records at or below are skipped."""
        self.extractor_errors = 0
        """Records whose key extractor raised (indexed without the extractor's keys)."""
        self.keys_dropped = 0
        """Records indexed with only their first :data:`MAX_KEYS_PER_RECORD` keys."""
        self._log_after: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}
        self.directory_was_missing = False
        """Set by :meth:`load`: the ``index`` directory was not there (lost, or a new store)."""

    def __repr__(self) -> str:
        return f"IndexService({self.store_path}, files={len(self._files)})"

    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the index files, oldest first."""
        return self._files

    # -- load ------------------------------------------------------------------------------------------------

    def load(self, *, last_exit_ok: bool) -> None:
        """Map the index files; after an unclean exit destroy those whose end timestamp is past the
        checkpoint's ``index_msg_timestamp`` (RocketMQ ``IndexService.load``). Blocking.

        Raises :class:`StoreLoadError` for a file of the wrong size (other settings than when written).
        """
        self.directory_was_missing = not self.store_path.is_dir()
        self.store_path.mkdir(parents=True, exist_ok=True)
        checkpoint = self._checkpoint()
        index_msg_timestamp = checkpoint.index_msg_timestamp if checkpoint is not None else 0
        files: list[IndexFile] = []
        destroyed = False
        for path in sorted(self.store_path.iterdir()):
            if len(path.name) != INDEX_FILE_NAME_LENGTH or not path.name.isdigit():
                log.warning("index: ignoring unexpected file %s", path)
                continue
            try:
                index_file = IndexFile(path, self.hash_slot_num, self.index_num, create=False)
            except StoreLoadError:
                for kept in files:
                    kept.close()
                raise
            if not last_exit_ok and index_file.end_timestamp > index_msg_timestamp:
                log.warning(
                    "index: destroying %s (end timestamp %d past the checkpoint's %d: unclean exit)",
                    path.name,
                    index_file.end_timestamp,
                    index_msg_timestamp,
                )
                index_file.destroy()
                destroyed = True
                continue
            files.append(index_file)
        if destroyed:
            fsync_dir(self.store_path)
        self._files = files
        self.last_indexed_offset = max((f.end_phy_offset for f in files if not f.is_empty), default=-1)

    def recover_from(self, min_commit_log_offset: int, *, last_exit_ok: bool) -> int:
        """The commit log offset the reput service must re-dispatch from so the index is complete: after a
        clean exit the checkpoint's ``index_flushed_offset`` (unless the directory was lost); otherwise the
        newest indexed record kept (its keys are skipped as already indexed), or the start of the commit log
        when no file was kept."""
        checkpoint = self._checkpoint()
        start = self.last_indexed_offset if self.last_indexed_offset >= 0 else min_commit_log_offset
        if last_exit_ok and checkpoint is not None and not self.directory_was_missing:
            start = max(start, checkpoint.index_flushed_offset)
        return max(start, min_commit_log_offset)

    # -- write (reput thread) --------------------------------------------------------------------------------

    def dispatch(self, request: DispatchRequest) -> None:
        """Index the keys of one record (RocketMQ ``IndexService.buildIndex``); idempotent (a record at or
        below :attr:`last_indexed_offset` is skipped). Raises OSError when a new index file cannot be made."""
        offset = request.commit_log_offset
        if offset <= self.last_indexed_offset:
            return
        if request.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
            return
        keys = self._keys_of(request)
        if not keys:
            return
        topic = request.topic
        timestamp = request.store_timestamp
        with self._lock:
            for key in keys:
                key_hash = index_key_hash(build_key(topic, key))
                index_file = self._writable_file(timestamp)
                if not index_file.put_key(key_hash, offset, timestamp):
                    index_file = self._writable_file(timestamp)
                    index_file.put_key(key_hash, offset, timestamp)
            self.last_indexed_offset = offset

    def _keys_of(self, request: DispatchRequest) -> list[str]:
        keys: list[str] = request.keys.split() if request.keys else []
        if request.uniq_key:
            keys.append(request.uniq_key)
        extractor = self.key_extractor
        if extractor is not None and request.body is not None:
            try:
                keys.extend(k for k in extractor(request.topic, request.body) if k)
            except Exception as exc:  # noqa: BLE001 - the application's extractor: a bad body skips only its keys
                self.extractor_errors += 1
                self._log_rarely(
                    "extractor",
                    "index: the key extractor failed on commit log offset %d, indexed without its keys: %r",
                    request.commit_log_offset,
                    exc,
                )
        if len(keys) > 1:
            keys = list(dict.fromkeys(keys))
            if len(keys) > MAX_KEYS_PER_RECORD:
                self.keys_dropped += 1
                self._log_rarely(
                    "keys",
                    "index: the record at commit log offset %d has %d keys, only the first %d are indexed",
                    request.commit_log_offset,
                    len(keys),
                    MAX_KEYS_PER_RECORD,
                )
                del keys[MAX_KEYS_PER_RECORD:]
        return keys

    def _log_rarely(self, reason: str, message: str, *args: object) -> None:
        """A warning for ``reason`` at most once per :data:`EXTRACTOR_LOG_INTERVAL_S`, saying how many were
        not logged since the previous one."""
        now = time.monotonic()
        if now < self._log_after.get(reason, 0.0):
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return
        self._log_after[reason] = now + EXTRACTOR_LOG_INTERVAL_S
        skipped = self._unlogged.pop(reason, 0)
        suffix = f" ({skipped} more since the last such line)" if skipped else ""
        log.warning(message + suffix, *args)

    def _writable_file(self, timestamp: int) -> IndexFile:
        """The newest file unless full; else flush the full one, checkpoint it, and create the next."""
        files = self._files
        if files and not files[-1].is_full():
            return files[-1]
        if files:
            full = files[-1]
            full.flush()
            checkpoint = self._checkpoint()
            if checkpoint is not None:
                checkpoint.index_msg_timestamp = max(checkpoint.index_msg_timestamp, full.end_timestamp)
                checkpoint.flush()
        self.store_path.mkdir(parents=True, exist_ok=True)
        name_ms = max(timestamp, time.time_ns() // 1_000_000)
        path = self.store_path / index_file_name(name_ms)
        while path.exists() or (files and path.name <= files[-1].path.name):
            name_ms += 1
            path = self.store_path / index_file_name(name_ms)
        index_file = IndexFile(path, self.hash_slot_num, self.index_num, create=True)
        fsync_dir(self.store_path)
        self._files = [*files, index_file]
        return index_file

    # -- flush -----------------------------------------------------------------------------------------------

    def flush(self, dispatched_offset: int) -> None:
        """fdatasync the newest index file and record it in the checkpoint (``index_msg_timestamp``, and
        ``index_flushed_offset = dispatched_offset``, the reput position sampled *before* the call). Does not
        write the checkpoint file itself. Blocking."""
        with self._lock:
            files = self._files
            end_timestamp = files[-1].end_timestamp if files else 0
        for index_file in files[-2:]:
            index_file.flush()
        checkpoint = self._checkpoint()
        if checkpoint is not None:
            checkpoint.index_msg_timestamp = max(checkpoint.index_msg_timestamp, end_timestamp)
            checkpoint.index_flushed_offset = max(checkpoint.index_flushed_offset, dispatched_offset)

    # -- query -----------------------------------------------------------------------------------------------

    def query_offsets(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commit log offsets of records indexed under ``topic#key`` with a store time in [begin_ms, end_ms]
        (index precision: one second, so the range is widened by 999 ms below and the caller re-checks the
        record's exact store time), newest first, at most ``min(max_num, 64)`` (RocketMQ
        ``IndexService.queryOffset``). Hash collisions come back too: the caller filters on the real key.
        """
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        key_hash = index_key_hash(build_key(topic, key))
        widened_begin = begin_ms - 999
        result: list[int] = []
        with self._lock:
            for index_file in reversed(self._files):
                if index_file.is_empty:
                    continue
                if index_file.is_time_matched(widened_begin, end_ms):
                    result.extend(
                        index_file.select_phy_offsets(key_hash, max_num - len(result), widened_begin, end_ms)
                    )
                if index_file.begin_timestamp < widened_begin or len(result) >= max_num:
                    break
        return result

    # -- retention / close -----------------------------------------------------------------------------------

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """Delete the oldest index files (never the newest) whose every record lies below
        ``min_commit_log_offset`` (RocketMQ ``IndexService.deleteExpiredFile``); returns how many.
        Blocking."""
        with self._lock:
            files = self._files
            count = 0
            while count < len(files) - 1 and files[count].end_phy_offset < min_commit_log_offset:
                count += 1
            expired, self._files = files[:count], files[count:]
        for index_file in expired:
            log.info("index: deleting expired %s", index_file.path.name)
            index_file.destroy()
        if expired:
            fsync_dir(self.store_path)
        return len(expired)

    def truncate(self, commit_log_offset: int) -> None:
        """Forget every item pointing at ``commit_log_offset`` or later, durably, so no query returns them,
        even once other records are written there (``MessageStore.truncate_commit_log``): files whose first
        item is at or past it are deleted, the newest items of the file holding the cut are removed
        (:meth:`IndexFile.truncate_items`) and the file flushed; :attr:`last_indexed_offset` moves back.
        Blocking; the reput thread must be paused."""
        with self._lock:
            files = self._files
            kept = list(files)
            while kept and not kept[-1].is_empty and kept[-1].begin_phy_offset >= commit_log_offset:
                kept.pop()
            removed = files[len(kept) :]
            if kept and not kept[-1].is_empty and kept[-1].end_phy_offset >= commit_log_offset:
                kept[-1].truncate_items(kept[-1].first_item_at_or_past(commit_log_offset))
                kept[-1].flush()
            self._files = kept
            self.last_indexed_offset = max((f.end_phy_offset for f in kept if not f.is_empty), default=-1)
        for index_file in removed:
            log.info(
                "index: deleting %s (records at or past commit log offset %d)",
                index_file.path.name,
                commit_log_offset,
            )
            index_file.destroy()
        if removed:
            fsync_dir(self.store_path)

    def close(self) -> None:
        with self._lock:
            for index_file in self._files:
                index_file.close()
