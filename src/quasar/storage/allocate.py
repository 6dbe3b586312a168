"""AllocateMappedFileService: creates the next commit log segment before it is needed (RocketMQ
``AllocateMappedFileService``, semantics.md A2/A7).

When the commit log rolls to segment *n*, :class:`~quasar.storage.mapped_file_queue.MappedFileQueue` takes it
from this service (already created, sized and mapped, so the append on the event loop does not wait for file
creation) and asks for segment *n + 1* in the background. With ``warm_mapped_file`` the thread also touches
one byte of every 4 KiB page (one strided slice assignment, no Python loop) after ``madvise(MADV_WILLNEED)``,
so the first writes into the new segment do not page-fault (RocketMQ ``warmMappedFile``; the file then holds
real blocks instead of a hole).

A pre-allocated segment lies past the end of the log and holds only zeros: if the process dies, recovery reads
it as "no data" and deletes it (``truncateDirtyFiles``), or keeps it empty as the next segment. Creation
errors (ENOSPC...) are remembered and re-raised to the caller that asks for that file, which then reports
``CREATE_MAPPED_FILE_FAILED``; the request is not retried in the background.
"""

from __future__ import annotations

import logging
import mmap
import threading
from pathlib import Path

from quasar.storage.mapped_file import OS_PAGE_SIZE, MappedFile

log = logging.getLogger(__name__)


def warm_mapped_file(mapped_file: MappedFile) -> None:
    """Reserve the whole file's disk blocks, then touch every page of ``mapped_file`` (write one zero byte per
    4 KiB page) after madvise WILLNEED. Only for a file nothing was written to yet. Blocking; raises OSError
    (``ENOSPC``) before touching anything."""
    mapped_file.reserve(mapped_file.file_size)  # disk blocks first: touching a hole on a full disk is SIGBUS
    mm = mapped_file._mmap
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
        try:
            mm.madvise(mmap.MADV_WILLNEED)
        except OSError as exc:  # advisory only
            log.debug("madvise(WILLNEED) on %s failed: %s", mapped_file.path, exc)
    buffer = mapped_file.buffer
    pages = len(buffer[::OS_PAGE_SIZE])
    buffer[::OS_PAGE_SIZE] = bytes(pages)


class AllocateMappedFileService:
    """Creates mapped files of ``file_size`` bytes on a background thread, one request at a time."""

    def __init__(
        self, file_size: int, *, warm: bool = False, name: str = "quasar-allocate-mapped-file"
    ) -> None:
        self.file_size = file_size
        self.warm = warm
        self._condition = threading.Condition()
        self._requests: dict[Path, MappedFile | BaseException | None] = {}
        """Requested paths: None while being created, then the file or the creation error."""
        self._queue: list[Path] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self.created = 0
        """Files created by the background thread (statistics, tests)."""
        self.hits = 0
        """Requests served by a file the thread had ready."""

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
        """The file at ``path``: the pre-allocated one (waiting for it if it is being created), or created
        now on the caller's thread. Raises OSError when creation fails."""
        with self._condition:
            if path in self._requests and self._started and not self._stopped:
                while self._requests[path] is None:
                    self._condition.wait()
            result = self._requests.pop(path, None)
            if path in self._queue:
                self._queue.remove(path)
        if isinstance(result, MappedFile):
            self.hits += 1
            return result
        if isinstance(result, BaseException):
            raise result
        return self._create(path)

    def _create(self, path: Path) -> MappedFile:
        mapped_file = MappedFile(path, self.file_size, create=True)
        if self.warm:
            try:
                warm_mapped_file(mapped_file)
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
                path = self._queue.pop(0)
            result: MappedFile | BaseException
            try:
                result = self._create(path)
                self.created += 1
            except BaseException as exc:  # handed to the taker
                log.warning("pre-allocating %s failed: %r", path, exc)
                result = exc
            with self._condition:
                if self._stopped or path not in self._requests:
                    if isinstance(result, MappedFile):
                        result.destroy()
                else:
                    self._requests[path] = result
                self._condition.notify_all()

    def shutdown(self, *, destroy_unused: bool = True) -> None:
        """Stop the thread; pre-allocated files nobody took are deleted (``destroy_unused``) or closed.
        Blocking."""
        with self._condition:
            self._stopped = True
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
