"""Bounded file descriptors and lazily loaded consume queues (issue 21): the mapped consume queue files are an
LRU cache with a budget, queues load when first used, recovery touches only queues with records past the
checkpoint, and retention still keeps what unloaded queues need."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from quasar.storage import ConsumeQueueUnavailableError, MessageStore, PutStatus
from quasar.storage.config import consume_queue_file_budget
from quasar.storage.consume_queue import CQ_STORE_UNIT_SIZE

from .conftest import CQ_FILE_SIZE, abandon, body_for, make_config, open_store

BUDGET = 8
UNITS_PER_FILE = CQ_FILE_SIZE // CQ_STORE_UNIT_SIZE


def topic(i: int) -> str:
    return f"persistent://public/default/budget-{i}"


def mapped_queue_files(root: Path) -> set[str]:
    """Consume queue files of ``root`` this process has mapped (from ``/proc/self/maps``)."""
    prefix = str(root / "consumequeue")
    return {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if prefix in line}


def open_queue_fds(root: Path) -> int:
    """Descriptors of this process open on consume queue files of ``root``."""
    prefix = str(root / "consumequeue")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                count += 1
        except OSError:
            continue
    return count


def bodies(store: MessageStore, name: str, start: int = 0) -> list[bytes]:
    return [bytes(m.body) for m in store.get(name, 0, start, 10_000, 10**9).messages]


def test_the_budget_holds_under_puts_and_gets_across_many_queues(root: Path):
    store = open_store(root, max_open_consume_queue_files=BUDGET)
    queues, rounds = 40, 25  # 3 files per queue: 120 files in all
    written: dict[int, list[bytes]] = {i: [] for i in range(queues)}
    for r in range(rounds):
        for i in range(queues):
            body = body_for(r * queues + i)
            assert store.put(topic(i), 0, body).status is PutStatus.PUT_OK
            written[i].append(body)
            assert len(store.file_cache) <= BUDGET
        if r % 5 == 4:  # reads between the writes map files again
            for i in range(0, queues, 3):
                assert bodies(store, topic(i)) == written[i]
                assert len(store.file_cache) <= BUDGET
    # what the kernel says: at most BUDGET files mapped, one descriptor each (the mapping's)
    assert len(mapped_queue_files(root)) <= BUDGET
    assert open_queue_fds(root) <= BUDGET
    assert store.file_cache.evictions > 0 and store.file_cache.remaps > 0
    for i in range(queues):
        assert bodies(store, topic(i)) == written[i]
    store.close_sync()
    store = open_store(root, max_open_consume_queue_files=BUDGET)
    for i in range(queues):
        assert bodies(store, topic(i)) == written[i]
        assert len(store.file_cache) <= BUDGET
    store.close_sync()


def test_a_file_with_a_live_view_is_not_closed_and_goes_later(root: Path):
    store = open_store(root, max_open_consume_queue_files=2)
    assert store.put(topic(0), 0, b"held").status is PutStatus.PUT_OK
    queue = store.consume_queues.get(topic(0), 0)
    assert queue is not None
    held_file = queue.mapped_file_queue.mapped_files[0]
    view = queue.read_units(0, 1)  # a reader's slice of the mapping
    assert view is not None
    expected = bytes(view)
    for i in range(1, 6):  # more files than the budget
        store.put(topic(i), 0, body_for(i))
        store.get(topic(i), 0, 0, 1)
    assert held_file.is_mapped  # skipped by eviction: closing it would invalidate the view
    assert bytes(view) == expected
    del view
    for i in range(1, 6):
        store.get(topic(i), 0, 0, 1)
    assert not held_file.is_mapped  # once the view is gone, a later eviction closes it
    assert bodies(store, topic(0)) == [b"held"]  # mapped again on demand
    store.close_sync()


def test_a_put_into_an_unmapped_last_file_maps_it_again_and_continues(root: Path):
    store = open_store(root, max_open_consume_queue_files=1)
    for i in range(3):
        assert store.put(topic(0), 0, body_for(i)).queue_offset == i
    queue = store.consume_queues.get(topic(0), 0)
    assert queue is not None
    last = queue.mapped_file_queue.last_mapped_file
    assert last is not None
    store.put(topic(1), 0, b"other")
    store.get(topic(1), 0, 0, 1)
    assert (
        not last.is_mapped and last.reserved_position == 0
    )  # the put path's check sends it to the slow path
    result = store.put(topic(0), 0, body_for(3))
    assert result.status is PutStatus.PUT_OK and result.queue_offset == 3
    assert last.is_mapped
    assert bodies(store, topic(0)) == [body_for(i) for i in range(4)]
    store.close_sync()


def test_an_unmapped_dirty_file_is_flushed_through_a_fresh_descriptor(root: Path):
    store = open_store(root, max_open_consume_queue_files=1)
    store.put(topic(0), 0, b"dirty")
    queue = store.consume_queues.get(topic(0), 0)
    assert queue is not None
    dirty = queue.mapped_file_queue.mapped_files[0]
    store.put(topic(1), 0, b"evicts the other")  # second chance spent: topic 0's file is unmapped
    store.get(topic(1), 0, 0, 1)
    store.put(topic(2), 0, b"and again")
    assert not dirty.is_mapped and dirty.flushed_position < dirty.wrote_position
    store.flush()
    assert dirty.flushed_position == dirty.wrote_position == CQ_STORE_UNIT_SIZE
    assert not dirty.is_mapped
    store.close_sync()


def test_another_thread_reads_units_without_mapping_files(root: Path):
    """Retention reads units on its own thread: under the cache's lock from a mapped file, with ``pread``
    from an unmapped one, which it leaves unmapped (only the owner thread maps and evicts)."""
    store = open_store(root, max_open_consume_queue_files=1)
    results = [store.put(topic(0), 0, body_for(i)) for i in range(3)]
    store.put(topic(1), 0, b"other")
    store.get(topic(1), 0, 0, 1)
    store.put(topic(2), 0, b"third")
    queue = store.consume_queues.get(topic(0), 0)
    other = store.consume_queues.get(topic(2), 0)
    assert queue is not None and other is not None
    unmapped = queue.mapped_file_queue.mapped_files[0]
    assert not unmapped.is_mapped and other.mapped_file_queue.mapped_files[0].is_mapped
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.extend([queue.get_unit(1), other.get_unit(0)]))
    worker.start()
    worker.join(10)
    assert [(u.commit_log_offset, u.size) for u in seen] == [  # type: ignore[attr-defined]
        (results[1].commit_log_offset, results[1].wrote_bytes),
        (other.get_unit(0).commit_log_offset, other.get_unit(0).size),  # type: ignore[union-attr]
    ]
    assert not unmapped.is_mapped and len(store.file_cache) == 1
    store.close_sync()


def _fail_next_queue_opens(monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """Make the next ``times`` ``os.open`` calls of a consume queue file fail with EMFILE."""
    failed: list[str] = []
    real_open = os.open

    def failing_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if "consumequeue" in str(path) and Path(path).name.isdigit() and len(failed) < times:
            failed.append(str(path))
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    return failed


def test_no_descriptor_to_map_a_file_again_is_transient(root: Path, monkeypatch: pytest.MonkeyPatch):
    store = open_store(root, max_open_consume_queue_files=1)
    store.put(topic(0), 0, b"first")
    store.put(topic(1), 0, b"other")
    store.get(topic(1), 0, 0, 1)
    store.put(topic(2), 0, b"and another")  # topic 0's file is unmapped now
    failed = _fail_next_queue_opens(monkeypatch, 2)
    refused = store.put(topic(0), 0, b"refused")
    assert refused.status is PutStatus.CREATE_MAPPED_FILE_FAILED and store.open_files_refusals == 1
    with pytest.raises(ConsumeQueueUnavailableError, match="open files"):
        store.get(topic(0), 0, 0, 10)
    assert len(failed) == 2
    assert store.put(topic(0), 0, b"second").queue_offset == 1  # nothing latched, nothing half-written
    assert bodies(store, topic(0)) == [b"first", b"second"]
    store.close_sync()


def test_no_descriptor_to_load_a_queue_is_transient(root: Path, monkeypatch: pytest.MonkeyPatch):
    store = open_store(root)
    store.put(topic(0), 0, b"kept")
    store.put(topic(1), 0, b"kept too")
    store.close_sync()
    store = open_store(root)
    _fail_next_queue_opens(monkeypatch, 2)
    with pytest.raises(ConsumeQueueUnavailableError):
        store.get(topic(0), 0, 0, 10)
    assert store.put(topic(1), 0, b"refused").status is PutStatus.CREATE_MAPPED_FILE_FAILED
    assert store.consume_queues.loaded == 0
    assert bodies(store, topic(0)) == [b"kept"]
    assert store.put(topic(1), 0, b"accepted").queue_offset == 1
    assert bodies(store, topic(1)) == [b"kept too", b"accepted"]
    store.close_sync()


def _write_queues(store: MessageStore, count: int, per_queue: int = 1) -> dict[int, list[bytes]]:
    written: dict[int, list[bytes]] = {}
    for i in range(count):
        written[i] = [body_for(i * per_queue + j) for j in range(per_queue)]
        for body in written[i]:
            assert store.put(topic(i), 0, body).status is PutStatus.PUT_OK
    return written


def test_open_maps_no_queue_until_one_is_used(root: Path):
    store = open_store(root)
    written = _write_queues(store, 300, per_queue=2)
    store.close_sync()
    store = open_store(root)
    assert len(store.consume_queues) == 300 and store.consume_queues.loaded == 0
    assert mapped_queue_files(root) == set() and open_queue_fds(root) == 0
    assert len(store.queues()) == 300
    assert store.max_queue_offset(topic(7), 0) == 2  # first use loads that queue only
    assert store.consume_queues.loaded == 1
    assert bodies(store, topic(8)) == written[8]
    assert store.put(topic(9), 0, b"third").queue_offset == 2
    assert store.consume_queues.loaded == 3
    assert store.recovery is not None and store.recovery.units == 600
    store.close_sync()


def test_a_crash_with_thousands_of_queues_loses_no_flushed_unit(root: Path):
    store = open_store(root, max_open_consume_queue_files=64, commit_log_file_size=256 * 1024)
    written = _write_queues(store, 2000)
    store.flush()  # checkpoint: everything so far is on disk
    past = range(0, 2000, 100)  # 20 queues get records past the checkpoint
    for i in past:
        body = b"after the checkpoint %d" % i
        assert store.put(topic(i), 0, body).status is PutStatus.PUT_OK
        written[i].append(body)
    abandon(store)

    store = open_store(root, max_open_consume_queue_files=64, commit_log_file_size=256 * 1024)
    assert store.last_exit_ok is False
    assert store.recovery is not None and store.recovery.reason == "checkpoint"
    assert store.recovery.units == 2000 + len(past)
    assert store.consume_queues.loaded == len(past)  # only the queues with records past the checkpoint
    assert len(store.file_cache) <= 64
    for i in range(2000):
        assert bodies(store, topic(i)) == written[i]
    assert len(store.file_cache) <= 64
    store.close_sync()


def test_a_lazily_loaded_queue_drops_units_past_the_recovered_commit_log_end(root: Path):
    store = open_store(root)
    _write_queues(store, 5)
    store.flush()
    tail = store.put(topic(3), 0, b"torn away")
    abandon(store)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as segment:  # the record's bytes are lost
        segment.seek(tail.commit_log_offset)
        segment.write(bytes(tail.wrote_bytes))
    store = open_store(root)
    assert store.consume_queues.loaded == 0
    assert store.max_queue_offset(topic(3), 0) == 1  # the unit of the lost record went when it loaded
    assert bodies(store, topic(3)) == [body_for(3)]
    assert store.put(topic(3), 0, b"next").queue_offset == 1
    store.close_sync()


def test_retention_keeps_the_records_of_queues_not_loaded(root: Path):
    config = {"commit_log_file_size": 4096, "max_open_consume_queue_files": 4}
    store = open_store(root, **config)
    kept = _write_queues(store, 3, per_queue=4)
    store.close_sync()
    store = open_store(root, **config)
    assert store.consume_queues.loaded == 0
    busy = "persistent://public/default/busy"
    for i in range(400):  # many segments of another queue
        store.put(busy, 0, body_for(i))
    store.set_queue_min_offset(busy, 0, 400)
    store.flush()
    result = store.clean_once(force=True)
    assert result.commit_log_files == 0  # the first segment holds the unloaded queues' records
    assert store.consume_queues.loaded == 1  # the busy one: retention read the first units of the others
    for i in range(3):
        assert bodies(store, topic(i)) == kept[i]
    store.close_sync()


@pytest.mark.parametrize(
    ("configured", "soft_limit", "budget"),
    [(0, 1024, 512), (0, 256, 16), (0, 20_000, 19_488), (0, 1_048_576, 32_768), (50, 256, 50)],
)
def test_the_default_budget_comes_from_the_open_files_limit(configured: int, soft_limit: int, budget: int):
    config = make_config(Path("/nonexistent"), max_open_consume_queue_files=configured)
    assert consume_queue_file_budget(config, soft_limit) == budget


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="max_open_consume_queue_files"):
        make_config(Path("/nonexistent"), max_open_consume_queue_files=-1)
