"""Flush policies: SYNC group commit (shared fsyncs, ordering, timeout, failure) and ASYNC."""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest

from quasar.storage import FlushDiskType, PutStatus, StoreClosedError
from quasar.storage import flush as flush_module
from quasar.storage import mapped_file as mapped_file_module

from .conftest import body_for, open_store

TOPIC = "persistent://public/default/flush"


class SyncCounter:
    """Wraps ``fdatasync``: counts calls per thread name, can block or fail them."""

    def __init__(self) -> None:
        self.real = mapped_file_module.fdatasync
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.error: OSError | None = None
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.threads.append(threading.current_thread().name)
        self.gate.wait(10)
        if self.error is not None:
            raise self.error
        self.real(fd)

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for thread in self.threads if thread == name)


@pytest.fixture
def syncs(monkeypatch) -> SyncCounter:
    counter = SyncCounter()
    monkeypatch.setattr(mapped_file_module, "fdatasync", counter)
    return counter


async def test_group_commit_shares_fsyncs_and_resolves_in_offset_order(root: Path, syncs: SyncCounter):
    store = open_store(root)
    await store.start()
    completed: list[int] = []

    async def put(i: int) -> None:
        result = await store.put_and_wait(TOPIC, i % 4, body_for(i))
        assert result.status is PutStatus.PUT_OK
        completed.append(result.commit_log_offset)

    await asyncio.gather(*(put(i) for i in range(300)))
    assert completed == sorted(completed) and len(completed) == 300
    rounds = syncs.count("quasar-group-commit")
    assert 1 <= rounds < 300  # many appends, far fewer fsyncs
    assert store.flushed_commit_log_offset == store.max_commit_log_offset
    assert "MainThread" not in syncs.threads  # fsync never runs on the event loop thread
    await store.close()


async def test_wait_flushed_futures_complete_in_offset_order(root: Path, syncs: SyncCounter):
    store = open_store(root)
    await store.start()
    syncs.gate.clear()  # hold the flush thread inside its fdatasync
    order: list[int] = []
    futures = []
    for i in range(50):
        result = store.put(TOPIC, 0, body_for(i))
        future = asyncio.ensure_future(store.wait_flushed(result.end_offset))
        future.add_done_callback(lambda f, end=result.end_offset: order.append(end))
        futures.append(future)
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in futures)  # nothing is durable yet
    syncs.gate.set()
    assert set(await asyncio.gather(*futures)) == {PutStatus.PUT_OK}
    assert order == sorted(order)
    already = store.wait_flushed(store.flushed_commit_log_offset)
    assert await already is PutStatus.PUT_OK
    await store.close()


async def test_waiters_past_the_deadline_get_flush_disk_timeout(root: Path, syncs: SyncCounter):
    store = open_store(root, sync_flush_timeout_ms=50)
    await store.start()
    syncs.gate.clear()  # the disk hangs
    statuses = await asyncio.gather(*(store.put_and_wait(TOPIC, 0, body_for(i)) for i in range(5)))
    assert [r.status for r in statuses] == [PutStatus.FLUSH_DISK_TIMEOUT] * 5
    assert statuses[0].commit_log_offset == 0  # written, only not known durable
    syncs.gate.set()
    later = await store.put_and_wait(TOPIC, 0, b"after")
    assert later.status is PutStatus.PUT_OK and later.queue_offset == 5
    await store.close()


async def test_failed_fsync_fails_waiters_and_stops_writes(root: Path, syncs: SyncCounter):
    store = open_store(root)
    await store.start()
    syncs.error = OSError(errno.EIO, "I/O error")
    result = await store.put_and_wait(TOPIC, 0, b"doomed")
    assert result.status is PutStatus.UNKNOWN_ERROR
    assert not store.writable
    assert store.put(TOPIC, 0, b"refused").status is PutStatus.SERVICE_NOT_AVAILABLE
    syncs.error = None
    await store.close()
    assert (root / "abort").exists()  # not a clean close: the next open recovers abnormally
    store = open_store(root)
    assert store.last_exit_ok is False
    assert [bytes(m.body) for m in store.get(TOPIC, 0, 0, 10).messages] == [b"doomed"]
    store.close_sync()


async def test_async_flush_resolves_at_once_and_flushes_in_the_background(root: Path, syncs: SyncCounter):
    store = open_store(
        root, flush_disk_type=FlushDiskType.ASYNC_FLUSH, flush_interval_ms=10, flush_thorough_interval_ms=20
    )
    await store.start()
    result = store.put(TOPIC, 0, b"x")
    waiter = store.wait_flushed(result.end_offset)
    assert waiter.done() and waiter.result() is PutStatus.PUT_OK  # no disk wait in ASYNC mode
    assert (await store.put_and_wait(TOPIC, 0, b"y")).status is PutStatus.PUT_OK
    for _ in range(500):  # the flush thread catches up within a thorough interval
        if store.flushed_commit_log_offset == store.max_commit_log_offset:
            break
        await asyncio.sleep(0.01)
    assert store.flushed_commit_log_offset == store.max_commit_log_offset
    assert syncs.count("quasar-flush-commitlog") >= 1 and "MainThread" not in syncs.threads
    await store.close()


async def test_close_releases_pending_waiters(root: Path, syncs: SyncCounter):
    store = open_store(root)
    await store.start()
    syncs.gate.clear()
    results = [store.put(TOPIC, 0, body_for(i)) for i in range(10)]
    waiters = [asyncio.ensure_future(store.wait_flushed(r.end_offset)) for r in results]
    await asyncio.sleep(0.02)
    syncs.gate.set()
    await store.close()
    assert [w.result() for w in waiters] == [PutStatus.PUT_OK] * 10


async def test_wait_flushed_needs_a_started_store(root: Path):
    store = open_store(root)
    result = store.put(TOPIC, 0, b"x")
    with pytest.raises(StoreClosedError):
        store.wait_flushed(result.end_offset)
    store.close_sync()


async def test_consume_queue_flush_thread_advances_the_checkpoint(root: Path):
    store = open_store(root, flush_consume_queue_interval_ms=10, flush_consume_queue_thorough_interval_ms=10)
    await store.start()
    last = None
    for i in range(30):
        last = await store.put_and_wait(TOPIC, i % 2, body_for(i))
    for _ in range(500):
        if store.checkpoint.logics_flushed_offset == last.end_offset:
            break
        await asyncio.sleep(0.01)
    assert store.checkpoint.logics_flushed_offset == last.end_offset
    assert store.checkpoint.logics_flushed_units == 30
    await store.close()


async def test_waiters_are_released_when_another_flusher_synced_first(root: Path):
    store = open_store(root, sync_flush_timeout_ms=3000)
    await store.start()
    await asyncio.sleep(0.05)  # let the group commit thread finish its first (empty) round
    result = store.put(TOPIC, 0, b"x")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, store.flush)  # e.g. a checkpoint round synced the commit log already
    assert store.flushed_commit_log_offset == result.end_offset
    assert await store.wait_flushed(result.end_offset) is PutStatus.PUT_OK
    await store.close()


async def test_on_flushed_callbacks_run_after_the_fsync_in_offset_order_never_inline(
    root: Path, syncs: SyncCounter
):
    store = open_store(root)
    await store.start()
    syncs.gate.clear()  # hold the group commit's fdatasync
    told: list[tuple[int, PutStatus]] = []
    results = [store.put(TOPIC, i % 3, body_for(i)) for i in range(50)]
    for result in results:
        store.on_flushed(result.end_offset, lambda status, end=result.end_offset: told.append((end, status)))
    await asyncio.sleep(0.05)
    assert told == []  # nothing before the fsync
    syncs.gate.set()
    for _ in range(500):
        if len(told) == 50:
            break
        await asyncio.sleep(0.01)
    assert told == [(r.end_offset, PutStatus.PUT_OK) for r in results]
    late: list[PutStatus] = []
    store.on_flushed(results[0].end_offset, late.append)  # already durable: answered, but not inline
    assert late == []
    await asyncio.sleep(0)
    assert late == [PutStatus.PUT_OK]
    await store.close()


async def test_on_flushed_in_async_mode_answers_on_the_next_iteration(root: Path):
    store = open_store(root, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    await store.start()
    told: list[PutStatus] = []
    store.on_flushed(store.put(TOPIC, 0, b"x").end_offset, told.append)
    assert told == []
    await asyncio.sleep(0)
    assert told == [PutStatus.PUT_OK]
    await store.close()
    with pytest.raises(StoreClosedError):
        store.on_flushed(1, told.append)


async def test_a_failing_flush_callback_does_not_strand_the_others(root: Path, caplog):
    store = open_store(root)
    await store.start()
    told: list[PutStatus] = []

    def broken(status: PutStatus) -> None:
        raise RuntimeError("a waiter's bug")

    first = store.put(TOPIC, 0, b"x")
    second = store.put(TOPIC, 0, b"y")
    store.on_flushed(first.end_offset, broken)
    store.on_flushed(second.end_offset, told.append)
    for _ in range(500):
        if told:
            break
        await asyncio.sleep(0.01)
    assert told == [PutStatus.PUT_OK]
    assert "a flush callback failed" in caplog.text
    await store.close()


async def test_the_flush_latency_observer_hears_each_group_commit_round_on_the_loop(
    root: Path, syncs: SyncCounter
):
    """Metrics: every round that advanced the flushed offset reports its fdatasync time (seconds), on the event
    loop thread, never for a round that had nothing to sync."""
    store = open_store(root)
    await store.start()
    heard: list[tuple[float, str]] = []
    store.flusher.latency_observer = lambda seconds: heard.append((seconds, threading.current_thread().name))
    for i in range(3):
        assert (await store.put_and_wait(TOPIC, 0, body_for(i))).status is PutStatus.PUT_OK
    assert 1 <= len(heard) <= 3
    assert all(seconds >= 0 and thread == "MainThread" for seconds, thread in heard)
    rounds = store.flusher.group_commit_rounds
    await asyncio.sleep(0.1)  # idle group commit wake-ups sync nothing: no more observations
    assert len(heard) <= rounds
    await store.close()


async def test_a_sync_flush_put_wakes_the_group_commit_instead_of_waiting_for_its_tick(
    root: Path, syncs: SyncCounter, monkeypatch
):
    """The sync send's latency (docs/rocketmq-benchmark.md, "Sync send latency"): a SYNC_FLUSH put wakes the
    group commit thread itself, so its receipt waits for one fdatasync, never for the thread's idle tick
    (``GROUP_COMMIT_WAIT_S``, stretched here to a minute: every put below would time out if it waited)."""
    monkeypatch.setattr(flush_module, "GROUP_COMMIT_WAIT_S", 60.0)
    store = open_store(root)
    await store.start()
    for i in range(5):  # one at a time, as sync sends: each needs its own round
        result = await asyncio.wait_for(store.put_and_wait(TOPIC, 0, body_for(i)), 20)
        assert result.status is PutStatus.PUT_OK
        assert store.flushed_commit_log_offset >= result.commit_log_offset
    assert syncs.count("quasar-group-commit") >= 5
    await store.close()
