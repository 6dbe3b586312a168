"""AllocateMappedFileService: creates the next commit log segment before it is needed (RocketMQ
``AllocateMappedFileService``, semantics.md A2/A7).

When the commit log rolls to segment *n*, :class:`~quasar.storage.mapped_file_queue.MappedFileQueue` takes it
from this service and asks for segment *n + 1* in the background. The allocation thread creates the file at
its full size, maps it and reserves the disk blocks of its first :data:`~quasar.storage.mapped_file.RESERVE_CHUNK_SIZE`
bytes (``posix_fallocate``); with ``warm_mapped_file`` it reserves the whole file and writes zeros over it with
``pwrite`` (GIL released), so the first appends find their pages in the page cache (RocketMQ
``warmMappedFile``; the file then holds real blocks instead of a hole). The event loop only picks up a ready
file: a roll costs a dictionary look-up.

**When the allocator is behind** (the bounded fallback of :meth:`AllocateMappedFileService.take`; measured on
the development VM with 256 MiB segments, ``/tmp/qbench/alloc_wait.py``):

- the file is requested but not ready: the taker waits for its creation and first reservation (~50 µs),
  never for a warm-up: a warm-up in progress stops at its next 1 MiB chunk (≤ ~1 ms) and is handed over
  partly warmed (the rest fills on first touch, as without warming), and a file a taker already waits for is
  not warmed. Before this bound a take during a warm-up waited for all of it: 44-79 ms per 256 MiB;
- the file was not requested (or the thread is not running): it is created on the taker's thread, never
  warmed (open, ``ftruncate``, ``mmap``, first reservation: ~0.2 ms; 96 ms with the warm-up it used to get).

What stays on the loop thread (measured with ``/tmp/qbench/newqueue.py``, while other processes ran tests):

- the chunked ``posix_fallocate`` ahead of the write position (:meth:`MappedFile.reserve
  <quasar.storage.mapped_file.MappedFile.reserve>`, ~5-12 µs per 4 MiB written) when not warming;
- consume queue files, created where a put needs one (:meth:`ConsumeQueue.prepare_write
  <quasar.storage.consume_queue.ConsumeQueue.prepare_write>`): a queue's first unit makes its two directories
  and its first file (median ~0.2 ms, but mkdir and file creation wait for the ext4 journal: up to ~10-40 ms
  while other processes fsync), and every 300 000 units the next file (~80 µs). Moving these off the loop
  needs the managed ledger to ask for its queue's first file when it opens (a follow-up: the store would
  create it here, like the next commit log segment).

A pre-allocated segment lies past the end of the log and holds only zeros: if the process dies, recovery reads
it as "no data" and deletes it (``truncateDirtyFiles``), or keeps it empty as the next segment. Creation
errors (ENOSPC...) are remembered and re-raised to the caller that asks for that file, which then reports
``CREATE_MAPPED_FILE_FAILED`` (or refuses the put when the disk is full); the request is not retried in the
background.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from quasar.storage.mapped_file import RESERVE_CHUNK_SIZE, MappedFile

log = logging.getLogger(__name__)


WARM_CHUNK_SIZE = 1024 * 1024
"""Bytes of zeros per ``pwrite`` while warming a segment; a taker waits for at most one chunk."""

_ZEROS = bytes(WARM_CHUNK_SIZE)


def warm_mapped_file(mapped_file: MappedFile, stop: threading.Event | None = None) -> bool:
    """Reserve the whole file's disk blocks, then write zeros over it with ``os.pwrite`` in 1 MiB chunks, so
    every page is in the page cache, backed by a block, before the first append maps it. Only for a file nothing
    was written to yet. Blocking, but ``pwrite`` releases the GIL: on the allocation thread this costs the event
    loop nothing. Stops between chunks once ``stop`` is set (a taker is waiting) and returns False then, True
    when every byte was written. Raises OSError (``ENOSPC``) before the first zero is written.

    Why ``pwrite`` and not RocketMQ's one-byte-per-page touch through the mapping: a store into the mapping holds
    the GIL for the whole 1 GiB, and on a VM the first touch of a page is its allocation (measured here: 2.9 ns/B
    writing into a cold mapping, 0.22 ns/B into one pre-written with ``pwrite``, 0.47 ns/B after MAP_POPULATE).
    The zeros reach the disk with the next writeback, like RocketMQ's warm-up (``warmMappedFile`` with
    ``flushLeastPagesWhenWarmMapedFile``)."""
    mapped_file.reserve(mapped_file.file_size)  # disk blocks first: ENOSPC here, never a SIGBUS later
    fd = mapped_file.fileno()
    size = mapped_file.file_size
    position = 0
    while position < size:
        if stop is not None and stop.is_set():
            return False
        chunk = _ZEROS if size - position >= WARM_CHUNK_SIZE else _ZEROS[: size - position]
        position += os.pwrite(fd, chunk, position)
    return True


class AllocateMappedFileService:
    """Creates mapped files of ``file_size`` bytes on a background thread, one request at a time."""

    def __init__(
        self, file_size: int, *, warm: bool = False, name: str = "quasar-allocate-mapped-file"
    ) -> None:
        self.file_size = file_size
        self.warm = warm
        self._condition = threading.Condition()
        self._requests: dict[Path, MappedFile | Exception | None] = {}
        """Requested paths: None until created, then the file or the creation error."""
        self._queue: list[Path] = []
        """Requested paths the thread has not started on yet."""
        self._working: Path | None = None
        """The path the thread is creating now."""
        self._wanted: Path | None = None
        """The path a taker is waiting for."""
        self._hurry = threading.Event()
        """Set while a taker waits for ``_working`` (or for a path queued behind it): a warm-up stops at its
        next chunk."""
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self.created = 0
        """Files created by the background thread (statistics, tests)."""
        self.hits = 0
        """Requests served by a file the thread had ready."""
        self.waits = 0
        """Takes that waited for their file to be created (the allocator was behind)."""
        self.misses = 0
        """Takes that created their file on the caller's thread (it was not requested)."""

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def pre_allocate(self, path: Path) -> None:
        """Ask for ``path`` to be created in the background (no-op if already requested)."""
        with self._condition:
            if self._stopped or path in self._requests:
                return
            self._requests[path] = None
            self._queue.append(path)
            self._condition.notify_all()

    def take(self, path: Path) -> MappedFile:
        """The file at ``path``, ready to append to: the pre-allocated one; one still being prepared (waiting
        for its creation and first disk blocks, never for a warm-up: a warm-up in progress stops at its next
        1 MiB chunk, and a file waited for is not warmed); or, when it was not requested (or the thread is not
        running), one created now on the caller's thread without warm-up. Raises OSError when creation
        fails."""
        with self._condition:
            if self._requests.get(path, 0) is None and self._started and not self._stopped:
                self.waits += 1
                self._wanted = path
                self._hurry.set()
                if path in self._queue:  # first in line
                    self._queue.remove(path)
                    self._queue.insert(0, path)
                while self._requests.get(path, 0) is None and not self._stopped:
                    self._condition.wait()
                self._wanted = None
            if path in self._queue:
                self._queue.remove(path)
            result = self._requests.pop(path, None)
        if isinstance(result, MappedFile):
            self.hits += 1
            return result
        if isinstance(result, Exception):
            raise result
        if self._started and not self._stopped:
            self.misses += 1
            log.warning(
                "%s: %s was not pre-allocated; creating it on the caller's thread", self._thread.name, path
            )
        return self._create(path, warm=False)

    def _create(self, path: Path, *, warm: bool) -> MappedFile:
        """A new file at ``path``: created at its full size, mapped, its first disk blocks reserved (all of
        them and pre-written with ``warm``, until a taker hurries it). Raises OSError."""
        mapped_file = MappedFile(path, self.file_size, create=True)
        try:
            if warm:
                warm_mapped_file(mapped_file, self._hurry)
            else:
                mapped_file.reserve(min(self.file_size, RESERVE_CHUNK_SIZE))
        except BaseException:
            mapped_file.destroy()
            raise
        return mapped_file

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queue and not self._stopped:
                    self._condition.wait()
                if self._stopped:
                    return
                path = self._working = self._queue.pop(0)
                if path == self._wanted:
                    self._hurry.set()  # a taker waits for it: no warm-up
                else:
                    self._hurry.clear()
            result: MappedFile | Exception
            try:
                result = self._create(path, warm=self.warm)
                self.created += 1
            except Exception as exc:  # handed to the taker, which reports it
                log.warning("pre-allocating %s failed", path, exc_info=True)
                result = exc
            with self._condition:
                self._working = None
                if self._stopped or path not in self._requests:
                    if isinstance(result, MappedFile):
                        result.destroy()
                else:
                    self._requests[path] = result
                self._condition.notify_all()

    def cancel_all(self) -> None:
        """Forget every request: files already created are deleted, the one being created is deleted once
        done (this waits for it), queued ones are dropped (the commit log was cut: the pre-allocated next
        segment would lie past a gap). Blocking."""
        with self._condition:
            self._queue.clear()
            ready = [r for r in self._requests.values() if isinstance(r, MappedFile)]
            self._requests.clear()
            while self._working is not None:
                self._condition.wait()
        for mapped_file in ready:
            mapped_file.destroy()

    def shutdown(self, *, destroy_unused: bool = True) -> None:
        """Stop the thread; pre-allocated files nobody took are deleted (``destroy_unused``) or closed.
        Blocking."""
        with self._condition:
            self._stopped = True
            self._hurry.set()
            self._condition.notify_all()
        if self._started:
            self._thread.join(30)
        with self._condition:
            leftovers = [r for r in self._requests.values() if isinstance(r, MappedFile)]
            self._requests.clear()
            self._queue.clear()
        for mapped_file in leftovers:
            if destroy_unused:
                mapped_file.destroy()
            else:
                mapped_file.close()
