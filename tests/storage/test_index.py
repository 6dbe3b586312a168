"""IndexFile layout and lookup (semantics.md A4), the IndexService roll / restart rules, and
MessageStore.query (RocketMQ queryMessage with the client-side key filter)."""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.storage import MessageStore, PutStatus
from quasar.storage.index_file import (
    HASH_SLOT,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_ITEM,
    INDEX_ITEM_SIZE,
    IndexFile,
    index_file_size,
    index_key_hash,
    java_string_hash,
)
from quasar.storage.index_service import build_key

from .conftest import INDEX_ITEMS, abandon, make_config, open_store

TOPIC = "persistent://public/default/index"


def test_struct_sizes_match_the_documented_layout():
    assert INDEX_HEADER.size == INDEX_HEADER_SIZE == 40
    assert INDEX_ITEM.size == INDEX_ITEM_SIZE == 20
    assert HASH_SLOT.size == 4
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("TopicTest#key-1", "TopicTest#key-1"),
        ("polygenelubricants", -(2**31)),
        ("héllo wörld", None),
        ("emoji 🎉", None),
    ],
)
def test_java_string_hash(key: str, expected: int | str | None):
    if isinstance(expected, str) or expected is None:
        # reference: Java's s[0]*31^(n-1) + ... over UTF-16 code units, in 32-bit two's complement
        units = struct.unpack(f">{len(key.encode('utf-16-be')) // 2}H", key.encode("utf-16-be"))
        value = 0
        for unit in units:
            value = (value * 31 + unit) % 2**32
        expected = value - 2**32 if value >= 2**31 else value
    assert java_string_hash(key) == expected


def test_index_key_hash_is_non_negative():
    assert index_key_hash("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) stays negative in Java -> 0
    assert index_key_hash("hello") == 99162322
    assert all(index_key_hash(f"k{i}") >= 0 for i in range(1000))


def test_index_file_byte_layout(tmp_path: Path):
    index_file = IndexFile(tmp_path / "20250101000000000", 8, 10, create=True)
    assert index_file.index_count == 1 and index_file.is_empty
    key_hash = index_key_hash("t#a")
    assert index_file.put_key(key_hash, 4096, 1_700_000_000_000)
    assert index_file.put_key(key_hash, 8192, 1_700_000_003_500)
    buffer = bytes(index_file.buffer)
    assert INDEX_HEADER.unpack_from(buffer, 0) == (1_700_000_000_000, 1_700_000_003_500, 4096, 8192, 1, 3)
    slot = INDEX_HEADER_SIZE + (key_hash % 8) * 4
    assert HASH_SLOT.unpack_from(buffer, slot)[0] == 2  # the newest item
    items = INDEX_HEADER_SIZE + 8 * 4
    assert INDEX_ITEM.unpack_from(buffer, items + 1 * 20) == (key_hash, 4096, 0, 0)
    assert INDEX_ITEM.unpack_from(buffer, items + 2 * 20) == (key_hash, 8192, 3, 1)  # 3 s, chained to item 1
    index_file.flush()
    index_file.close()
    reopened = IndexFile(tmp_path / "20250101000000000", 8, 10, create=False)
    assert reopened.select_phy_offsets(key_hash, 10, 0, 2**62) == [8192, 4096]
    reopened.close()


def test_index_file_fills_up(tmp_path: Path):
    index_file = IndexFile(tmp_path / "20250101000000000", 4, 5, create=True)
    assert [index_file.put_key(i, i, 1000 + i) for i in range(5)] == [True, True, True, True, False]
    assert index_file.is_full()
    index_file.close()


_items = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]), st.integers(0, 20_000)),
    min_size=0,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    items=_items,
    query_key=st.sampled_from(["a", "b", "c", "zz"]),
    begin=st.integers(-2000, 22_000),
    length=st.integers(0, 25_000),
    max_num=st.integers(1, 70),
    slots=st.sampled_from([1, 3, 64]),
)
def test_index_file_select_matches_a_model(tmp_path_factory, items, query_key, begin, length, max_num, slots):
    """Any keys and times: select returns exactly the items of that hash whose (second-resolution) time is in
    range, newest first, capped at max_num."""
    directory = tmp_path_factory.mktemp("index")
    base = 1_700_000_000_000
    index_file = IndexFile(directory / "20250101000000000", slots, len(items) + 2, create=True)
    items = sorted(items, key=lambda item: item[1])  # the store indexes in store-time order
    model = []
    for n, (key, millis) in enumerate(items):
        key_hash = index_key_hash(f"t#{key}")
        assert index_file.put_key(key_hash, n * 100, base + millis)
        model.append((key_hash, n * 100, base + millis))
    begin_ms, end_ms = base + begin, base + begin + length
    query_hash = index_key_hash(f"t#{query_key}")
    first = model[0][2] if model else 0
    expected = [
        offset
        for key_hash, offset, stored in reversed(model)
        if key_hash == query_hash and begin_ms <= first + (stored - first) // 1000 * 1000 <= end_ms
    ][:max_num]
    assert index_file.select_phy_offsets(query_hash, max_num, begin_ms, end_ms) == expected
    index_file.close()


# -- the store -----------------------------------------------------------------------------------------------


def _catch_up(store: MessageStore) -> None:
    assert store.reput is not None
    store.reput.do_reput()


def _put(store: MessageStore, i: int, keys: str | None, topic: str = TOPIC):
    properties = {"KEYS": keys} if keys else None
    result = store.put(topic, 0, f"body-{i}".encode(), properties=properties)
    assert result.status is PutStatus.PUT_OK
    return result


def test_query_by_keys_property_and_time(root: Path):
    store = open_store(root)
    results = {}
    for i in range(300):  # several index files (99 items each in tests)
        results[i] = _put(store, i, f"k{i % 5} all" if i % 3 else None)
    _catch_up(store)
    assert len(store.index_service.files) > 3
    found = store.query(TOPIC, "k2", max_num=64)
    expected = [i for i in range(300) if i % 3 and i % 5 == 2][-64:]
    assert [bytes(m.body) for m in found] == [f"body-{i}".encode() for i in expected]
    assert [m.queue_offset for m in found] == expected
    assert len(store.query(TOPIC, "all", max_num=1000)) == 64  # RocketMQ maxMsgsNumBatch
    assert store.query(TOPIC, "k2", max_num=3) == found[-3:]
    assert store.query(TOPIC, "nope") == []
    assert store.query("other-topic", "k2") == []
    # time range: only records stored within [t, t] of one of them
    target = found[10]
    in_range = store.query(TOPIC, "k2", target.store_timestamp, target.store_timestamp, 64)
    assert target.commit_log_offset in {m.commit_log_offset for m in in_range}
    assert all(m.store_timestamp == target.store_timestamp for m in in_range)
    assert store.query(TOPIC, "k2", 0, results[0].store_timestamp - 1) == []
    store.close_sync()


def test_query_filters_hash_collisions(root: Path):
    # "Aa" and "BB" have the same Java hash: the index returns both, the store keeps the right one
    assert java_string_hash(build_key(TOPIC, "Aa")) == java_string_hash(build_key(TOPIC, "BB"))
    store = open_store(root)
    _put(store, 0, "Aa")
    _put(store, 1, "BB")
    _catch_up(store)
    assert len(store.index_service.query_offsets(TOPIC, "Aa", 10, 0, 2**62)) == 2
    assert [bytes(m.body) for m in store.query(TOPIC, "Aa")] == [b"body-0"]
    assert [bytes(m.body) for m in store.query(TOPIC, "BB")] == [b"body-1"]
    store.close_sync()


def test_key_extractor_runs_on_the_reput_path(root: Path):
    calls = []

    def extractor(topic: str, body: memoryview) -> list[str]:
        calls.append(bytes(body))
        return bytes(body).decode().split(",")[1:]

    store = MessageStore(make_config(root), key_extractor=extractor)
    store.open()
    store.put(TOPIC, 0, b"m0,apple,pear")
    store.put(TOPIC, 0, b"m1,pear")
    store.put(TOPIC, 0, b"m2")
    assert calls == []  # nothing parsed on put
    _catch_up(store)
    assert len(calls) == 3
    assert [bytes(m.body) for m in store.query(TOPIC, "pear")] == [b"m0,apple,pear", b"m1,pear"]
    assert [bytes(m.body) for m in store.query(TOPIC, "apple")] == [b"m0,apple,pear"]
    store.close_sync()


def test_failing_key_extractor_does_not_stop_indexing(root: Path):
    def extractor(topic: str, body: memoryview) -> list[str]:
        if bytes(body) == b"bad":
            raise ValueError("unparsable")
        return [bytes(body).decode()]

    store = MessageStore(make_config(root), key_extractor=extractor)
    store.open()
    for body in (b"one", b"bad", b"two"):
        store.put(TOPIC, 0, body)
    _catch_up(store)
    assert store.index_service.extractor_errors == 1
    assert [bytes(m.body) for m in store.query(TOPIC, "two")] == [b"two"]
    store.close_sync()


def test_index_survives_clean_restart_without_duplicates(root: Path):
    store = open_store(root)
    for i in range(150):
        _put(store, i, f"k{i % 2}")
    store.close_sync()  # the close dispatches what is left and flushes the index
    store = open_store(root)
    assert store.recovery is not None
    assert store.reput is not None and store.reput.dispatch_behind_bytes == 0
    for i in range(150, 160):
        _put(store, i, f"k{i % 2}")
    _catch_up(store)
    found = store.query(TOPIC, "k1", max_num=64)
    assert [m.queue_offset for m in found] == [i for i in range(160) if i % 2][-64:]
    store.close_sync()


def test_unclean_exit_rebuilds_the_newest_index_files(root: Path):
    store = open_store(root)
    for i in range(250):
        if i == 249:  # the newest file's last record in a later millisecond than the full file's last one
            time.sleep(0.002)
        _put(store, i, f"k{i % 3}")
    _catch_up(store)
    newest = store.index_service.files[-1].path.name
    abandon(store)  # no checkpoint of the newest index file
    store = open_store(root)
    names = [f.path.name for f in store.index_service.files]
    assert newest not in names  # destroyed: its end timestamp is past the checkpoint (RocketMQ rule)
    _catch_up(store)  # rebuilt from the commit log
    found = store.query(TOPIC, "k0", max_num=64)
    assert [m.queue_offset for m in found] == [i for i in range(250) if i % 3 == 0][-64:]
    store.close_sync()


def test_lost_index_directory_is_rebuilt(root: Path):
    store = open_store(root)
    for i in range(120):
        _put(store, i, f"k{i % 4}")
    store.close_sync()
    shutil.rmtree(root / "index")
    store = open_store(root)
    # a clean exit: the checkpoint says the index was complete, yet the files are gone; rebuild from the start
    _catch_up(store)
    found = store.query(TOPIC, "k3", max_num=64)
    assert [m.queue_offset for m in found] == [i for i in range(120) if i % 4 == 3]
    store.close_sync()


def test_index_disabled(root: Path):
    store = open_store(root, message_index_enable=False)
    _put(store, 0, "k")
    assert store.query(TOPIC, "k") == []
    assert not (root / "index").exists() or not any((root / "index").iterdir())
    store.close_sync()


async def test_query_with_running_reput_thread(root: Path):
    store = open_store(root)
    await store.start()
    for i in range(50):
        _put(store, i, f"key-{i}")
    for _ in range(1000):
        if store.statistics().dispatch_behind_bytes == 0:
            break
        await asyncio.sleep(0.01)
    assert [bytes(m.body) for m in store.query(TOPIC, "key-42")] == [b"body-42"]
    await store.close()


def test_items_per_file_in_tests():
    assert INDEX_ITEMS == 100


class _Clock:
    """Stands in for the ``time`` module of message_store: store timestamps chosen by the test."""

    def __init__(self) -> None:
        self.now_ms = 0

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.lists(st.sampled_from(["a", "b", "c", "Aa", "BB"]), max_size=3), st.integers(0, 5000)),
        max_size=120,
    ),
    query_key=st.sampled_from(["a", "b", "Aa", "BB", "zz"]),
    begin=st.integers(-1000, 400_000),
    length=st.integers(0, 400_000),
    max_num=st.integers(1, 70),
)
def test_store_query_returns_exactly_the_matching_records(
    tmp_path_factory, records, query_key, begin, length, max_num
):
    """Any keys (with Java-hash collisions: "Aa"/"BB") and store times across several index files: a query
    returns exactly the newest min(max_num, 64) records with that key stored in [begin, end], oldest first."""
    root = tmp_path_factory.mktemp("query") / "store"
    clock = _Clock()
    clock.now_ms = base = 1_700_000_000_000
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("quasar.storage.message_store.time", clock)
        store = open_store(root)
        model = []
        for n, (keys, step) in enumerate(records):
            clock.now_ms += step  # store times never go backwards
            properties = {"KEYS": " ".join(keys)} if keys else None
            result = store.put(TOPIC, 0, f"r{n}".encode(), properties=properties)
            model.append((set(keys), result.store_timestamp, result.commit_log_offset))
        _catch_up(store)
        begin_ms, end_ms = base + begin, base + begin + length
        expected = [
            offset for keys, stored, offset in model if query_key in keys and begin_ms <= stored <= end_ms
        ]
        expected = expected[-min(max_num, 64) :]
        found = store.query(TOPIC, query_key, begin_ms, end_ms, max_num)
        assert [m.commit_log_offset for m in found] == expected
        store.close_sync()
