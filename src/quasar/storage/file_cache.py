"""MappedFileCache: a budget of open consume queue files, least recently used ones unmapped and closed first
(issue 21: file descriptors bounded with many topics).

Every consume queue file that is mapped holds a file descriptor (the duplicate ``mmap`` keeps; the file's own
is closed once mapped) and a memory mapping with its page tables; with one file per topic, 100,000 topics would
need 100,000 descriptors and more mappings than Linux allows by default (65,530). The store
counts its mapped consume queue files here: when more than ``budget`` are mapped, the least recently used ones
are unmapped and closed (:meth:`MappedFile.unmap <quasar.storage.mapped_file.MappedFile.unmap>`), and mapped
again on demand (read path, put path, recovery, retention). Commit log segments are few and large and stay
mapped; they are not counted.

What "used" means, without a cost on the publish path: a read (``get``), a put that had to prepare its file
(a new file, new disk blocks, or a file that was unmapped) and a mapping mark a file recently used. Puts into a
file that is mapped and has disk blocks do not touch the cache; instead eviction gives a file written since it
was last marked a second chance (CLOCK), so a queue being written to keeps its file.

A file is skipped, not closed, when a view of its mapping is still alive (``BufferError``: a reader holds a
slice; it is closed by a later eviction) or a flush is syncing it. Eviction runs only on the owner thread (the
thread that writes the files: the event loop thread once the store is started, the opening thread before);
other threads that read a file (the clean thread) do so under :attr:`lock`, which eviction also holds, and read
an unmapped file with ``pread`` instead of mapping it.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from quasar.storage.mapped_file import MappedFile

log = logging.getLogger(__name__)

__all__ = ["SECOND_CHANCES", "MappedFileCache"]

SECOND_CHANCES = 16
"""Files written since last marked that one eviction call moves to the recent end before it unmaps the least
recently used file anyway."""


class MappedFileCache:
    """At most ``budget`` mapped files (more only while every other one is in use); see the module
    docstring. ``budget`` must be positive (ValueError)."""

    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError(f"the open file budget must be positive: {budget}")
        self.budget = budget
        self._files: OrderedDict[MappedFile, int] = OrderedDict()
        """Mapped files, least recently used first, with their ``wrote_position`` when last marked."""
        self.lock = threading.RLock()
        """Held by eviction and by any thread other than the owner while it reads a mapping."""
        self.owner = threading.get_ident()
        """Thread id that may evict (set by :meth:`set_owner`)."""
        self.evictions = 0
        """Files unmapped to stay within the budget so far."""
        self.remaps = 0
        """Files mapped again on demand so far."""

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, mapped_file: object) -> bool:
        return mapped_file in self._files

    def set_owner(self, budget: int | None = None) -> None:
        """Make the calling thread the one that evicts (the store's ``open()`` and ``start()``); a ``budget``
        given replaces the budget (ValueError when not positive)."""
        if budget is not None:
            if budget < 1:
                raise ValueError(f"the open file budget must be positive: {budget}")
            self.budget = budget
        self.owner = threading.get_ident()

    def add(self, mapped_file: MappedFile) -> None:
        """Count a newly mapped file (created or opened; advised random access, see
        :meth:`MappedFile.advise_random <quasar.storage.mapped_file.MappedFile.advise_random>`), then evict
        over the budget (never this file)."""
        mapped_file.advise_random()
        with self.lock:
            mapped_file.cache = self
            self._files[mapped_file] = mapped_file.wrote_position
            self._files.move_to_end(mapped_file)
        if len(self._files) > self.budget:
            self.evict(keep=mapped_file)

    def use(self, mapped_file: MappedFile) -> None:
        """Make sure ``mapped_file`` is mapped (mapping it again, then evicting over the budget) and mark it
        recently used. Owner thread. Raises OSError when it cannot be mapped (EMFILE, ENOMEM)."""
        if mapped_file.is_mapped:
            with self.lock:
                if mapped_file in self._files:
                    self._files[mapped_file] = mapped_file.wrote_position
                    self._files.move_to_end(mapped_file)
            return
        with self.lock:  # another thread may be reading it under the lock
            mapped_file.remap()
            self.remaps += 1
        self.add(mapped_file)

    def forget(self, mapped_file: MappedFile) -> None:
        """Stop counting a file (closed or destroyed). Any thread."""
        with self.lock:
            self._files.pop(mapped_file, None)

    def evict(self, keep: MappedFile | None = None) -> int:
        """Unmap least recently used files until at most ``budget`` are mapped; returns how many. Files in use
        (``keep``, a live view, a flush) are skipped; a file written since last marked gets a second chance,
        at most :data:`SECOND_CHANCES` of them per call (so a call costs a few steps even when every file is
        being written, the case of more queues written round-robin than the budget). Does nothing on a thread
        other than the owner."""
        if threading.get_ident() != self.owner:
            return 0
        evicted = 0
        chances = SECOND_CHANCES
        with self.lock:
            files = self._files
            steps = 2 * len(files) + 1  # a pass of second chances, then one that unmaps (all may be in use)
            while len(files) > self.budget and steps > 0:
                steps -= 1
                mapped_file, mark = next(iter(files.items()))
                if mapped_file is keep or (mapped_file.wrote_position != mark and chances > 0):
                    if mapped_file is not keep:
                        chances -= 1
                    files[mapped_file] = mapped_file.wrote_position
                    files.move_to_end(mapped_file)
                elif not mapped_file.is_mapped:  # closed behind our back
                    del files[mapped_file]
                elif mapped_file.unmap():
                    del files[mapped_file]
                    evicted += 1
                else:
                    files.move_to_end(mapped_file)
        self.evictions += evicted
        return evicted
