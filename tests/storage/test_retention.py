"""Retention (semantics.md A8) and the disk guard: set_queue_min_offset, the clean service rules, a full disk."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quasar.storage import GetStatus, MessageStore, PutStatus
from quasar.storage.mapped_file import offset_to_file_name

from .conftest import SEGMENT_SIZE, body_for, make_config

TOPIC = "persistent://public/default/retention"
OTHER = "persistent://public/default/other"
FAR_FUTURE = time.time() + 365 * 24 * 3600
NOT_NOW = f"{(time.localtime().tm_hour + 12) % 24:02d}"
"""A delete_when hour that is not the current one (the tests pass ``force`` or a disk ratio instead)."""


def _fill(store: MessageStore, count: int, topic: str = TOPIC) -> list:
    results = [store.put(topic, 0, body_for(i)) for i in range(count)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    store.flush()
    assert store.reput is not None
    store.reput.do_reput()  # retention never deletes what the index has not seen
    return results


def _open(root: Path, ratio: float = 0.10, **overrides) -> MessageStore:
    store = MessageStore(make_config(root, **overrides), disk_usage=lambda path: ratio)
    store.open()
    return store


def _segments(store: MessageStore) -> list[int]:
    return [f.file_from_offset for f in store.commit_log.mapped_file_queue.mapped_files]


def test_nothing_is_deleted_while_a_queue_needs_it(root: Path):
    store = _open(root, delete_when=NOT_NOW)
    _fill(store, 200)
    before = _segments(store)
    assert len(before) > 4
    result = store.clean_once(now_s=FAR_FUTURE, force=True)
    assert result.commit_log_files == 0 and _segments(store) == before
    store.close_sync()


def test_segments_below_the_needed_offset_are_deleted_oldest_first(root: Path):
    store = _open(root, delete_when=NOT_NOW)
    results = _fill(store, 200)
    store.set_queue_min_offset(TOPIC, 0, 120)
    store.set_queue_min_offset(TOPIC, 0, 50)  # never moves back
    needed = results[120].commit_log_offset
    result = store.clean_once(now_s=FAR_FUTURE, force=True)
    assert result.commit_log_files > 0
    segments = _segments(store)
    assert segments[0] == needed - needed % SEGMENT_SIZE  # stopped at the segment holding unit 120
    assert not (root / "commitlog" / offset_to_file_name(0)).exists()
    # consume queue files wholly below 120 are gone too (10 units per file in tests)
    assert store.min_queue_offset(TOPIC, 0) == 120
    assert store.get(TOPIC, 0, 0, 5).status is GetStatus.OFFSET_TOO_SMALL
    found = store.get(TOPIC, 0, 120, 80)
    assert found.status is GetStatus.FOUND
    assert [bytes(m.body) for m in found.messages] == [body_for(i) for i in range(120, 200)]
    # the last segment is never deleted, even when nothing is needed
    store.set_queue_min_offset(TOPIC, 0, 200)
    store.clean_once(now_s=FAR_FUTURE, force=True)
    assert len(_segments(store)) >= 1 and store.put(TOPIC, 0, b"after").queue_offset == 200
    store.close_sync()
    reopened = _open(root, delete_when=NOT_NOW)
    assert reopened.min_queue_offset(TOPIC, 0) >= 120
    assert bytes(reopened.get(TOPIC, 0, 200, 1).messages[0].body) == b"after"
    reopened.close_sync()


def test_another_queue_pins_the_commit_log(root: Path):
    store = _open(root, delete_when=NOT_NOW)
    for i in range(200):
        store.put(TOPIC if i % 2 else OTHER, 0, body_for(i))
    store.flush()
    store.reput.do_reput()
    store.set_queue_min_offset(TOPIC, 0, 100)  # every TOPIC unit released, OTHER still needs all of its own
    assert store.clean_once(now_s=FAR_FUTURE, force=True).commit_log_files == 0
    store.set_queue_min_offset(OTHER, 0, 50)
    assert store.clean_once(now_s=FAR_FUTURE, force=True).commit_log_files > 0
    found = store.get(OTHER, 0, 50, 50)
    assert [bytes(m.body) for m in found.messages] == [body_for(i) for i in range(100, 200, 2)]
    store.close_sync()


def test_age_hour_and_disk_ratio_rules(root: Path):
    ratio = [0.10]
    store = MessageStore(
        make_config(root, delete_when=NOT_NOW, file_reserved_time_h=1), disk_usage=lambda path: ratio[0]
    )
    store.open()
    _fill(store, 200)
    store.set_queue_min_offset(TOPIC, 0, 150)
    now = time.time()
    assert store.clean_once(now_s=FAR_FUTURE).commit_log_files == 0  # expired, but not the hour
    assert store.clean_once(now_s=now, force=True).commit_log_files == 0  # the hour, but not expired
    ratio[0] = 0.80  # over disk_max_used_space_ratio (75 %): expired files go at any hour
    assert store.clean_once(now_s=now).commit_log_files == 0
    assert store.clean_once(now_s=FAR_FUTURE).commit_log_files > 0
    _fill(store, 100)
    store.set_queue_min_offset(TOPIC, 0, 280)
    ratio[0] = 0.86  # over the clean-forcibly ratio (85 %): age does not matter
    result = store.clean_once(now_s=now)
    assert result.commit_log_files > 0 and not result.disk_full
    assert store.put(TOPIC, 0, b"still writable").status is PutStatus.PUT_OK
    store.close_sync()


def test_disk_guard_refuses_writes_and_resumes(root: Path):
    ratio = [0.50]
    store = MessageStore(make_config(root), disk_usage=lambda path: ratio[0])
    store.open()
    before = _fill(store, 20)
    ratio[0] = 0.95  # over disk_space_warning_level_ratio (90 %)
    assert store.clean_once().disk_full and store.statistics().disk_full
    refused = store.put(TOPIC, 0, b"refused")
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and store.disk_full_refusals == 1
    assert store.max_queue_offset(TOPIC, 0) == 20  # nothing written
    ratio[0] = 0.60
    assert not store.clean_once().disk_full
    assert store.put(TOPIC, 0, b"accepted").queue_offset == 20
    found = store.get(TOPIC, 0, 0, 30).messages
    assert [bytes(m.body) for m in found] == [body_for(i) for i in range(20)] + [b"accepted"]
    assert before[0].ok
    store.close_sync()


async def test_clean_service_thread_detaches_on_the_loop(root: Path):
    store = _open(root, delete_when=NOT_NOW, clean_resource_interval_ms=10, file_reserved_time_h=0)
    await store.start()
    results = [store.put(TOPIC, 0, body_for(i)) for i in range(200)]
    await store.wait_flushed(results[-1].end_offset)
    for _ in range(1000):  # retention never deletes what the reput thread has not indexed yet
        if store.statistics().dispatch_behind_bytes == 0:
            break
        await asyncio.sleep(0.01)
    store.set_queue_min_offset(TOPIC, 0, 150)
    # the thread's own rounds delete nothing (not the hour, the disk is fine); a forced round from another
    # thread detaches the files on the loop while it keeps serving reads
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(None, lambda: store.clean_once(force=True))
    assert result.commit_log_files > 0
    assert store.get(TOPIC, 0, 150, 50).messages[0].queue_offset == 150
    await store.close()


# -- a real full disk ----------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root and mount(8)); skipped where it cannot be mounted."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_refuses_puts_without_corruption_and_resumes(small_disk: Path):
    root = small_disk / "store"
    config = make_config(root, commit_log_file_size=64 * 1024, consume_queue_file_size=2000)
    store = MessageStore(config, disk_usage=lambda path: 0.0)  # only ENOSPC stops it, not the guard
    store.open()
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\x01" * 256 * 1024)
    accepted: list[tuple[int, bytes]] = []
    refused = 0
    for i in range(4000):
        body = (f"{i:06d}".encode()) * 170  # ~1 KiB
        result = store.put(TOPIC, 0, body)
        if result.status is PutStatus.PUT_OK:
            assert result.queue_offset == len(accepted)
            accepted.append((result.queue_offset, body))
        else:
            assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
            refused += 1
            if refused >= 5:
                break
    assert refused >= 5 and len(accepted) > 100
    found = store.get(TOPIC, 0, 0, len(accepted), 10**9)
    assert [(m.queue_offset, bytes(m.body)) for m in found.messages] == accepted
    ballast.unlink()  # space is freed: writes resume
    resumed = store.put(TOPIC, 0, b"after the disk was full")
    assert resumed.status is PutStatus.PUT_OK and resumed.queue_offset == len(accepted)
    store.close_sync()
    reopened = MessageStore(config, disk_usage=lambda path: 0.0)
    reopened.open()
    found = reopened.get(TOPIC, 0, 0, len(accepted) + 1, 10**9)
    assert [bytes(m.body) for m in found.messages] == [b for _, b in accepted] + [b"after the disk was full"]
    reopened.close_sync()


def test_retention_settings_are_validated(root: Path):
    from quasar.storage.clean_service import is_delete_hour
    from quasar.storage.config import parse_delete_when

    assert parse_delete_when("04") == {4} and parse_delete_when("04;16") == {4, 16}
    for bad in ("", "4am", "24", "04;"):
        with pytest.raises(ValueError):
            parse_delete_when(bad)
    noon = time.mktime((2026, 1, 1, 12, 30, 0, 0, 0, -1))
    assert is_delete_hour("12", noon) and not is_delete_hour("04;13", noon)
    for overrides in (
        {"disk_space_warning_level_ratio": 0},
        {"file_reserved_time_h": -1},
        {"max_index_num": 1},
    ):
        with pytest.raises(ValueError):
            make_config(root, **overrides)
    config = make_config(root, disk_space_warning_level_ratio=99, disk_space_clean_forcibly_ratio=10)
    assert config.warning_level_ratio == 0.90 and config.clean_forcibly_ratio == 0.30  # RocketMQ's clamps


def test_index_files_of_deleted_segments_go_too(root: Path):
    store = _open(root, delete_when=NOT_NOW)
    for i in range(300):
        store.put(TOPIC, 0, body_for(i), properties={"KEYS": f"k{i % 3}"})
    store.flush()
    store.reput.do_reput()
    index_files = len(store.index_service.files)
    assert index_files >= 3
    store.set_queue_min_offset(TOPIC, 0, 250)
    result = store.clean_once(now_s=FAR_FUTURE, force=True)
    assert result.index_files >= 1 and len(store.index_service.files) == index_files - result.index_files
    assert all(f.end_phy_offset >= store.min_commit_log_offset for f in store.index_service.files)
    found = store.query(TOPIC, "k1", max_num=64)
    assert found and all(m.commit_log_offset >= store.min_commit_log_offset for m in found)
    store.close_sync()
