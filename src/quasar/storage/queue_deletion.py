"""QueueDeletion: delete one consume queue's files while keeping its queue offsets (RocketMQ
``DefaultMessageStore.deleteTopics``, which destroys a topic's consume queues; Pulsar's topic deletion reaches
the store through it).

A queue offset is never reused: the commit log keeps the deleted queue's records until retention reclaims their
segments, each record carries its queue offset, and recovery re-dispatches records past the checkpoint. A queue
that came back at offset 0 would take those records in after a crash. So deleting a queue of ``N`` units
destroys its files and leaves an empty queue that starts at ``N``: one consume queue file holding pre-blank
units up to ``N`` (the same shape as a queue whose old files retention deleted, RocketMQ ``fillPreBlank``),
fsynced with its directories before :meth:`QueueDeletion.delete_queue` returns. The managed ledger created
later under the same name starts at the store's end of the queue, ``N``, so nothing of the old topic is ever
read through it.

Crash safety, step by step (each step durable before the next):
1. the queue is detached on the loop thread (a put to it meanwhile raises ``ConsumeQueueDeletingError``);
2. a marker file is written in ``consumequeue/`` (``ConsumeQueueStore.mark_deletion``), then the queue's files
   and directory are unlinked (a crash here: the marker makes recovery count every queue's units, it finds
   fewer than the checkpoint says and rebuilds every queue from the commit log, the deleted one included, with
   its old offsets: nothing is lost and no offset is reused; only the disk space waits for retention);
3. the pre-blank file is written and fsynced, the checkpoint's unit count lowered by the units deleted below
   it, then the marker is removed (a crash before that: the count matches, nothing is rebuilt);
4. the empty queue is attached again on the loop thread.
A deletion that fails part-way (an OSError) leaves the queue detached and refusing puts, never restarted at
offset 0: calling :meth:`QueueDeletion.delete_queue` again finishes it.
The consume queue flush thread and the clean thread are held off for the duration (their locks), so no flush
or retention round touches a file being deleted.

Files are deleted on a worker thread (``asyncio.to_thread``): the event loop only detaches and attaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from quasar.storage.checkpoint import StoreCheckpoint
from quasar.storage.consume_queue import ConsumeQueue
from quasar.storage.errors import ConsumeQueueDeletingError, StoreClosedError, StoreNotWritableError
from quasar.storage.store_parts import StoreParts

log = logging.getLogger(__name__)

__all__ = ["QueueDeletion"]

class QueueDeletion:
    """Deletes consume queues of one store; given the store's parts, a way to run a callable on its loop thread
    (``run_on_loop``), the consume queue flush lock holder (``hold_flushes``: a context manager factory), the
    clean lock and the checkpoint getter."""

    def __init__(
        self,
        parts: StoreParts,
        run_on_loop: Callable[[Callable[[], Any]], Any],
        hold_flushes: Callable[[], contextlib.AbstractContextManager[None]],
        clean_lock: threading.Lock,
        checkpoint: Callable[[], StoreCheckpoint | None],
    ) -> None:
        self._parts = parts
        self._run_on_loop = run_on_loop
        self._hold_flushes = hold_flushes
        self._clean_lock = clean_lock
        self._checkpoint = checkpoint
        self._failed: dict[tuple[str, int], int] = {}
        """Queues whose deletion failed part-way, with their end: still refused to puts, retried by the next
        :meth:`delete_queue` of the same queue."""
        self._running: set[tuple[str, int]] = set()

    async def delete_queue(self, topic: str, queue_id: int) -> int:
        """Delete the consume queue of ``(topic, queue_id)``: its files go, its queue offsets stay taken (module
        docstring). Returns the queue offset the empty queue now starts at (the old end; 0 when the queue did
        not exist, in which case nothing is written). Loop thread; the file work runs on a worker thread.

        Raises :class:`StoreClosedError` when the store is not open, :class:`StoreNotWritableError` on a replica
        (it follows its master's files) or when the store refuses writes, :class:`ConsumeQueueDeletingError`
        when a deletion of it runs already, OSError when a file cannot be deleted or written (the store stays
        usable; puts to that queue are refused until a later ``delete_queue`` of it succeeds).
        """
        state = self._parts.state
        if not state.is_open:
            raise StoreClosedError(f"the message store is {state.phase}")
        if state.replica:
            raise StoreNotWritableError("a replica store follows its master: consume queues are not deleted here")
        if not state.writable:
            raise StoreNotWritableError("the message store refuses writes after an I/O failure")
        key = (topic, queue_id)
        retry_end = self._failed.get(key)
        if retry_end is None:
            if self._parts.consume_queues.get(topic, queue_id) is None:
                return 0
            if not self._parts.consume_queues.mark_deleting(key):
                raise ConsumeQueueDeletingError(f"consume queue {topic}/{queue_id} is already being deleted")
        elif key in self._running:
            raise ConsumeQueueDeletingError(f"consume queue {topic}/{queue_id} is already being deleted")
        self._running.add(key)
        try:
            end = await asyncio.to_thread(self._delete_blocking, topic, queue_id, retry_end)
        finally:
            self._running.discard(key)
        # only now: after a failure the queue stays marked, puts to it are refused until a retry succeeds, so a
        # half-deleted queue never restarts at offset 0
        self._failed.pop(key, None)
        self._parts.consume_queues.unmark_deleting(key)
        return end

    def _delete_blocking(self, topic: str, queue_id: int, retry_end: int | None) -> int:
        parts = self._parts
        root, file_size = parts.consume_queues.root, parts.consume_queues.mapped_file_size
        with self._hold_flushes(), self._clean_lock:
            if retry_end is None:
                old: ConsumeQueue | None = self._run_on_loop(lambda: self._detach(topic, queue_id))
                if old is None:
                    return 0
                end = old.max_offset
                checkpoint = self._checkpoint()
                below = old.count_units_below(checkpoint.logics_flushed_offset) if checkpoint is not None else 0
            else:  # what an earlier, failed deletion left on disk
                old, end, checkpoint, below = ConsumeQueue(root, topic, queue_id, file_size), retry_end, None, 0
                old.load()
            self._failed[(topic, queue_id)] = end
            marker = parts.consume_queues.mark_deletion(topic, queue_id)
            old.destroy()
            fresh = ConsumeQueue(root, topic, queue_id, file_size)
            if end > 0:
                fresh.restart_at(end)
                fresh.flush(0)
            if checkpoint is not None and below:
                checkpoint.logics_flushed_units = max(0, checkpoint.logics_flushed_units - below)
                checkpoint.flush()
            marker.unlink(missing_ok=True)  # a leftover only makes the next recovery count every queue
            self._run_on_loop(lambda: parts.consume_queues.attach(fresh))
        log.info("consume queue %s/%d deleted; its queue offsets continue at %d", topic, queue_id, end)
        return end

    def _detach(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Loop thread: take the queue out of the store and the write path, and its units out of the
        writer's dispatch mark."""
        queue = self._parts.consume_queues.detach(topic, queue_id)
        if queue is not None:
            writer = self._parts.writer
            writer.forget_queue(topic, queue_id)
            offset, units = writer.dispatch_mark
            writer.dispatch_mark = (offset, max(0, units - (queue.max_offset - queue.min_offset)))
        return queue
