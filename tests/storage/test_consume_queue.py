"""ConsumeQueue: 20-byte units, file layout, topic directory encoding, recovery, truncation, pre-blank."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.storage import consume_queue
from quasar.storage.consume_queue import (
    CQ_STORE_UNIT_SIZE,
    PRE_BLANK_SIZE,
    TOPIC_FILE_NAME,
    UNIT,
    ConsumeQueue,
    ConsumeQueueUnit,
    decode_topic_dir,
    encode_topic_dir,
)
from quasar.storage.dispatch import ConsumeQueueDispatcher, ConsumeQueueStore, DispatchRequest
from quasar.storage.errors import ConsumeQueueGapError
from quasar.storage.mapped_file import offset_to_file_name

from .conftest import CQ_FILE_SIZE

TOPIC = "persistent://public/default/orders-partition-0"


def _queue(root: Path, topic: str = TOPIC, queue_id: int = 0) -> ConsumeQueue:
    return ConsumeQueue(root, topic, queue_id, CQ_FILE_SIZE)


def _fill(queue: ConsumeQueue, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        assert queue.put_unit(n, 1000 * n, 100 + n, n * 7)


def test_unit_layout_matches_the_docstring():
    assert UNIT.size == CQ_STORE_UNIT_SIZE == 20
    assert consume_queue.MSG_TAG_OFFSET_INDEX == 12
    assert UNIT.pack(1, 2, 3) == (1).to_bytes(8, "big") + (2).to_bytes(4, "big") + (3).to_bytes(8, "big")
    assert "0                           8           12                        20" in consume_queue.__doc__


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=120))
def test_topic_directory_names_are_reversible_and_file_system_safe(topic):
    name = encode_topic_dir(topic)
    assert re.fullmatch(r"~?[A-Za-z0-9_%-]+", name)
    assert name not in (".", "..")
    assert len(name.encode()) <= 200 or name.startswith("~")
    if not name.startswith("~"):
        assert decode_topic_dir(Path(name)) == topic


def test_long_topic_names_use_a_hashed_directory_with_a_topic_file(tmp_path: Path):
    topic = "persistent://tenant/namespace/" + "x" * 300
    queue = _queue(tmp_path, topic)
    _fill(queue, 3)
    topic_dir = queue.topic_path
    assert topic_dir.name.startswith("~") and len(topic_dir.name) == 65
    assert (topic_dir / TOPIC_FILE_NAME).read_text() == topic
    assert decode_topic_dir(topic_dir) == topic
    queue.close()


def test_units_are_written_at_n_times_20_and_files_roll(tmp_path: Path):
    queue = _queue(tmp_path)
    _fill(queue, 25)
    directory = tmp_path / encode_topic_dir(TOPIC) / "0"
    assert sorted(p.name for p in directory.iterdir()) == [offset_to_file_name(n) for n in (0, 200, 400)]
    assert (queue.min_offset, queue.max_offset) == (0, 25)
    assert queue.get_unit(13) == ConsumeQueueUnit(13000, 113, 91)
    raw = (directory / offset_to_file_name(200)).read_bytes()
    assert UNIT.unpack_from(raw, 3 * 20) == (13000, 113, 91)  # unit 13 = byte 260 = file 200 + 60
    assert queue.get_unit(25) is None and queue.get_unit(-1) is None
    units = queue.read_units(8, 100)
    assert [u[0] for u in UNIT.iter_unpack(units)] == [8000, 9000]  # stops at the file end
    assert queue.next_file_queue_offset(8) == 10
    assert queue.max_physic_offset == 24000 + 124
    queue.close()


def test_put_unit_is_idempotent_and_refuses_gaps(tmp_path: Path):
    queue = _queue(tmp_path)
    _fill(queue, 5)
    assert not queue.put_unit(3, 999, 1, 0)  # already there: left as is
    assert queue.get_unit(3) == ConsumeQueueUnit(3000, 103, 21)
    with pytest.raises(ConsumeQueueGapError) as info:
        queue.put_unit(7, 7000, 1, 0)
    assert (info.value.expected_queue_offset, info.value.queue_offset) == (5, 7)
    assert queue.max_offset == 5
    queue.close()


def test_an_empty_queue_may_start_past_zero_with_pre_blank_units(tmp_path: Path):
    queue = _queue(tmp_path)
    assert queue.put_unit(13, 5000, 120, 0)
    assert (queue.min_offset, queue.max_offset) == (13, 14)
    first = queue.mapped_file_queue.first_mapped_file
    assert first.file_from_offset == 200
    assert UNIT.unpack_from(first.buffer, 0) == (0, PRE_BLANK_SIZE, 0)
    assert queue.get_unit(12) is None
    queue.close()

    reloaded = _queue(tmp_path)
    reloaded.load()
    reloaded.recover()
    assert (reloaded.min_offset, reloaded.max_offset) == (13, 14)
    reloaded.close()


def test_recover_stops_at_the_first_empty_unit(tmp_path: Path):
    queue = _queue(tmp_path)
    _fill(queue, 25)
    second = queue.mapped_file_queue.mapped_files[1]
    UNIT.pack_into(second.buffer, 4 * 20, 0, 0, 0)  # unit 14 lost (zeros)
    queue.close()

    reloaded = _queue(tmp_path)
    reloaded.load()
    reloaded.recover()
    assert reloaded.max_offset == 14
    assert reloaded.max_physic_offset == 13000 + 113
    directory = tmp_path / encode_topic_dir(TOPIC) / "0"
    assert sorted(p.name for p in directory.iterdir()) == [offset_to_file_name(0), offset_to_file_name(200)]
    assert reloaded.put_unit(14, 14000, 1, 0)  # writing continues right there
    reloaded.close()


def test_truncate_dirty_drops_units_of_records_past_the_commit_log_end(tmp_path: Path):
    queue = _queue(tmp_path)
    _fill(queue, 25)
    queue.truncate_dirty(24000 + 124)  # everything is below: nothing happens
    assert queue.max_offset == 25
    queue.truncate_dirty(12500)  # records 13.. start at or past 12500
    assert queue.max_offset == 13
    assert queue.max_physic_offset == 12000 + 112
    queue.truncate_dirty(0)
    assert queue.max_offset == 0
    queue.close()


def test_store_loads_every_queue_and_the_dispatcher_skips_uncommitted_transactions(tmp_path: Path):
    store = ConsumeQueueStore(tmp_path, CQ_FILE_SIZE)
    dispatcher = ConsumeQueueDispatcher(store)
    topics = ["a/b:c", "plain", "x" * 300]
    for n, topic in enumerate(topics):
        for queue_offset in range(3):
            dispatcher.dispatch(DispatchRequest(topic, n, 100 * queue_offset, 10, 0, 0, queue_offset))
    prepared = DispatchRequest("plain", 1, 900, 10, 0, 0, 3, sys_flag=0x4)
    dispatcher.dispatch(prepared)
    assert store.get("plain", 1).max_offset == 3
    store.close()

    loaded = ConsumeQueueStore(tmp_path, CQ_FILE_SIZE)
    loaded.load()
    loaded.recover()
    assert loaded.queues() == sorted((topic, n) for n, topic in enumerate(topics))
    assert all(q.max_offset == 3 for q in loaded)
    loaded.destroy()
    assert list(tmp_path.iterdir()) == []
