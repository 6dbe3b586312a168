"""Faults below the checkpoint (bit rot in the middle of a segment) and the AllocateMappedFileService."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from quasar.storage import GetStatus, MessageStore, PutStatus
from quasar.storage.allocate import WARM_CHUNK_SIZE, AllocateMappedFileService
from quasar.storage.mapped_file import MappedFile, offset_to_file_name
from quasar.storage.record import BODY_POSITION

from .conftest import SEGMENT_SIZE, body_for, open_store

TOPIC = "persistent://public/default/faults"


def _damage(root: Path, commit_log_offset: int, delta: int, data: bytes) -> None:
    start = commit_log_offset - commit_log_offset % SEGMENT_SIZE
    with open(root / "commitlog" / offset_to_file_name(start), "r+b") as f:
        f.seek(commit_log_offset - start + delta)
        f.write(data)


@pytest.mark.parametrize(
    ("what", "delta", "data"),
    [("body bit rot", BODY_POSITION + 3, b"\xff"), ("bad magic", 4, b"\x00\x00\x00\x00")],
)
def test_damaged_record_mid_segment_is_reported_and_skipped(
    root: Path, what: str, delta: int, data: bytes, caplog: pytest.LogCaptureFixture
):
    store = open_store(root)
    results = [store.put(TOPIC, 0, body_for(i), properties={"KEYS": f"k{i}"}) for i in range(60)]
    store.close_sync()  # clean: the next open does not rescan, the damage is found by readers
    victim = results[25]
    assert victim.commit_log_offset % SEGMENT_SIZE > 0  # in the middle of a segment
    _damage(root, victim.commit_log_offset, delta, data)
    store = open_store(root)
    found = store.get(TOPIC, 0, 0, 60, 10**9)
    assert found.status is GetStatus.FOUND
    assert [m.queue_offset for m in found.messages] == [i for i in range(60) if i != 25]
    assert [bytes(m.body) for m in found.messages] == [body_for(i) for i in range(60) if i != 25]
    assert store.corrupt_records_skipped == 1
    assert str(victim.commit_log_offset) in caplog.text  # reported with its offset
    # reading only the damaged one: nothing returned as data, the reader is told to move on
    alone = store.get(TOPIC, 0, 25, 1)
    assert alone.messages == [] and alone.next_begin_offset == 26
    assert alone.status is GetStatus.MESSAGE_WAS_REMOVING
    assert store.query(TOPIC, "k25") == []  # the query path checks the CRC too
    assert [bytes(m.body) for m in store.query(TOPIC, "k26")] == [body_for(26)]
    store.close_sync()


def test_reput_skips_a_damaged_record_and_indexes_the_rest(root: Path, caplog: pytest.LogCaptureFixture):
    store = open_store(root, message_index_enable=False)
    results = [store.put(TOPIC, 0, body_for(i), properties={"KEYS": f"k{i}"}) for i in range(40)]
    store.close_sync()
    _damage(root, results[10].commit_log_offset, 4, b"\x00\x00\x00\x01")  # bad magic, size intact
    store = open_store(root)  # the index is new: the reput service scans the whole commit log
    assert store.reput is not None
    store.reput.do_reput()
    assert store.reput.skipped_records == 1
    assert str(results[10].commit_log_offset) in caplog.text
    assert [bytes(m.body) for m in store.query(TOPIC, "k11")] == [body_for(11)]
    assert store.query(TOPIC, "k10") == []
    store.close_sync()


def test_next_segment_is_pre_allocated(root: Path):
    store = open_store(root)
    allocator = store.allocator
    for i in range(200):
        assert store.put(TOPIC, 0, body_for(i)).status is PutStatus.PUT_OK
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) > 3
    assert allocator.hits >= len(files) - 2  # every roll after the first found its file ready
    next_path = root / "commitlog" / offset_to_file_name(files[-1].end_offset)
    deadline = time.monotonic() + 10
    while not next_path.exists() and time.monotonic() < deadline:  # the background thread creates it
        time.sleep(0.005)
    assert next_path.exists()
    store.close_sync()
    assert not next_path.exists()  # an unused pre-allocated segment is removed at close


def test_warm_mapped_file_writes_every_byte(tmp_path: Path):
    size = WARM_CHUNK_SIZE + 12 * 1024  # a whole pwrite chunk and a short tail
    allocator = AllocateMappedFileService(size, warm=True)
    allocator.start()
    path = tmp_path / offset_to_file_name(0)
    allocator.pre_allocate(path)
    deadline = time.monotonic() + 10
    while allocator.created < 1 and time.monotonic() < deadline:  # a take now would cut the warm-up short
        time.sleep(0.005)
    mapped_file = allocator.take(path)
    assert isinstance(mapped_file, MappedFile) and allocator.hits == 1
    assert os.stat(path).st_blocks * 512 >= size  # real blocks, not a hole
    assert mapped_file.reserved_position == size  # appends never need to reserve again
    assert bytes(mapped_file.buffer) == bytes(size)
    mapped_file.buffer[size - 3 : size] = b"end"  # the mapping and the pwrite zeros are the same pages
    mapped_file.close()
    assert path.read_bytes()[-3:] == b"end"
    allocator.shutdown()


def test_a_taker_never_waits_for_a_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The loop only picks up a ready file: a warm-up in progress stops at its next chunk when the file is
    taken, and is handed over with all its disk blocks reserved."""
    import quasar.storage.allocate as allocate

    chunks = WARM_CHUNK_SIZE * 64
    started = threading.Event()
    written: list[int] = []
    real_pwrite = os.pwrite

    def slow_pwrite(fd: int, data: bytes, position: int) -> int:
        started.set()
        time.sleep(0.002)  # a full warm-up takes >= 128 ms
        written.append(position)
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(allocate.os, "pwrite", slow_pwrite)
    allocator = AllocateMappedFileService(chunks, warm=True)
    allocator.start()
    path = tmp_path / offset_to_file_name(0)
    allocator.pre_allocate(path)
    assert started.wait(10)
    mapped_file = allocator.take(path)
    assert len(written) < 64 and allocator.waits == 1  # handed over mid-warm-up
    assert mapped_file.reserved_position == chunks  # every block reserved before the first zero
    mapped_file.close()
    allocator.shutdown()


def test_an_unrequested_file_is_created_by_the_taker_without_warm_up(tmp_path: Path):
    from quasar.storage.mapped_file import RESERVE_CHUNK_SIZE

    allocator = AllocateMappedFileService(4 * RESERVE_CHUNK_SIZE, warm=True)
    allocator.start()
    path = tmp_path / offset_to_file_name(0)
    mapped_file = allocator.take(path)  # never pre-allocated: the allocator is behind
    assert allocator.misses == 1 and allocator.hits == 0
    assert mapped_file.reserved_position == RESERVE_CHUNK_SIZE  # the first chunk only, not warmed
    assert os.stat(path).st_blocks * 512 < 2 * RESERVE_CHUNK_SIZE
    mapped_file.close()
    allocator.shutdown()


def test_allocation_failure_is_reported_to_the_taker(tmp_path: Path):
    allocator = AllocateMappedFileService(4096)
    allocator.start()
    path = tmp_path / "missing-dir" / offset_to_file_name(0)
    allocator.pre_allocate(path)
    with pytest.raises(OSError):
        allocator.take(path)
    allocator.shutdown()


def test_put_reports_create_mapped_file_failed(root: Path, monkeypatch: pytest.MonkeyPatch):
    store = open_store(root)
    store.put(TOPIC, 0, body_for(0))

    def fail(path: Path) -> MessageStore:
        raise PermissionError(13, "denied", str(path))

    monkeypatch.setattr(store.allocator, "take", fail)
    statuses = {store.put(TOPIC, 0, body_for(i)).status for i in range(1, 100)}
    assert PutStatus.CREATE_MAPPED_FILE_FAILED in statuses
    monkeypatch.undo()
    assert store.put(TOPIC, 0, b"recovered").status is PutStatus.PUT_OK
    store.close_sync()


def test_segment_truncated_by_hand_in_the_middle(root: Path, caplog: pytest.LogCaptureFixture):
    store = open_store(root)
    results = [store.put(TOPIC, 0, body_for(i)) for i in range(150)]
    store.close_sync()
    cut_at = SEGMENT_SIZE + 1000  # inside the second of several segments
    os.truncate(root / "commitlog" / offset_to_file_name(SEGMENT_SIZE), 1000)
    store = open_store(root)  # the broker keeps running: the file is extended with zeros
    found = store.get(TOPIC, 0, 0, 150, 10**9)
    lost = {i for i, r in enumerate(results) if r.commit_log_offset >= SEGMENT_SIZE and r.end_offset > cut_at}
    lost = {i for i in lost if results[i].commit_log_offset < 2 * SEGMENT_SIZE}
    assert lost and [m.queue_offset for m in found.messages] == [i for i in range(150) if i not in lost]
    assert [bytes(m.body) for m in found.messages] == [body_for(i) for i in range(150) if i not in lost]
    assert store.corrupt_records_skipped == len(lost)
    assert store.put(TOPIC, 0, b"still writable").queue_offset == 150
    store.close_sync()


def test_disk_blocks_are_reserved_ahead_of_the_write_position(tmp_path: Path):
    from quasar.storage.mapped_file import RESERVE_CHUNK_SIZE

    size = 2 * RESERVE_CHUNK_SIZE + 4096
    mapped_file = MappedFile(tmp_path / offset_to_file_name(0), size, create=True)
    assert os.stat(mapped_file.path).st_blocks == 0  # created sparse
    mapped_file.reserve(100)
    assert mapped_file.reserved_position == RESERVE_CHUNK_SIZE  # one chunk at a time
    assert os.stat(mapped_file.path).st_blocks * 512 >= RESERVE_CHUNK_SIZE
    mapped_file.reserve(RESERVE_CHUNK_SIZE + 1)
    assert mapped_file.reserved_position == 2 * RESERVE_CHUNK_SIZE
    mapped_file.reserve(size + 10**6)
    assert mapped_file.reserved_position == size  # never past the file
    mapped_file.close()
