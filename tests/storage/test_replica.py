"""Replication at the storage layer: read_commit_log on a master, append_replicated on a replica, replica mode,
truncate_commit_log (RocketMQ HA and RocketMQ 5 epoch truncation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.storage import (
    CorruptRecordError,
    MessageStore,
    OffsetOutOfRangeError,
    PutStatus,
    StoreNotWritableError,
)
from quasar.storage.epoch_file import find_consistent_point
from quasar.storage.errors import ReplicaOffsetMismatchError, StorageError
from quasar.storage.record import BLANK_MAGIC_CODE, PREFIX

from .conftest import SEGMENT_SIZE, abandon, body_for, open_store

TOPICS = ("persistent://t/ns/a", "persistent://t/ns/b-" + "x" * 140)  # the second one uses the V2 magic
BATCH = 32 * 1024


def write(store: MessageStore, start: int, count: int, *, tag: str = "m", salt: bytes = b"") -> None:
    """``count`` messages with keys: single puts (with properties, some with a tag hash) and batches."""
    i = start
    while i < start + count:
        topic = TOPICS[i % 2]
        if i % 5 == 4:
            bodies = [body_for(i + j) + salt for j in range(3)]
            result = store.put_batch(topic, i % 3, bodies, properties={"KEYS": f"{tag}-{i} batch"})
            assert result.status is PutStatus.PUT_OK
            i += 3
        else:
            result = store.put(
                topic,
                i % 3,
                body_for(i) + salt,
                properties={"KEYS": f"{tag}-{i} common", "UNIQ_KEY": f"u-{tag}-{i}"},
                tag_hash=i * 7 if i % 2 else 0,
            )
            assert result.status is PutStatus.PUT_OK
            i += 1


def replicate(master: MessageStore, replica: MessageStore, max_bytes: int = BATCH) -> int:
    """Copy the master's commit log into the replica from the replica's max offset; returns the calls made."""
    offset = replica.max_commit_log_offset
    calls = 0
    while offset < master.max_commit_log_offset:
        data = master.read_commit_log(offset, max_bytes)
        assert data
        offset = replica.append_replicated(offset, data)
        calls += 1
    assert master.read_commit_log(offset, max_bytes) == b""
    return calls


def segments(store: MessageStore) -> list[tuple[str, bytes]]:
    return [
        (f.file_name, bytes(f.buffer[: f.wrote_position]))
        for f in store.commit_log.mapped_file_queue.mapped_files
    ]


def units(store: MessageStore) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    result = {}
    for topic, queue_id in store.queues():
        queue = store.consume_queues.get(topic, queue_id)
        assert queue is not None
        result[(topic, queue_id)] = [
            tuple(queue.get_unit(n))
            for n in range(queue.min_offset, queue.max_offset)  # type: ignore[arg-type]
        ]
    return result


def messages(store: MessageStore) -> list[tuple[object, ...]]:
    found = []
    for topic, queue_id in store.queues():
        result = store.get(
            topic, queue_id, store.min_queue_offset(topic, queue_id), 10_000, max_bytes=1 << 30
        )
        found += [
            (m.commit_log_offset, m.queue_offset, bytes(m.body), m.properties, m.store_timestamp)
            for m in result.messages
        ]
    return found


def query(store: MessageStore, key: str) -> list[tuple[int, bytes]]:
    assert store.reput is not None
    store.reput.do_reput()
    return [(m.commit_log_offset, bytes(m.body)) for m in store.query(TOPICS[0], key, max_num=64)] + [
        (m.commit_log_offset, bytes(m.body)) for m in store.query(TOPICS[1], key, max_num=64)
    ]


def assert_same(master: MessageStore, replica: MessageStore, keys: list[str]) -> None:
    assert replica.max_commit_log_offset == master.max_commit_log_offset
    assert segments(replica) == segments(master)
    assert units(replica) == units(master)
    assert messages(replica) == messages(master)
    for key in keys:
        assert query(replica, key) == query(master, key), key


@pytest.fixture
def pair(tmp_path: Path):
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "replica")
    replica.set_replica_mode(True)
    yield master, replica
    master.close_sync()
    replica.close_sync()


def test_replicated_store_is_byte_identical(pair: tuple[MessageStore, MessageStore]):
    master, replica = pair
    write(master, 0, 150)
    assert len(master.commit_log.mapped_file_queue.mapped_files) >= 4  # several segment rolls
    replicate(master, replica)
    assert_same(master, replica, ["m-0", "m-1", "common", "batch", "u-m-7", "m-149"])
    write(master, 150, 40)  # a second round continues where the first stopped, in small reads
    replicate(master, replica, max_bytes=100)
    assert_same(master, replica, ["m-160", "common", "batch"])


def test_replica_refuses_puts_and_promotion_continues_every_queue(pair: tuple[MessageStore, MessageStore]):
    master, replica = pair
    write(master, 0, 60)
    replicate(master, replica)
    assert replica.replica_mode
    assert replica.put(TOPICS[0], 0, b"x").status is PutStatus.SERVICE_NOT_AVAILABLE
    assert replica.put_batch(TOPICS[0], 0, [b"x"]).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert replica.max_commit_log_offset == master.max_commit_log_offset
    replica.set_replica_mode(False)
    assert not replica.replica_mode
    with pytest.raises(StoreNotWritableError):
        replica.append_replicated(replica.max_commit_log_offset, b"")
    for queue_id in range(3):
        for store in (master, replica):
            expected = store.max_queue_offset(TOPICS[0], queue_id)
            result = store.put(TOPICS[0], queue_id, b"after promotion")
            assert (result.status, result.queue_offset) == (PutStatus.PUT_OK, expected)
    assert units(replica) == units(master)
    assert replica.dispatched_commit_log_offset == replica.max_commit_log_offset


def test_wrong_offset_and_corrupt_data(pair: tuple[MessageStore, MessageStore]):
    master, replica = pair
    write(master, 0, 40)
    data = master.read_commit_log(0, BATCH)
    with pytest.raises(ReplicaOffsetMismatchError) as caught:
        replica.append_replicated(100, data)  # an empty log accepts only a segment-aligned start
    assert (caught.value.expected, caught.value.actual) == (0, 100)
    assert isinstance(caught.value, StorageError)
    first = master.read_commit_log(0, 1)  # one record
    replica.append_replicated(0, first)
    before = (segments(replica), units(replica))
    with pytest.raises(ReplicaOffsetMismatchError):
        replica.append_replicated(0, first)
    with pytest.raises(ReplicaOffsetMismatchError):
        replica.append_replicated(len(first) + 8, first)
    assert (segments(replica), units(replica)) == before

    rest = bytearray(master.read_commit_log(len(first), 1000))
    sizes = []
    position = 0
    while position < len(rest):
        sizes.append(PREFIX.unpack_from(rest, position)[0])
        position += sizes[-1]
    assert len(sizes) >= 3
    bad = sizes[0] + sizes[1] + 100  # inside the third record
    rest[bad] ^= 0xFF
    with pytest.raises(CorruptRecordError) as corrupt:
        replica.append_replicated(len(first), bytes(rest))
    valid_end = len(first) + sizes[0] + sizes[1]
    assert corrupt.value.offset == valid_end
    assert replica.max_commit_log_offset == valid_end  # the two valid records before it were appended
    assert sum(len(u) for u in units(replica).values()) == 3
    for garbage in (b"\x00" * 30, b"\x00\x00\x00\x10\xda\xa3\x20\xa7" + b"\x00" * 8, b"abc"):
        with pytest.raises(CorruptRecordError):
            replica.append_replicated(valid_end, garbage)
    assert replica.max_commit_log_offset == valid_end
    replicate(master, replica)  # resumes from the replica's own offset
    assert_same(master, replica, ["m-3", "common"])


def test_read_commit_log_bounds_blank_and_big_records(tmp_path: Path):
    store = open_store(tmp_path / "s")
    write(store, 0, 60)
    big = store.put(TOPICS[0], 0, b"B" * 2000)
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) >= 3
    with pytest.raises(OffsetOutOfRangeError):
        store.read_commit_log(store.max_commit_log_offset + 1, BATCH)
    with pytest.raises(OffsetOutOfRangeError):
        store.read_commit_log(-1, BATCH)
    with pytest.raises(CorruptRecordError):
        store.read_commit_log(3, BATCH)
    assert store.read_commit_log(store.max_commit_log_offset, BATCH) == b""
    assert len(store.read_commit_log(big.commit_log_offset, 10)) == big.wrote_bytes  # whole, past max_bytes
    offset = 0
    while offset < store.max_commit_log_offset:
        data = store.read_commit_log(offset, 1500)
        segment = offset // SEGMENT_SIZE
        assert (offset + len(data) - 1) // SEGMENT_SIZE == segment  # never past the segment's end
        size, magic = PREFIX.unpack_from(data, 0)
        if magic == BLANK_MAGIC_CODE:  # the blank record comes with the rest of its segment
            assert offset + len(data) == (segment + 1) * SEGMENT_SIZE == offset + size
        offset += len(data)
    assert offset == store.max_commit_log_offset
    store.close_sync()


def test_truncate_then_follow_another_master(tmp_path: Path):
    """A (epoch 1) feeds R and B; A writes more that only R gets; B is elected (epoch 2) and writes other
    records, with the same keys, where A's tail was; R truncates to the consistent point and follows B."""
    a, r, b = (open_store(tmp_path / name) for name in ("a", "r", "b"))
    for store in (r, b):
        store.set_replica_mode(True)
    a.epoch_file.append(1, 0)
    write(a, 0, 40)
    for store in (r, b):
        store.epoch_file.append(1, 0)
        replicate(a, store)
    write(a, 40, 70, tag="tail")  # several segments only r holds
    replicate(a, r)
    b.set_replica_mode(False)
    b.epoch_file.append(2, b.max_commit_log_offset)
    write(b, 40, 70, tag="tail", salt=b"from b")  # same keys, other bodies, other offsets
    cut = find_consistent_point(
        r.epoch_file.entries, r.max_commit_log_offset, b.epoch_file.entries, b.max_commit_log_offset
    )
    assert cut == b.epoch_file.entries[-1].start_offset
    assert cut % SEGMENT_SIZE  # in the middle of a segment
    assert r.max_commit_log_offset - cut > 2 * SEGMENT_SIZE  # across segments
    old_keys = query(r, "tail-41")
    assert old_keys
    r.truncate_commit_log(cut)
    assert r.max_commit_log_offset == cut
    assert query(r, "tail-41") == []
    assert r.epoch_file.entries == b.epoch_file.entries[:1]
    r.epoch_file.append(2, cut)  # what the HA client does when epoch 2's first record arrives
    replicate(b, r)
    assert_same(b, r, ["tail-41", "tail-100", "common", "batch", "m-3"])
    assert query(r, "tail-41") != old_keys
    for store in (a, r, b):
        store.close_sync()
    r = open_store(tmp_path / "r")
    b = open_store(tmp_path / "b")
    assert_same(b, r, ["tail-41", "common"])
    assert r.epoch_file.entries == b.epoch_file.entries
    r.close_sync()
    b.close_sync()


@pytest.mark.parametrize("where", ["segment start", "record", "max", "min"])
def test_truncate_points_and_reopen(tmp_path: Path, where: str):
    master = open_store(tmp_path / "m")
    replica = open_store(tmp_path / "r")
    replica.set_replica_mode(True)
    write(master, 0, 100)
    replicate(master, replica)
    end = replica.max_commit_log_offset
    target = {
        "segment start": 2 * SEGMENT_SIZE,
        "record": master.get(TOPICS[1], 2, 5, 1).messages[0].commit_log_offset,
        "max": end,
        "min": 0,
    }[where]
    expected_units = {key: [u for u in value if u[0] < target] for key, value in units(master).items()}
    replica.truncate_commit_log(target)
    assert replica.max_commit_log_offset == target
    assert {k: v for k, v in units(replica).items()} == expected_units
    assert all(m[0] < target for m in messages(replica))
    assert all(offset < target for offset, _ in query(replica, "common"))
    replica.close_sync()
    replica = open_store(tmp_path / "r")
    replica.set_replica_mode(True)
    assert replica.max_commit_log_offset == target
    assert units(replica) == expected_units
    replicate(master, replica)
    assert_same(master, replica, ["common", "m-60"])
    master.close_sync()
    replica.close_sync()


def test_truncate_rejects_bad_offsets(pair: tuple[MessageStore, MessageStore]):
    master, replica = pair
    write(master, 0, 20)
    replicate(master, replica)
    with pytest.raises(OffsetOutOfRangeError):
        replica.truncate_commit_log(replica.max_commit_log_offset + 1)
    with pytest.raises(CorruptRecordError):
        replica.truncate_commit_log(5)
    with pytest.raises(StoreNotWritableError):
        master.truncate_commit_log(0)
    assert replica.writable
    assert segments(replica) == segments(master)


@pytest.mark.parametrize("crash", [False, True])
def test_replica_recovers_after_close_or_crash(tmp_path: Path, crash: bool):
    master = open_store(tmp_path / "m")
    replica = open_store(tmp_path / "r")
    replica.set_replica_mode(True)
    write(master, 0, 120)
    replicate(master, replica)
    if crash:
        abandon(replica)
    else:
        replica.close_sync()
    replica = open_store(tmp_path / "r")
    assert replica.last_exit_ok is not crash
    assert not replica.replica_mode  # the broker sets the mode again after open
    replica.set_replica_mode(True)
    assert_same(master, replica, ["common", "m-100"])
    write(master, 120, 20)
    replicate(master, replica)
    assert_same(master, replica, ["m-130"])
    master.close_sync()
    replica.close_sync()


def test_new_replica_starts_at_the_masters_last_segment(tmp_path: Path):
    """An empty replica may start at a segment boundary (RocketMQ 4.x: a new slave gets the master's last file);
    its queues start past 0 and it recovers from a crash."""
    master = open_store(tmp_path / "m")
    replica = open_store(tmp_path / "r")
    replica.set_replica_mode(True)
    write(master, 0, 100)
    start = master.commit_log.mapped_file_queue.mapped_files[-2].file_from_offset
    assert start > SEGMENT_SIZE
    offset = start
    while offset < master.max_commit_log_offset:
        offset = replica.append_replicated(offset, master.read_commit_log(offset, BATCH))
    assert replica.min_commit_log_offset == start
    assert [name for name, _ in segments(replica)] == [name for name, _ in segments(master)][-2:]
    for (topic, queue_id), held in units(replica).items():
        assert held == [u for u in units(master)[(topic, queue_id)] if u[0] >= start]
    abandon(replica)
    replica = open_store(tmp_path / "r")
    replica.set_replica_mode(True)
    assert replica.min_commit_log_offset == start
    assert replica.max_commit_log_offset == master.max_commit_log_offset
    write(master, 100, 30)
    replicate(master, replica)
    assert segments(replica) == segments(master)[-len(segments(replica)) :]
    master.close_sync()
    replica.close_sync()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.tuples(
            st.integers(0, 2),  # topic
            st.integers(0, 2),  # queue id
            st.integers(1, 4),  # batch size (1: a single put)
            st.integers(0, 700),  # body size (a batch of 4 still fits in a 4 KiB segment)
        ),
        min_size=1,
        max_size=40,
    ),
    max_bytes=st.integers(1, 6000),
)
def test_replication_property(tmp_path_factory: pytest.TempPathFactory, ops, max_bytes: int):
    root = tmp_path_factory.mktemp("prop")
    master = open_store(root / "m")
    replica = open_store(root / "r")
    replica.set_replica_mode(True)
    topics = ("p/a", "p/b", "p/" + "c" * 130)
    for n, (topic, queue_id, count, size) in enumerate(ops):
        bodies = [bytes([n % 251]) * size for _ in range(count)]
        props = {"KEYS": f"k{n % 4}"}
        if count == 1:
            assert (
                master.put(topics[topic], queue_id, bodies[0], properties=props, tag_hash=n).status
                is PutStatus.PUT_OK
            )
        else:
            assert (
                master.put_batch(topics[topic], queue_id, bodies, properties=props).status is PutStatus.PUT_OK
            )
        if n % 7 == 3:
            replicate(master, replica, max_bytes)
    replicate(master, replica, max_bytes)
    assert segments(replica) == segments(master)
    assert units(replica) == units(master)
    assert messages(replica) == messages(master)
    master.reput.do_reput()  # type: ignore[union-attr]
    replica.reput.do_reput()  # type: ignore[union-attr]
    for topic in topics:
        for key in ("k0", "k1", "k2", "k3"):
            assert [m.commit_log_offset for m in replica.query(topic, key, max_num=64)] == [
                m.commit_log_offset for m in master.query(topic, key, max_num=64)
            ]
    master.close_sync()
    replica.close_sync()
