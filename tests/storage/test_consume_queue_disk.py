"""Disk per consume queue (issue 21): a new consume queue file reserves one page of disk and grows by doubling
up to 4 MiB steps, so a queue with one unit costs kilobytes; the logical size, the unit layout and recovery
do not change."""

from __future__ import annotations

import os
from pathlib import Path

from quasar.storage import PutStatus
from quasar.storage.consume_queue import CQ_FIRST_RESERVE_STEP, CQ_STORE_UNIT_SIZE
from quasar.storage.mapped_file import OS_PAGE_SIZE, RESERVE_CHUNK_SIZE, MappedFile, offset_to_file_name

from .conftest import abandon, body_for, open_store

TOPIC = "persistent://public/default/cq-disk"
DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_reservations_start_at_the_first_step_and_double_up_to_the_chunk(tmp_path: Path):
    mapped_file = MappedFile(
        tmp_path / offset_to_file_name(0), DEFAULT_CQ_FILE_SIZE, create=True, first_reserve_step=OS_PAGE_SIZE
    )
    ends = []
    while mapped_file.reserved_position < mapped_file.file_size:
        mapped_file.reserve(mapped_file.reserved_position + CQ_STORE_UNIT_SIZE)
        ends.append(mapped_file.reserved_position)
    doubling = [OS_PAGE_SIZE << k for k in range(11)]  # 4 KiB ... 4 MiB
    assert ends == [*doubling, DEFAULT_CQ_FILE_SIZE]  # then one 4 MiB step, cut at the file's end
    assert (
        ends[-2] - ends[-3] == RESERVE_CHUNK_SIZE // 2
        and _allocated(mapped_file.path) >= DEFAULT_CQ_FILE_SIZE
    )
    mapped_file.close()


def test_a_one_message_queue_holds_one_page_of_disk(tmp_path: Path):
    root = tmp_path / "store"
    store = open_store(root, consume_queue_file_size=DEFAULT_CQ_FILE_SIZE)
    topics = [f"{TOPIC}-{i}" for i in range(50)]
    assert all(store.put(topic, 0, b"one message").status is PutStatus.PUT_OK for topic in topics)
    store.close_sync()
    files = sorted((root / "consumequeue").rglob(offset_to_file_name(0)))
    assert len(files) == 50
    assert all(os.stat(f).st_size == DEFAULT_CQ_FILE_SIZE for f in files)  # the logical size is unchanged
    assert all(_allocated(f) <= CQ_FIRST_RESERVE_STEP for f in files)  # was 4 MiB each
    store = open_store(root, consume_queue_file_size=DEFAULT_CQ_FILE_SIZE)
    assert [bytes(store.get(topic, 0, 0, 5).messages[0].body) for topic in topics] == [b"one message"] * 50
    assert store.put(topics[0], 0, b"second").queue_offset == 1
    store.close_sync()


def test_a_torn_unit_in_a_partly_reserved_file_is_cut_and_rebuilt(tmp_path: Path):
    """Files of 3,000 units with several growing reservations each; a crash leaves half a unit past the end
    of the last file and loses a whole queue: recovery cuts the torn unit and rebuilds the lost queue."""
    root = tmp_path / "store"
    cq_file_size = 3_000 * CQ_STORE_UNIT_SIZE
    store = open_store(root, consume_queue_file_size=cq_file_size, commit_log_file_size=1024 * 1024)
    count = 7_100  # two full files and part of a third, per queue
    results = [store.put(TOPIC, i % 2, body_for(i)) for i in range(2 * count)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    abandon(store)
    last_file = root / "consumequeue" / TOPIC.replace(":", "%3A").replace("/", "%2F") / "0"
    last_file = last_file / offset_to_file_name(2 * cq_file_size)
    assert _allocated(last_file) < cq_file_size  # the third file is only partly reserved
    with open(last_file, "r+b") as f:
        f.seek((count - 2 * 3_000) * CQ_STORE_UNIT_SIZE)
        f.write(b"\x00\x00\x00\x00\x00\x01\x00\x00\x00")  # half a unit: a torn write past the end
    for path in (last_file.parent.parent / "1").iterdir():  # queue 1 is lost altogether
        path.unlink()

    store = open_store(root, consume_queue_file_size=cq_file_size, commit_log_file_size=1024 * 1024)
    assert store.last_exit_ok is False
    for queue_id in (0, 1):
        assert store.max_queue_offset(TOPIC, queue_id) == count
        found = store.get(TOPIC, queue_id, 0, count, 10**9).messages
        expected = [body_for(i) for i in range(queue_id, 2 * count, 2)]
        assert [m.queue_offset for m in found] == list(range(count))
        assert [bytes(m.body) for m in found] == expected
    assert store.put(TOPIC, 0, b"after the crash").queue_offset == count
    store.close_sync()
