"""A new consume queue's directories and first file are made off the loop before its first put
(quasar.storage.queue_preparation, issue 21: topic creation by first use does no file work on the loop)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from quasar.storage import MessageStore, PutStatus
from quasar.storage.consume_queue import encode_topic_dir
from quasar.storage.mapped_file import MappedFile

from .conftest import abandon, body_for, open_store

NEW = "persistent://public/default/new-topic"


async def _started(root: Path) -> MessageStore:
    store = open_store(root)
    await store.start()
    return store


def _queue_dir(root: Path, topic: str) -> Path:
    return root / "consumequeue" / encode_topic_dir(topic) / "0"


async def test_prepared_queue_takes_its_first_puts_without_creating_a_file_on_the_loop(root, monkeypatch):
    store = await _started(root)
    created_on: list[str] = []
    real_init = MappedFile.__init__

    def spying_init(self, *args, **kwargs):
        if kwargs.get("create"):
            created_on.append(threading.current_thread().name)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(MappedFile, "__init__", spying_init)
    loop_thread = threading.current_thread().name
    await store.prepare_queue(NEW, 0)
    assert created_on and loop_thread not in created_on  # made on a worker thread
    assert sorted(p.name for p in _queue_dir(root, NEW).iterdir()) == [f"{0:020d}"]
    created_on.clear()
    results = [store.put(NEW, 0, body_for(i)) for i in range(5)]
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert created_on == []  # the puts found the file there
    await store.wait_flushed(results[-1].end_offset)
    assert [bytes(m.body) for m in store.get(NEW, 0, 0, 10).messages] == [body_for(i) for i in range(5)]
    await store.prepare_queue(NEW, 0)  # a queue with files: nothing to do, nothing changes
    assert store.max_queue_offset(NEW, 0) == 5
    await store.close()
    store = await _started(root)  # the prepared file is an ordinary queue file after a restart
    assert [bytes(m.body) for m in store.get(NEW, 0, 0, 10).messages] == [body_for(i) for i in range(5)]
    await store.close()


async def test_a_prepared_queue_never_written_comes_back_empty_after_a_crash(root):
    store = await _started(root)
    await store.prepare_queue(NEW, 0)
    last = store.put("persistent://public/default/other", 0, b"x")
    await store.wait_flushed(last.end_offset)
    abandon(store)  # SIGKILL: the prepared file holds zeros only
    store = await _started(root)
    assert store.max_queue_offset(NEW, 0) == 0
    first = store.put(NEW, 0, b"first")
    assert first.status is PutStatus.PUT_OK and first.queue_offset == 0
    await store.wait_flushed(first.end_offset)
    assert [bytes(m.body) for m in store.get(NEW, 0, 0, 10).messages] == [b"first"]
    await store.close()


async def test_a_failed_preparation_leaves_the_first_put_to_make_the_file(root, monkeypatch):
    store = await _started(root)

    def no_descriptors(self):
        raise OSError(24, "Too many open files")

    with monkeypatch.context() as patch:
        patch.setattr("quasar.storage.mapped_file_queue.MappedFileQueue.create_first_file", no_descriptors)
        await store.prepare_queue(NEW, 0)  # logged, not raised
    assert not any(_queue_dir(root, NEW).iterdir())  # directories made, no file
    result = store.put(NEW, 0, b"made by the put")
    assert result.status is PutStatus.PUT_OK and result.queue_offset == 0
    await store.close()


@pytest.mark.parametrize("topic", ["persistent://public/default/" + "long-" * 60])
async def test_a_hashed_topic_directory_gets_its_topic_file(root, topic):
    store = await _started(root)
    await store.prepare_queue(topic, 0)
    assert store.put(topic, 0, b"m").status is PutStatus.PUT_OK
    await store.close()
    store = await _started(root)  # found again by the name in its TOPIC file
    assert [bytes(m.body) for m in store.get(topic, 0, 0, 10).messages] == [b"m"]
    await store.close()


async def test_a_cancelled_preparation_still_adopts_its_file(root):
    store = await _started(root)
    waiter = asyncio.ensure_future(store.prepare_queue(NEW, 0))
    await asyncio.sleep(0)  # the worker thread is started
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    for _ in range(500):  # the thread finishes on its own; its file becomes the queue's
        if store.consume_queues.loaded_queue((NEW, 0)).mapped_file_queue.mapped_files:
            break
        await asyncio.sleep(0.01)
    result = store.put(NEW, 0, b"after a cancelled preparation")
    assert result.status is PutStatus.PUT_OK and result.queue_offset == 0
    await store.close()
