"""Deleting a consume queue (a deleted topic): files go, queue offsets are never reused, crashes lose nothing
else (quasar.storage.queue_deletion)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quasar.storage import ConsumeQueueDeletingError, MessageStore, PutStatus, StoreNotWritableError
from quasar.storage.consume_queue import ConsumeQueue, encode_topic_dir

from .conftest import CQ_FILE_SIZE, abandon, body_for, open_store

DELETED = "persistent://public/default/deleted"
KEPT = "persistent://public/default/kept"
UNITS_PER_FILE = CQ_FILE_SIZE // 20


async def _started(root: Path) -> MessageStore:
    store = open_store(root)
    await store.start()
    return store


async def _fill(store: MessageStore, count: int) -> None:
    """``count`` records to DELETED and to KEPT, interleaved, flushed."""
    last = None
    for i in range(count):
        assert store.put(DELETED, 0, body_for(i)).status is PutStatus.PUT_OK
        last = store.put(KEPT, 0, body_for(i))
    assert last is not None
    await store.wait_flushed(last.end_offset)
    store.flush_consume_queues()


def _queue_files(root: Path, topic: str) -> list[str]:
    path = root / "consumequeue" / encode_topic_dir(topic) / "0"
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def _kept_bodies(store: MessageStore, count: int) -> list[bytes]:
    return [bytes(m.body) for m in store.get(KEPT, 0, 0, count).messages]


async def test_deleted_queue_loses_its_files_and_keeps_its_offsets(root: Path):
    store = await _started(root)
    await _fill(store, 25)  # 3 consume queue files of 10 units
    assert len(_queue_files(root, DELETED)) == 3
    assert await store.delete_queue(DELETED, 0) == 25
    # one file of pre-blank units up to offset 25 is all that is left; nothing is readable
    assert _queue_files(root, DELETED) == [f"{2 * CQ_FILE_SIZE:020d}"]
    assert store.min_queue_offset(DELETED, 0) == store.max_queue_offset(DELETED, 0) == 25
    assert store.get(DELETED, 0, 0, 100).messages == []
    # the same name goes on at offset 25, never at 0; the other topic is untouched
    again = store.put(DELETED, 0, b"after the deletion")
    assert again.status is PutStatus.PUT_OK and again.queue_offset == 25
    assert [bytes(m.body) for m in store.get(DELETED, 0, 25, 100).messages] == [b"after the deletion"]
    assert _kept_bodies(store, 100) == [body_for(i) for i in range(25)]
    await store.close()

    reopened = await _started(root)
    assert reopened.recovery is not None and reopened.recovery.reason != "consume queues short of the checkpoint"
    assert reopened.min_queue_offset(DELETED, 0) == 25
    assert [bytes(m.body) for m in reopened.get(DELETED, 0, 25, 100).messages] == [b"after the deletion"]
    assert _kept_bodies(reopened, 100) == [body_for(i) for i in range(25)]
    await reopened.close()


async def test_a_queue_deleted_at_a_file_boundary_and_an_unknown_queue(root: Path):
    store = await _started(root)
    await _fill(store, 2 * UNITS_PER_FILE)
    assert await store.delete_queue(DELETED, 0) == 20
    assert store.max_queue_offset(DELETED, 0) == 20
    assert store.put(DELETED, 0, b"x").queue_offset == 20
    assert await store.delete_queue("persistent://public/default/never-written", 0) == 0
    await store.close()


async def test_a_crash_after_the_deletion_resurrects_nothing(root: Path):
    store = await _started(root)
    await _fill(store, 25)
    await store.delete_queue(DELETED, 0)
    tail = [store.put(KEPT, 0, b"late-%d" % i) for i in range(5)]  # past the checkpoint: re-dispatched
    await store.wait_flushed(tail[-1].end_offset)
    abandon(store)

    recovered = open_store(root)
    assert recovered.last_exit_ok is False
    assert recovered.min_queue_offset(DELETED, 0) == recovered.max_queue_offset(DELETED, 0) == 25
    assert recovered.get(DELETED, 0, 0, 100).messages == []
    assert _kept_bodies(recovered, 100) == [body_for(i) for i in range(25)] + [b"late-%d" % i for i in range(5)]
    recovered.close_sync()


async def test_a_crash_in_the_middle_of_a_deletion_keeps_the_offsets_taken(root: Path):
    """Files unlinked, the pre-blank file not written yet: recovery rebuilds the queue from the commit log
    with its old offsets, so the same name still goes on past them."""
    store = await _started(root)
    await _fill(store, 25)
    queue = store.consume_queues.get(DELETED, 0)
    assert queue is not None
    store.consume_queues.mark_deletion(DELETED, 0)
    abandon(store)
    survivor = ConsumeQueue(root / "consumequeue", DELETED, 0, CQ_FILE_SIZE)
    survivor.load()
    survivor.destroy()  # what step 2 of the deletion leaves: the marker, no files

    recovered = open_store(root)
    assert recovered.recovery is not None and recovered.recovery.reason == "consume queues short of the checkpoint"
    assert not list((root / "consumequeue").glob(".deleting-*"))  # recovered: the marker went
    assert recovered.max_queue_offset(DELETED, 0) == 25
    assert recovered.put(DELETED, 0, b"next").queue_offset == 25
    recovered.close_sync()


async def test_a_failed_deletion_refuses_puts_until_it_is_retried(root: Path, monkeypatch: pytest.MonkeyPatch):
    store = await _started(root)
    await _fill(store, 15)
    calls = 0
    real_restart = ConsumeQueue.restart_at

    def failing_once(self: ConsumeQueue, queue_offset: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(28, "No space left on device")
        real_restart(self, queue_offset)

    monkeypatch.setattr(ConsumeQueue, "restart_at", failing_once)
    with pytest.raises(OSError):
        await store.delete_queue(DELETED, 0)
    # half deleted: never restarted at 0, puts to it are refused, everything else goes on
    with pytest.raises(ConsumeQueueDeletingError):
        store.put(DELETED, 0, b"too early")
    assert store.put(KEPT, 0, b"fine").status is PutStatus.PUT_OK
    assert await store.delete_queue(DELETED, 0) == 15
    assert store.put(DELETED, 0, b"now").queue_offset == 15
    await store.close()


async def test_deleting_twice_at_once_and_on_a_closed_or_replica_store(root: Path):
    store = await _started(root)
    await _fill(store, 5)
    assert store.consume_queues.mark_deleting((DELETED, 0))
    with pytest.raises(ConsumeQueueDeletingError):
        await store.delete_queue(DELETED, 0)
    store.consume_queues.unmark_deleting((DELETED, 0))
    store.set_replica_mode(True)
    with pytest.raises(StoreNotWritableError):
        await store.delete_queue(DELETED, 0)
    store.set_replica_mode(False)
    await store.close()
