"""Topic compaction in process, over the in-memory fake store: the batch rebuild (RawBatchConverter), the
two-phase compactor and its generations, reads by original position (also after the topic's ledgers were
trimmed), and the compaction service's status, conflicts and threshold."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from quasar.broker.compaction.compactor import compact
from quasar.broker.compaction.messages import read_entry, rebuild_entry
from quasar.broker.compaction.reads import CompactedReads
from quasar.broker.compaction.service import CompactionInProgressError, CompactionService
from quasar.broker.compaction.view import (
    COMPACTION_SUBSCRIPTION,
    CompactedView,
    compacted_last_message_id,
    compacted_ledger_name,
    load_compacted_view,
)
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.compression import CompressionType, compress
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.metadata import encode_batch, parse_headers_and_payload
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata, SingleMessageMetadata
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

CONFIG = ManagedLedgerConfig(
    max_entries_per_ledger=3, min_ledger_rollover_time_ms=0, cursor_persist_interval_ms=10
)
TOPIC = "persistent://public/default/compacted"


def single(value: bytes, key: str | None = None, *, null_value: bool = False) -> bytes:
    md = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    if null_value:
        md.null_value = True
    return encode_headers_and_payload(md, value)


def batch(
    items: list[tuple[str | None, bytes]], compression: CompressionType = CompressionType.NONE
) -> bytes:
    singles = []
    for key, value in items:
        meta = SingleMessageMetadata()
        if key is not None:
            meta.partition_key = key
        singles.append((meta, value))
    body = encode_batch(singles)
    md = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(items))
    md.uncompressed_size = len(body)
    md.compression = compression
    return encode_headers_and_payload(md, compress(compression, body) if compression else body)


def values(data: bytes | memoryview) -> list[tuple[str | None, bytes]]:
    """(key, value) of every message of a stored entry."""
    parsed = read_entry(data)
    if not parsed.batch:
        payload = parse_headers_and_payload(data).payload
        return [(parsed.messages[0].key, bytes(payload))]
    return [(m.key, bytes(item)) for m, (_, item) in zip(parsed.messages, parsed.items, strict=True)]


@dataclass
class FakeTopic:
    ledger: ManagedLedger
    name: TopicName = field(default_factory=lambda: TopicName.parse(TOPIC))
    compacted_view: CompactedView | None = None
    is_persistent: bool = True


@pytest.fixture
async def env():
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    factories: list[ManagedLedgerFactory] = []

    async def start() -> tuple[ManagedLedgerFactory, FakeTopic]:
        factory = ManagedLedgerFactory(store, metadata, CONFIG)
        await factory.start()
        factories.append(factory)
        return factory, FakeTopic(await factory.open(TOPIC))

    yield start
    for factory in factories:
        await factory.close()


# ---------------------------------------------------------------------- messages
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZLIB])
def test_a_batch_is_rebuilt_with_its_surviving_messages(compression):
    data = batch([("a", b"1"), ("b", b"2"), (None, b"3"), ("a", b"")], compression)
    parsed = read_entry(data)
    assert [(m.key, m.delete) for m in parsed.messages] == [
        ("a", False),
        ("b", False),
        (None, False),
        ("a", True),
    ]
    rebuilt = rebuild_entry(data, parsed, [False, True, False, False])
    assert rebuilt is not None
    md = parse_headers_and_payload(rebuilt).metadata
    assert (md.num_messages_in_batch, md.compression) == (1, compression)
    assert values(rebuilt) == [("b", b"2")]
    assert rebuild_entry(data, parsed, [False] * 4) is None
    assert rebuild_entry(data, parsed, [True] * 4) == data  # kept whole: the stored bytes


def test_single_messages_keys_and_deletes():
    assert [(m.key, m.delete) for m in read_entry(single(b"v", "k")).messages] == [("k", False)]
    assert [(m.key, m.delete) for m in read_entry(single(b"", "k")).messages] == [("k", True)]
    assert [(m.key, m.delete) for m in read_entry(single(b"v", "k", null_value=True)).messages] == [
        ("k", True)
    ]
    assert read_entry(single(b"v")).messages[0].key is None


# ---------------------------------------------------------------------- compactor and view
async def _publish(ledger: ManagedLedger, entries: list[bytes]) -> list[Position]:
    return [await ledger.add_entry(data) for data in entries]


async def test_the_compactor_keeps_the_latest_message_per_key_across_generations(env):
    factory, topic = await env()
    positions = await _publish(
        topic.ledger,
        [
            single(b"a1", "a"),
            single(b"b1", "b"),
            batch([("a", b"a2"), ("c", b"c1"), (None, b"x")]),
            single(b"", "b"),  # deletes b
            single(b"keyless"),
            single(b"d1", "d"),
        ],
    )
    view = await compact(topic, factory)
    assert view is not None and topic.compacted_view is view
    assert view.horizon == positions[-1]
    got = view.read(Position(-1, -1), 10)
    assert [e.position for e in got] == [positions[2], positions[5]]  # original positions
    assert [values(e.data) for e in got] == [[("a", b"a2"), ("c", b"c1")], [("d", b"d1")]]
    assert await compact(topic, factory) is view  # nothing new: the same view

    more = await _publish(topic.ledger, [single(b"c2", "c"), single(b"", "d"), single(b"e1", "e")])
    second = await compact(topic, factory)
    assert second is not None and second.horizon == more[-1]
    got = second.read(Position(-1, -1), 10)
    assert [e.position for e in got] == [positions[2], more[0], more[2]]
    assert [values(e.data) for e in got] == [[("a", b"a2")], [("c", b"c2")], [("e", b"e1")]]
    assert second.get(more[0]) is not None and second.get(positions[5]) is None
    assert compacted_last_message_id(second, topic.ledger.last_confirmed_entry) == (*more[2], -1)
    assert compacted_last_message_id(second, Position(more[2].ledger_id, more[2].entry_id + 1)) is None

    compacted = factory.get(compacted_ledger_name(TOPIC))
    assert compacted is not None
    await _publish(topic.ledger, [single(b"f", "f"), single(b"g", "g"), single(b"h", "h")])
    third = await compact(topic, factory)
    assert third is not None and third.size == 6
    await factory.flush_and_trim()  # ledgers wholly behind the newest generation (its __view cursor) go
    assert second.start < compacted.first_available_offset <= third.start
    assert [e.position for e in third.read(Position(-1, -1), 10)][:3] == [positions[2], more[0], more[2]]

    cursor = topic.ledger.cursors[COMPACTION_SUBSCRIPTION]
    assert cursor.mark_delete_position == third.horizon


async def test_the_view_survives_a_restart(env):
    factory, topic = await env()
    positions = await _publish(topic.ledger, [single(b"1", "k"), single(b"2", "k")])
    await compact(topic, factory)
    await factory.close()
    factory, topic = await env()
    view = await load_compacted_view(factory, topic.ledger)
    assert view is not None and view.horizon == positions[-1]
    assert [(e.position, values(e.data)) for e in view.read(Position(-1, -1), 10)] == [
        (positions[1], [("k", b"2")])
    ]


async def test_a_cursor_at_the_head_reads_the_view_of_trimmed_ledgers_then_the_topic(env):
    factory, topic = await env()
    ledger = topic.ledger
    positions = await _publish(ledger, [single(b"%d" % i, f"k{i % 2}") for i in range(7)])
    view = await compact(topic, factory)
    assert view is not None
    ledger.set_retention(0, 0)  # only now: with no cursor at all the background flusher would trim it first
    await ledger.trim_ledgers()  # the __compaction cursor is the only one: the full ledgers go
    assert ledger.first_position > positions[1]
    after = await ledger.add_entry(single(b"new", "k0"))
    cursor = ledger.new_non_durable_cursor(ledger.first_position)
    reads = CompactedReads()
    got = reads.read(view, cursor, 10)
    assert got is not None
    assert [values(e.data)[0] for e in got] == [("k1", b"5"), ("k0", b"6")]
    assert [e.position for e in got] == positions[5:]
    assert reads.read(view, cursor, 10) is None  # the view is behind: the cursor reads past the horizon
    assert [e.position for e in cursor.read_entries(10)] == [after]
    reads.reset()  # a rewind at the head reads the view again (acks of trimmed positions are not kept)
    cursor.rewind()
    again = reads.read(view, cursor, 10)
    assert again is not None and [e.position for e in again] == positions[5:]


async def test_acknowledged_view_entries_are_not_read_again(env):
    factory, topic = await env()
    positions = await _publish(topic.ledger, [single(b"%d" % i, f"k{i}") for i in range(4)])
    view = await compact(topic, factory)
    assert view is not None
    cursor = await topic.ledger.open_cursor("sub", "earliest")
    cursor.delete([positions[1], positions[2]])
    got = CompactedReads().read(view, cursor, 10)
    assert got is not None and [e.position for e in got] == [positions[0], positions[3]]


# ---------------------------------------------------------------------- service
async def test_status_conflicts_and_threshold(env):
    factory, topic = await env()
    await _publish(topic.ledger, [single(b"v" * 100, "k") for _ in range(5)])
    thresholds: dict[str, int | None] = {"public/default": None}
    service = CompactionService(factory, {TOPIC: topic}, thresholds.__getitem__, monitor_interval_s=0.01)
    try:
        assert service.status(topic.name) == {"status": "NOT_RUN", "lastError": ""}
        assert service.check_thresholds() == []  # broker default 0: off
        service.trigger(topic)  # type: ignore[arg-type]
        assert service.status(topic.name)["status"] == "RUNNING"
        with pytest.raises(CompactionInProgressError):
            service.trigger(topic)  # type: ignore[arg-type]
        await service.wait(topic.name)
        assert service.status(topic.name) == {"status": "SUCCESS", "lastError": ""}
        assert topic.compacted_view is not None

        await _publish(topic.ledger, [single(b"w" * 100, "k") for _ in range(5)])
        thresholds["public/default"] = 10_000  # above the backlog past the horizon (5 small entries)
        assert service.check_thresholds() == []
        thresholds["public/default"] = 100
        service.start()  # the monitor finds it past the threshold
        for _ in range(200):
            if topic.compacted_view.horizon == topic.ledger.last_confirmed_entry:
                break
            await asyncio.sleep(0.01)
        assert topic.compacted_view.horizon == topic.ledger.last_confirmed_entry
    finally:
        await service.close()
    with pytest.raises(Exception, match="shutting down"):
        service.trigger(topic)  # type: ignore[arg-type]
