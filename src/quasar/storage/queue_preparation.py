"""QueuePreparation: a new consume queue's directories and first file are made on a worker thread before its
first put (issue 21: topic creation by first use does no file work on the event loop).

Without it, the first put into a new queue creates the topic and queue directories and the first file where
the put runs, on the loop (two ``mkdir``, an ``open(O_CREAT)``, ``ftruncate``, ``mmap`` and a first
``posix_fallocate``: ~0.2 ms at best, 10-40 ms while the ext4 journal is busy with other fsyncs). The managed
ledger knows when it opens a ledger that is new, before any add can reach the store, and asks for the queue's
first file then (:meth:`QueuePreparation.prepare_queue`); the commit log's next segment comes from a thread in
the same way (``allocate.py``, RocketMQ ``AllocateMappedFileService``).

The worker thread touches only the file system; the queue is looked up and the file adopted on the loop
thread, so no store structure is shared with the thread. Should a put reach the queue meanwhile and create the
file first, the thread's ``O_EXCL`` create fails and the put's file stays (and the other way round the put
gets ``CREATE_MAPPED_FILE_FAILED``, a transient refusal; the managed ledger never puts before its open
returns). Nothing here is needed for correctness: when preparation fails (a full disk, no descriptor) it is
logged at DEBUG and the first put makes the file as before and reports what fails. The new directories are
fsynced by the next consume queue flush, as for a queue a put created.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from quasar.storage.consume_queue import ConsumeQueue
from quasar.storage.consume_queue_store import ConsumeQueueStore
from quasar.storage.errors import StorageError
from quasar.storage.mapped_file import MappedFile

__all__ = ["QueuePreparation"]

log = logging.getLogger(__name__)


class QueuePreparation:
    """Prepares new consume queues of one store (``consume_queues``). Loop thread."""

    def __init__(self, consume_queues: ConsumeQueueStore) -> None:
        self._queues = consume_queues
        self._preparing: set[tuple[str, int]] = set()

    async def prepare_queue(self, topic: str, queue_id: int) -> None:
        """Make the first file of queue (``topic``, ``queue_id``) on a worker thread when the queue has none
        yet (a new topic); a no-op for a queue with files (loaded, or found on disk: it is loaded now, on the
        loop, as its first put would) and while a preparation of it runs. Never raises for a store-side
        failure (logged at DEBUG; the first put then creates the file and reports any error);
        ``asyncio.CancelledError`` propagates, and the file made meanwhile is still adopted (or closed)
        when the thread is done."""
        key = (topic, queue_id)
        if key in self._preparing:
            return
        try:
            queue = self._queues.find_or_create(topic, queue_id)
        except StorageError as exc:  # being deleted, unreadable files: the put reports it
            log.debug("consume queue %s/%d not prepared: %s", topic, queue_id, exc)
            return
        if queue.mapped_file_queue.mapped_files or queue.min_offset:
            return
        self._preparing.add(key)
        made = asyncio.get_running_loop().run_in_executor(None, queue.create_first_file)
        made.add_done_callback(functools.partial(self._made, key, queue))
        # _made runs first (registered first); a cancelled caller leaves the file to it, never orphaned
        await asyncio.wait((made,))

    def _made(self, key: tuple[str, int], queue: ConsumeQueue, made: asyncio.Future[MappedFile]) -> None:
        """On the loop once the worker thread is done: adopt its file, or note what it did not make."""
        self._preparing.discard(key)
        exc = made.exception()
        if exc is not None:
            log.debug("consume queue %s/%d: first file not made ahead: %s", key[0], key[1], exc)
            queue.first_file_not_made()
            return
        mapped_file = made.result()
        if self._queues.loaded_queue(key) is queue and not queue.mapped_file_queue.mapped_files:
            queue.adopt_first_file(mapped_file)
        else:  # deleted or closed meanwhile: the file is not the queue's
            mapped_file.close()
