"""MessageStore facade: put/get, RocketMQ statuses, zero-copy reads, reopen, bad input, life cycle."""

from __future__ import annotations

import ast
import mmap
from pathlib import Path

import pytest

from quasar.storage import (
    CorruptRecordError,
    GetStatus,
    MessageStore,
    OffsetOutOfRangeError,
    PutStatus,
    StoreClosedError,
    StoreLockedError,
)

from .conftest import SEGMENT_SIZE, body_for, make_config, open_store

TOPIC = "persistent://public/default/orders"


def test_put_then_get_across_segments_and_queues(root: Path):
    store = open_store(root)
    results = [store.put(TOPIC, i % 2, body_for(i), properties={"i": str(i)}) for i in range(120)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert [r.queue_offset for r in results[:6]] == [0, 0, 1, 1, 2, 2]
    assert len(list((root / "commitlog").iterdir())) >= 3  # rolled
    assert store.max_queue_offset(TOPIC, 0) == store.max_queue_offset(TOPIC, 1) == 60
    assert store.queues() == [(TOPIC, 0), (TOPIC, 1)]

    result = store.get(TOPIC, 1, 0, 1000)
    assert result.status is GetStatus.FOUND
    assert (result.min_offset, result.max_offset, result.next_begin_offset) == (0, 60, 60)
    assert [bytes(m.body) for m in result.messages] == [body_for(i) for i in range(1, 120, 2)]
    message = result.messages[7]
    assert message.queue_offset == 7 and message.properties == {"i": "15"}
    assert message.commit_log_offset == results[15].commit_log_offset
    assert message.size == results[15].wrote_bytes
    assert message.store_timestamp == results[15].store_timestamp
    assert isinstance(message.body.obj, mmap.mmap)  # a view of the mapped segment, not a copy
    store.close_sync()


def test_get_statuses(root: Path):
    store = open_store(root)
    assert store.get("nope", 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    store.consume_queues.find_or_create("empty", 0)
    assert store.get("empty", 0, 0, 10).status is GetStatus.NO_MESSAGE_IN_QUEUE
    for i in range(5):
        store.put(TOPIC, 0, body_for(i))

    caught_up = store.get(TOPIC, 0, 5, 10)
    assert (caught_up.status, caught_up.next_begin_offset, caught_up.messages) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        5,
        [],
    )
    badly = store.get(TOPIC, 0, 9, 10)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)

    found = store.get(TOPIC, 0, 1, 2)
    assert found.status is GetStatus.FOUND and found.next_begin_offset == 3
    assert [m.queue_offset for m in found.messages] == [1, 2]

    one_byte = store.get(TOPIC, 0, 1, 10, max_bytes=1)  # the first message always comes whole
    assert [m.queue_offset for m in one_byte.messages] == [1] and one_byte.next_begin_offset == 2
    sizes = [m.size for m in store.get(TOPIC, 0, 0, 10).messages]
    two = store.get(TOPIC, 0, 0, 10, max_bytes=sizes[0] + sizes[1])
    assert len(two.messages) == 2

    # a queue whose first unit is queue offset 3 (pre-blank below): offsets under 3 are too small
    late = store.consume_queues.find_or_create("late", 0)
    late.put_unit(3, found.messages[0].commit_log_offset, found.messages[0].size, 0)
    too_small = store.get("late", 0, 1, 10)
    assert (too_small.status, too_small.next_begin_offset, too_small.min_offset) == (
        GetStatus.OFFSET_TOO_SMALL,
        3,
        3,
    )
    assert store.get("late", 0, 3, 10).messages[0].body == body_for(1)
    with pytest.raises(ValueError):
        store.get(TOPIC, 0, 0, 0)
    store.close_sync()


def test_get_by_offset(root: Path):
    store = open_store(root)
    results = [store.put(TOPIC, 0, body_for(i)) for i in range(40)]
    target = results[33]
    message = store.get_by_offset(target.commit_log_offset, target.wrote_bytes)
    assert bytes(message.body) == body_for(33) and message.queue_offset == 33
    with pytest.raises(CorruptRecordError):
        store.get_by_offset(target.commit_log_offset, target.wrote_bytes + 1)
    with pytest.raises(CorruptRecordError):
        store.get_by_offset(target.commit_log_offset + 1, target.wrote_bytes)
    with pytest.raises(OffsetOutOfRangeError):
        store.get_by_offset(100 * SEGMENT_SIZE, 100)
    store.close_sync()


def test_bad_input_returns_a_status_and_writes_nothing(root: Path):
    store = open_store(root, max_message_size=1000)
    cases = [
        ((TOPIC, 0, bytes(1001)), {}, PutStatus.MESSAGE_ILLEGAL),  # over max_message_size
        (("", 0, b"x"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, -1, b"x"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 2**31, b"x"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, "text"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"properties": {"a\x01": "b"}}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"tag_hash": 2**64}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"born_timestamp_ms": 2**70}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"properties": {"k": "v" * 33000}}, PutStatus.PROPERTIES_SIZE_EXCEEDED),
        (("t" * 40000, 0, b"x"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((["not", "a", "topic"], 0, b"x"), {}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"properties": [("k", "v")]}, PutStatus.MESSAGE_ILLEGAL),
        ((TOPIC, 0, b"x"), {"properties": {"__CRC32#": "0"}}, PutStatus.MESSAGE_ILLEGAL),
    ]
    for args, kwargs, status in cases:
        result = store.put(*args, **kwargs)
        assert (result.status, result.commit_log_offset, result.queue_offset) == (status, -1, -1), args
    assert store.max_commit_log_offset == 0
    assert store.put(TOPIC, 0, memoryview(b"ok")).status is PutStatus.PUT_OK

    small = open_store(root.parent / "small", max_message_size=8000)  # bigger than a segment can hold
    assert small.put(TOPIC, 0, bytes(SEGMENT_SIZE)).status is PutStatus.MESSAGE_ILLEGAL
    small.close_sync()
    store.close_sync()


def test_reopen_keeps_everything_and_queue_offsets_continue(root: Path):
    store = open_store(root)
    long_topic = "persistent://tenant/ns/" + "y" * 200
    for i in range(70):
        store.put(TOPIC if i % 3 else long_topic, 0, body_for(i), tag_hash=i)
    end = store.max_commit_log_offset
    store.close_sync()
    assert not (root / "abort").exists()

    store = open_store(root)
    assert store.last_exit_ok is True
    assert store.max_commit_log_offset == end
    assert store.max_queue_offset(TOPIC, 0) == 46 and store.max_queue_offset(long_topic, 0) == 24
    after = store.put(TOPIC, 0, b"after")
    assert (after.queue_offset, after.commit_log_offset) == (46, end)
    bodies = [bytes(m.body) for m in store.get(TOPIC, 0, 0, 100).messages]
    assert bodies == [body_for(i) for i in range(70) if i % 3] + [b"after"]
    assert store.consume_queues.get(TOPIC, 0).get_unit(1).tag_hash == 2
    assert [bytes(m.body) for m in store.get(long_topic, 0, 0, 100).messages] == [
        body_for(i) for i in range(0, 70, 3)
    ]
    store.close_sync()


def test_life_cycle_errors(root: Path):
    store = open_store(root)
    with pytest.raises(StoreLockedError):
        open_store(root)  # one store per directory
    store.close_sync()
    store.close_sync()  # idempotent
    with pytest.raises(StoreClosedError):
        store.put(TOPIC, 0, b"x")
    with pytest.raises(StoreClosedError):
        store.get(TOPIC, 0, 0, 1)
    never_opened = MessageStore(make_config(root))
    with pytest.raises(StoreClosedError):
        never_opened.put(TOPIC, 0, b"x")
    reopened = open_store(root)  # the lock was released
    reopened.close_sync()


async def test_async_close_flushes_and_writes_the_checkpoint(root: Path):
    store = open_store(root)
    await store.start()
    result = await store.put_and_wait(TOPIC, 0, b"x")
    assert result.status is PutStatus.PUT_OK
    await store.close()
    store = open_store(root)
    assert store.checkpoint.logics_flushed_offset == result.end_offset
    assert store.checkpoint.physic_msg_timestamp == result.store_timestamp
    store.close_sync()


def test_storage_imports_no_other_quasar_layer():
    package = Path(__file__).resolve().parents[2] / "src" / "quasar" / "storage"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("quasar"):
                    neutral = ("quasar.errors", "quasar.native", "quasar.java_hash")  # import nothing of quasar
                    allowed = name in neutral or name.startswith("quasar.storage")
                    assert allowed, (path.name, name)
