"""MappedFile and MappedFileQueue: naming, rolling, lookup, flush positions, truncation, loading."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from quasar.storage import mapped_file as mapped_file_module
from quasar.storage.errors import OffsetOutOfRangeError, StoreLoadError
from quasar.storage.mapped_file import MappedFile, file_name_to_offset, offset_to_file_name
from quasar.storage.mapped_file_queue import MappedFileQueue

SIZE = 4096


def _fill(queue: MappedFileQueue, total: int, chunk: int = 1000) -> None:
    """Write ``total`` bytes of a recognisable pattern, ``chunk`` bytes at a time, rolling at file ends."""
    written = 0
    while written < total:
        mapped_file = queue.get_last_mapped_file(0)
        n = min(chunk, mapped_file.remaining(), total - written)
        start = mapped_file.wrote_position
        mapped_file.buffer[start : start + n] = bytes((written + i) % 251 + 1 for i in range(n))
        mapped_file.wrote_position = mapped_file.committed_position = start + n
        written += n


def test_file_names_are_twenty_digit_start_offsets():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert file_name_to_offset("00000000001073741824") == 1073741824
    for bad in ("123", "0000000000000000000x", "000000000000000000000", "-0000000000000000001"):
        with pytest.raises(StoreLoadError):
            file_name_to_offset(bad)


def test_queue_rolls_to_contiguous_files_and_finds_offsets(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    _fill(queue, 3 * SIZE + 100)
    names = sorted(p.name for p in (tmp_path / "log").iterdir())
    assert names == [offset_to_file_name(i * SIZE) for i in range(4)]
    assert all((tmp_path / "log" / n).stat().st_size == SIZE for n in names)
    assert queue.max_offset == 3 * SIZE + 100
    assert queue.find_mapped_file_by_offset(0).file_from_offset == 0
    assert queue.find_mapped_file_by_offset(SIZE - 1).file_from_offset == 0
    assert queue.find_mapped_file_by_offset(2 * SIZE + 5).file_from_offset == 2 * SIZE
    assert queue.find_mapped_file_by_offset(4 * SIZE) is None
    assert queue.find_mapped_file_by_offset(-1) is None
    queue.close()


def test_first_file_starts_at_the_aligned_start_offset(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    mapped_file = queue.get_last_mapped_file(3 * SIZE + 7)
    assert mapped_file.file_from_offset == 3 * SIZE
    assert queue.min_offset == 3 * SIZE
    queue.close()


def test_read_returns_a_zero_copy_view_of_written_bytes_only(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    _fill(queue, 100)
    mapped_file = queue.last_mapped_file
    view = mapped_file.read(10, 20)
    assert view.obj is mapped_file._mmap
    mapped_file.buffer[10] = 0xAB
    assert view[0] == 0xAB  # same memory
    with pytest.raises(OffsetOutOfRangeError):
        mapped_file.read(90, 20)
    del view
    queue.close()


def test_flush_moves_flushed_where_across_files_and_respects_least_pages(tmp_path: Path, monkeypatch):
    calls: list[int] = []
    real = mapped_file_module.fdatasync
    monkeypatch.setattr(mapped_file_module, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    queue = MappedFileQueue(tmp_path / "log", 4 * SIZE)
    _fill(queue, 100)
    assert queue.has_dirty_data()
    assert queue.flush(least_pages=1) == 0  # less than one dirty page: nothing synced
    assert calls == []
    assert queue.flush(0) == 100
    assert len(calls) == 1 and not queue.has_dirty_data()
    assert queue.flush(0) == 100 and len(calls) == 1  # nothing dirty, no sync
    _fill(queue, 5 * SIZE)
    assert queue.flush(least_pages=1) == 100 + 5 * SIZE  # full first file waives the threshold
    assert queue.flushed_where == queue.max_offset
    queue.close()


def test_flush_from_a_thread_while_appending(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    stop = threading.Event()
    flushed: list[int] = []

    def flusher() -> None:
        while not stop.is_set():
            flushed.append(queue.flush(0))

    thread = threading.Thread(target=flusher)
    thread.start()
    _fill(queue, 10 * SIZE, chunk=100)
    stop.set()
    thread.join()
    assert flushed == sorted(flushed)  # monotonic
    assert queue.flush(0) == 10 * SIZE
    queue.close()


def test_truncate_dirty_files_cuts_zeroes_and_deletes(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    _fill(queue, 3 * SIZE)
    queue.truncate_dirty_files(SIZE + 10)
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == [
        offset_to_file_name(0),
        offset_to_file_name(SIZE),
    ]
    assert queue.max_offset == SIZE + 10 and queue.flushed_where == SIZE + 10
    second = queue.last_mapped_file
    assert bytes(second.buffer[10:SIZE]) == bytes(SIZE - 10)  # tail zeroed
    assert second.buffer[9] != 0  # data before the cut kept
    queue.close()


def test_truncate_to_skips_a_tail_that_is_already_a_hole(tmp_path: Path, monkeypatch):
    mapped_file = MappedFile(tmp_path / offset_to_file_name(0), 8 * SIZE, create=True)
    mapped_file.buffer[0:10] = b"x" * 10
    truncations: list[int] = []
    real = os.ftruncate
    monkeypatch.setattr(os, "ftruncate", lambda fd, n: (truncations.append(n), real(fd, n)))
    mapped_file.truncate_to(10)
    assert truncations == []  # nothing past 10 was ever written
    mapped_file.buffer[5 * SIZE] = 1
    mapped_file.truncate_to(10)
    assert truncations == [10, 8 * SIZE]
    assert mapped_file.buffer[5 * SIZE] == 0
    mapped_file.close()


def test_load_maps_existing_files_and_rejects_inconsistent_ones(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    _fill(queue, 2 * SIZE + 5)
    queue.close()

    loaded = MappedFileQueue(tmp_path / "log", SIZE)
    loaded.load()
    assert [f.file_from_offset for f in loaded.mapped_files] == [0, SIZE, 2 * SIZE]
    assert loaded.max_offset == 3 * SIZE  # all marked full until recovery finds the end
    assert bytes(loaded.mapped_files[1].buffer[:3]) == bytes((SIZE + i) % 251 + 1 for i in range(3))
    loaded.close()

    with pytest.raises(StoreLoadError, match="does not match"):
        MappedFileQueue(tmp_path / "log", 2 * SIZE).load()

    (tmp_path / "log" / offset_to_file_name(SIZE)).unlink()
    with pytest.raises(StoreLoadError, match="gap"):
        MappedFileQueue(tmp_path / "log", SIZE).load()

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "junk").write_bytes(b"")
    with pytest.raises(StoreLoadError, match="20 digits"):
        MappedFileQueue(tmp_path / "other", SIZE).load()


def test_load_extends_a_short_last_file(tmp_path: Path):
    queue = MappedFileQueue(tmp_path / "log", SIZE)
    _fill(queue, SIZE + 50)
    queue.close()
    last = tmp_path / "log" / offset_to_file_name(SIZE)
    os.truncate(last, 20)  # a crash while the segment was being written
    loaded = MappedFileQueue(tmp_path / "log", SIZE)
    loaded.load()
    assert last.stat().st_size == SIZE
    assert bytes(loaded.last_mapped_file.buffer[20:50]) == bytes(30)
    loaded.close()


def test_a_file_mapped_again_after_a_restart_knows_the_disk_it_holds(tmp_path: Path, monkeypatch):
    # a consume queue file loaded lazily after a restart: its next put must not open a descriptor and
    # posix_fallocate again for blocks the file already has (per-topic work on the loop, issue 21)
    path = tmp_path / offset_to_file_name(0)
    written = MappedFile(path, 1024 * 1024, create=True, first_reserve_step=8192, keep_fd=False)
    written.reserve(100)  # the first step: 8 KiB
    assert written.reserved_position == 8192
    written.buffer[:5] = b"units"
    written.close()
    again = MappedFile.unmapped(path, 1024 * 1024, first_reserve_step=8192, keep_fd=False)
    again.remap()
    assert 4096 <= again.reserved_position <= 8192  # learned from the file (SEEK_HOLE, st_blocks), not 0
    reservations = []
    monkeypatch.setattr(mapped_file_module, "reserve_space", lambda *args: reservations.append(args))
    again.reserve(4096)
    assert reservations == []  # nothing to allocate below what the file holds
    again.reserve(8192 + 20)
    assert len(reservations) == 1  # past it: reserved as usual
    again.close()
    sparse = tmp_path / offset_to_file_name(1024 * 1024)
    with open(sparse, "wb") as handle:
        handle.truncate(1024 * 1024)  # a hole throughout: nothing reserved
    hollow = MappedFile.unmapped(sparse, 1024 * 1024, keep_fd=False)
    hollow.remap()
    assert hollow.reserved_position == 0
    hollow.close()
