"""ConsumeQueueStore: every consume queue of a store, loaded lazily (issue 21: start-up independent of the
number of topics).

:meth:`ConsumeQueueStore.load` only lists the queue directories (``<root>/<topic dir>/<queue id>/``): no file is
opened or mapped. A queue is loaded when it is first used (:meth:`~ConsumeQueueStore.get`,
:meth:`~ConsumeQueueStore.find_or_create`: a put, a read, recovery re-dispatching a record of it): its files are
listed, its end is found (RocketMQ ``ConsumeQueue.recover`` over its last files) and units of records past the
commit log's recovered end are cut (:attr:`~ConsumeQueueStore.dirty_from`, what recovery's
``truncateDirtyLogicFiles`` did to every queue at open). Until then a queue costs one dictionary entry.

Recovery therefore touches only queues that have records past the checkpoint; what it needs about the others
(units below the checkpoint, retention's needed offsets) is computed on demand: :meth:`count_units_below_all`
and :meth:`total_units` load them one at a time without keeping them (rare paths: after a crash, a replica's
truncation), :meth:`unloaded_first_commit_log_offset` reads each unloaded queue's first unit once (``pread``,
no mapping) and remembers it.

The files of loaded queues are mapped on demand and counted in the store's
:class:`~quasar.storage.file_cache.MappedFileCache`, which unmaps the least recently used ones over its budget.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from quasar.storage.consume_queue import (
    CQ_STORE_UNIT_SIZE,
    PRE_BLANK_SIZE,
    TOPIC_FILE_NAME,
    UNIT,
    ConsumeQueue,
    decode_topic_dir,
    encode_topic_dir,
)
from quasar.storage.errors import ConsumeQueueDeletingError, ConsumeQueueUnavailableError, StoreLoadError
from quasar.storage.file_cache import MappedFileCache
from quasar.storage.mapped_file import fsync_dir

log = logging.getLogger(__name__)

__all__ = ["ConsumeQueueStore"]

DELETION_MARKER_PREFIX = ".deleting-"
"""Name prefix of the file a queue deletion leaves in ``root`` while it runs (:meth:`mark_deletion`)."""
_SCAN_CHUNK = 64 * 1024
"""Bytes read at a time when looking for an unloaded queue's first unit (past its pre-blank units)."""


class ConsumeQueueStore:
    """Every consume queue of the store, under ``root`` (``<store root>/consumequeue``), keyed by (topic,
    queue id); files of ``mapped_file_size`` bytes. ``file_cache``: the budget of mapped files the queues share
    (None: every file of a loaded queue stays mapped)."""

    def __init__(self, root: Path, mapped_file_size: int, file_cache: MappedFileCache | None = None) -> None:
        self.root = root
        self.mapped_file_size = mapped_file_size
        self.file_cache = file_cache
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        """Loaded queues."""
        self._on_disk: dict[tuple[str, int], None] = {}
        """Queues found by :meth:`load` and not loaded yet (ordered like a set)."""
        self._first_offsets: dict[tuple[str, int], int | None] = {}
        """Per unloaded queue: the commit log offset of its first unit (None: no unit), once read."""
        self.dirty_from: int | None = None
        """Commit log offset from which units are dirty (recovery's end of the valid commit log): a queue
        loaded later drops its units of records at or past it first. None before recovery."""
        self._deleting: set[tuple[str, int]] = set()
        """Queues being deleted (:mod:`quasar.storage.queue_deletion`): not created again meanwhile."""
        self.deletion_markers: list[Path] = []
        """Markers of queue deletions interrupted by a crash, found by :meth:`load`: recovery then counts every
        queue's units (:meth:`count_units_below_all`) and removes them (:meth:`clear_deletion_markers`)."""

    def __len__(self) -> int:
        """Queues known: loaded or found on disk."""
        return len(self._queues) + len(self._on_disk)

    def __iter__(self) -> Iterator[ConsumeQueue]:
        """The loaded queues (a snapshot). Queues on disk that nobody used since the open are not loaded by
        iterating: see :meth:`count_units_below_all`, :meth:`total_units`,
        :meth:`unloaded_first_commit_log_offset`."""
        return iter(list(self._queues.values()))

    @property
    def loaded(self) -> int:
        """How many queues are loaded."""
        return len(self._queues)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue of (topic, queue id), loaded now if it is on disk and not loaded yet; None when it does
        not exist. Raises :class:`StoreLoadError` for inconsistent files (that queue only),
        :class:`ConsumeQueueUnavailableError` when its files cannot be opened now (EMFILE...)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None and (topic, queue_id) in self._on_disk:
            try:
                queue = self._load_queue((topic, queue_id))
            except OSError as exc:
                raise ConsumeQueueUnavailableError(f"consume queue {topic}/{queue_id}: {exc}") from exc
        return queue

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue id) (loaded if on disk), created empty (no file yet) when missing.
        Raises :class:`ConsumeQueueDeletingError` while that queue is being deleted, the errors of
        :meth:`get`."""
        queue = self.get(topic, queue_id)
        if queue is None:
            if (topic, queue_id) in self._deleting:
                raise ConsumeQueueDeletingError(f"consume queue {topic}/{queue_id} is being deleted")
            queue = ConsumeQueue(self.root, topic, queue_id, self.mapped_file_size, self.file_cache)
            self._queues[(topic, queue_id)] = queue
        return queue

    def _load_queue(self, key: tuple[str, int]) -> ConsumeQueue:
        queue = self._open_queue(key)
        self._queues[key] = (
            queue  # before leaving _on_disk: a concurrent reader of both sees it at least once
        )
        self._on_disk.pop(key, None)
        self._first_offsets.pop(key, None)
        return queue

    def _open_queue(self, key: tuple[str, int]) -> ConsumeQueue:
        """A queue on disk, its files listed, its end found and its dirty units cut (not registered)."""
        topic, queue_id = key
        queue = ConsumeQueue(self.root, topic, queue_id, self.mapped_file_size, self.file_cache)
        try:
            queue.load()
            queue.recover()
            if self.dirty_from is not None:
                queue.truncate_dirty(self.dirty_from)
        except BaseException:
            queue.close()
            raise
        return queue

    def mark_deleting(self, key: tuple[str, int]) -> bool:
        """Start deleting queue ``key``; False when a deletion of it is already running. Loop thread."""
        if key in self._deleting:
            return False
        self._deleting.add(key)
        return True

    def unmark_deleting(self, key: tuple[str, int]) -> None:
        self._deleting.discard(key)

    def detach(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Take queue (topic, queue id) out (None when absent; loaded first if on disk). Loop thread."""
        queue = self.get(topic, queue_id)
        if queue is not None:
            del self._queues[(topic, queue_id)]
        return queue

    def attach(self, queue: ConsumeQueue) -> None:
        """Put ``queue`` in (after :meth:`detach`); its mapped files join the file cache. Loop thread."""
        file_queue = queue.mapped_file_queue
        cache = self.file_cache
        if cache is not None and file_queue.file_cache is None:
            file_queue.file_cache = cache
            for mapped_file in file_queue.mapped_files:
                if mapped_file.is_mapped:
                    cache.add(mapped_file)
        self._queues[(queue.topic, queue.queue_id)] = queue

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id), loaded or not, sorted."""
        return sorted(self._queues.keys() | self._on_disk.keys())

    def load(self) -> None:
        """List the consume queues under ``root``: names only, no file is opened (blocking).

        Raises :class:`StoreLoadError` for a queue directory whose name is not a queue id or a hashed topic
        directory without its ``TOPIC`` file; a queue's files are checked when it is loaded.
        """
        if not self.root.is_dir():
            return
        with os.scandir(self.root) as topics:
            entries = list(topics)
        topic_entries = sorted((e.name, e.path) for e in entries if e.is_dir())
        self.deletion_markers = sorted(
            Path(e.path) for e in entries if e.name.startswith(DELETION_MARKER_PREFIX) and e.is_file()
        )
        on_disk, loaded = self._on_disk, self._queues
        for name, topic_path in topic_entries:  # ~10 us a topic: one listdir each, no Path object
            topic = (
                decode_topic_dir(Path(topic_path)) if name.startswith("~") else unquote(name, errors="strict")
            )
            for queue_name in os.listdir(topic_path):
                if queue_name.isdigit():
                    key = (topic, int(queue_name))
                    if key not in loaded:
                        on_disk[key] = None
                elif queue_name != TOPIC_FILE_NAME and os.path.isdir(os.path.join(topic_path, queue_name)):
                    raise StoreLoadError(f"{topic_path}/{queue_name}: not a queue id directory")

    def mark_deletion(self, topic: str, queue_id: int) -> Path:
        """Leave a durable marker that queue (topic, queue id) is being deleted (before its files go); returns
        its path, for the caller to unlink when the deletion is durable. Blocking. Raises OSError."""
        path = self.root / f"{DELETION_MARKER_PREFIX}{encode_topic_dir(topic)}-{queue_id}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{topic}\n{queue_id}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.root)
        return path

    def clear_deletion_markers(self) -> None:
        """Remove the markers :meth:`load` found (recovery, once the queues match the commit log). Blocking."""
        for path in self.deletion_markers:
            path.unlink(missing_ok=True)
        if self.deletion_markers:
            fsync_dir(self.root)
        self.deletion_markers = []

    def recover(self) -> None:
        """Recover the end of every loaded queue (RocketMQ ``ConsumeQueue.recover``; queues load later
        recover then). Blocking."""
        for queue in list(self._queues.values()):
            queue.recover()

    def truncate_dirty(self, commit_log_offset: int) -> None:
        """Drop units of records at or past ``commit_log_offset`` in every loaded queue, and in every other
        queue when it loads (:attr:`dirty_from`). Blocking."""
        for queue in list(self._queues.values()):
            queue.truncate_dirty(commit_log_offset)
        if self.dirty_from is None or commit_log_offset < self.dirty_from:
            self.dirty_from = commit_log_offset
        self._first_offsets.clear()

    def _each_queue(self) -> Iterator[ConsumeQueue]:
        """Every queue: the loaded ones, then each unloaded one opened for the caller and closed after (not
        kept loaded). Loading each costs a few file operations: rare paths only."""
        yield from list(self._queues.values())
        for key in list(self._on_disk):
            if key in self._queues:
                continue
            queue = self._open_queue(key)
            try:
                yield queue
            finally:
                queue.close()

    def count_units_below_all(self, commit_log_offset: int) -> int:
        """Units (pre-blank excluded) of records starting below ``commit_log_offset``, over every queue
        (opening unloaded ones one at a time). Blocking."""
        return sum(queue.count_units_below(commit_log_offset) for queue in self._each_queue())

    def total_units(self) -> int:
        """Units held over every queue (opening unloaded ones one at a time). Blocking."""
        return sum(queue.max_offset - queue.min_offset for queue in self._each_queue())

    def unloaded_first_commit_log_offset(self) -> int | None:
        """The lowest commit log offset the first unit of a queue not loaded yet points at (None when no such
        queue has a unit): those queues still need their records from there on (retention). Each queue's is
        read once, with ``pread``, without mapping. Any thread. Raises OSError."""
        lowest: int | None = None
        for key in list(self._on_disk):
            if key not in self._first_offsets:
                self._first_offsets[key] = self._first_unit_on_disk(key)
            offset = self._first_offsets.get(key)
            if offset is not None and (lowest is None or offset < lowest):
                lowest = offset
        return lowest

    def _first_unit_on_disk(self, key: tuple[str, int]) -> int | None:
        """The commit log offset of the first real (not pre-blank) unit of an unloaded queue, or None."""
        topic, queue_id = key
        queue_dir = self.root / encode_topic_dir(topic) / str(queue_id)
        try:
            names = sorted(os.listdir(queue_dir))
        except FileNotFoundError:
            return None
        if not names:
            return None
        fd = os.open(queue_dir / names[0], os.O_RDONLY)
        try:
            position = 0
            while position < self.mapped_file_size:
                data = os.pread(fd, min(_SCAN_CHUNK, self.mapped_file_size - position), position)
                if not data:
                    return None
                usable = len(data) - len(data) % CQ_STORE_UNIT_SIZE
                for commit_log_offset, size, _ in UNIT.iter_unpack(data[:usable]):
                    if commit_log_offset < 0 or size <= 0:
                        return None  # the end of the units
                    if size != PRE_BLANK_SIZE:
                        return int(commit_log_offset)
                position += usable
        finally:
            os.close(fd)
        return None

    def flush(self, least_pages: int = 0) -> None:
        """fdatasync every loaded queue with enough dirty pages (others have nothing to sync). Blocking; safe
        on a thread while the loop dispatches. The ``consumequeue`` directory is fsynced once for all the new
        topic directories, before returning (so before a checkpoint is written)."""
        sync_root = False
        for queue in list(self._queues.values()):
            sync_root = queue.flush_files(least_pages) or sync_root
        if sync_root:
            fsync_dir(self.root)

    def destroy(self) -> None:
        """Delete every consume queue (A6: when the commit log has no file at all). Blocking."""
        for queue in list(self._each_queue()):
            queue.destroy()
        self._queues.clear()
        self._on_disk.clear()
        self._first_offsets.clear()

    def close(self) -> None:
        for queue in list(self._queues.values()):
            queue.close()
