"""Read by queue offset through a tag filter, below the RPCs: the store's ``get_matching`` (units of other
tags skipped on the consume queue alone, RocketMQ ``isMatchedByConsumeQueue``), the managed ledger's
``read_matching`` on the fake and the real store, and the tag hash the broker stores for entries with
property ``TAGS``."""

from __future__ import annotations

from pathlib import Path

import pytest

from quasar.broker.tag_hash import entry_tag_hash, java_string_hash
from quasar.protocol import pb
from quasar.protocol.frame import encode_headers_and_payload
from quasar.storage import MessageStore, StoreConfig
from quasar.storage.status import GetStatus
from tests.ledger.conftest import FAST, FakeEnv, RealEnv

TOPIC = "persistent://public/default/pull"
HASH_A = java_string_hash("TagA")
HASH_B = java_string_hash("TagB")


@pytest.fixture
def store(tmp_path: Path):
    # 10 units per consume queue file, 4 KiB commit log segments: reads cross files
    store = MessageStore(
        StoreConfig(root_dir=tmp_path / "store", commit_log_file_size=4096, consume_queue_file_size=200)
    )
    store.open()
    yield store
    store.close_sync()


def _fill(store: MessageStore, tags: list[int]) -> None:
    for i, tag_hash in enumerate(tags):
        assert store.put(TOPIC, 0, f"m{i}".encode(), tag_hash=tag_hash).ok


def test_get_matching_skips_other_tags_without_reading_the_commit_log(store: MessageStore, monkeypatch):
    tags = [HASH_A if i % 3 == 0 else HASH_B for i in range(25)]  # A at 0, 3, 6, ... 24
    _fill(store, tags)
    read: list[int] = []
    reader = store._reader
    original = reader._read_message

    def spy(commit_log_offset: int, size: int, *, check_crc: bool = False):
        message = original(commit_log_offset, size, check_crc=check_crc)
        assert message is not None
        read.append(message.queue_offset)
        return message

    monkeypatch.setattr(reader, "_read_message", spy)
    result = store.get_matching(TOPIC, 0, 0, 5, frozenset({HASH_A}))
    assert result.status is GetStatus.FOUND
    assert [m.queue_offset for m in result.messages] == [0, 3, 6, 9, 12]
    assert [bytes(m.body) for m in result.messages] == [b"m0", b"m3", b"m6", b"m9", b"m12"]
    assert read == [0, 3, 6, 9, 12]  # the TagB units in between were never read from the commit log
    assert result.next_begin_offset == 13


def test_get_matching_next_offset_passes_a_filtered_out_tail(store: MessageStore):
    _fill(store, [HASH_A, HASH_B, HASH_B, HASH_B])
    first = store.get_matching(TOPIC, 0, 0, 10, frozenset({HASH_A}))
    assert [m.queue_offset for m in first.messages] == [0]
    assert first.next_begin_offset == 4  # past the TagB tail: the next pull starts at the end
    none = store.get_matching(TOPIC, 0, 1, 10, frozenset({HASH_A}))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.messages == []
    assert none.next_begin_offset == 4
    assert store.get_matching(TOPIC, 0, 4, 10, frozenset({HASH_A})).status is GetStatus.OFFSET_OVERFLOW_ONE


def test_get_matching_bounds_the_scan_and_none_means_all(store: MessageStore):
    _fill(store, [HASH_B] * 30 + [HASH_A])
    bounded = store.get_matching(TOPIC, 0, 0, 10, frozenset({HASH_A}), max_scan=12)
    assert bounded.status is GetStatus.NO_MATCHED_MESSAGE and bounded.next_begin_offset == 12
    everything = store.get_matching(TOPIC, 0, 0, 40, None)
    assert [m.queue_offset for m in everything.messages] == list(range(31))
    assert everything.next_begin_offset == 31
    assert store.get_matching("unknown", 0, 0, 1, None).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    with pytest.raises(ValueError):
        store.get_matching(TOPIC, 0, 0, 0, None)


@pytest.mark.parametrize("kind", ["fake", "real"])
async def test_ledger_read_matching_maps_positions_and_skips(kind: str, tmp_path: Path):
    env = RealEnv(FAST, tmp_path) if kind == "real" else FakeEnv(FAST)
    factory = await env.start()
    try:
        ledger = await factory.open("public/default/persistent/pull")
        for i in range(8):
            await ledger.add_entry(f"e{i}".encode(), tag_hash=HASH_A if i in (1, 6) else HASH_B)
        entries, next_offset = ledger.read_matching(0, 10, frozenset({HASH_A}), 1000, 1 << 20)
        assert [bytes(e.data) for e in entries] == [b"e1", b"e6"]
        assert [e.queue_offset for e in entries] == [1, 6]
        assert entries[1].position == ledger.table.position_of(6)
        assert next_offset == 8
        entries, next_offset = ledger.read_matching(2, 1, None, 1000, 1 << 20)
        assert [e.queue_offset for e in entries] == [2] and next_offset == 3
        assert ledger.read_matching(8, 1, None, 1000, 1 << 20) == ([], 8)
    finally:
        await env.stop()


def _entry(properties: dict[str, str], *, batch: bool = False) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    for key, value in properties.items():
        metadata.properties.add(key=key, value=value)
    if batch:
        metadata.num_messages_in_batch = 1
    return encode_headers_and_payload(metadata, b"payload")


def test_entry_tag_hash_reads_the_tags_property():
    assert entry_tag_hash(memoryview(_entry({"TAGS": "TagA", "k": "v"}))) == HASH_A
    assert entry_tag_hash(_entry({"TAGS": "TagA"})[6:]) == HASH_A  # without the checksum header
    assert entry_tag_hash(memoryview(_entry({"k": "TAGS"}))) == 0  # TAGS as a value is no tag
    assert entry_tag_hash(memoryview(_entry({}))) == 0
    assert entry_tag_hash(memoryview(_entry({"TAGS": "TagA"}, batch=True))) == 0  # a batch has no one tag
    assert entry_tag_hash(memoryview(b"\x0e\x01")) == 0  # truncated: never raises
