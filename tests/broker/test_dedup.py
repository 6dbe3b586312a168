"""MessageDeduplication (semantics.md B4) on a managed ledger over the in-memory fake store."""

from __future__ import annotations

import struct

import pytest

from quasar.broker.dedup import DEDUP_CURSOR_NAME, DedupStatus, MessageDeduplication
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

CONFIG = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_ms=0)


def entry(producer: str, sequence_id: int, highest: int | None = None) -> bytes:
    md = MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1)
    if highest is not None:
        md.highest_sequence_id = highest
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"payload"


class Env:
    def __init__(self) -> None:
        self.store = FakeMessageStore()
        self.metadata = FakeMetadataStore()
        self.factory: ManagedLedgerFactory | None = None

    async def open(self):
        self.factory = ManagedLedgerFactory(self.store, self.metadata, CONFIG)
        await self.factory.start()
        return await self.factory.open("persistent://public/default/t")

    async def close(self) -> None:
        assert self.factory is not None
        await self.factory.close()


async def publish(
    ledger, dedup: MessageDeduplication, producer: str, seq: int, highest: int = 0
) -> DedupStatus:
    status = dedup.is_duplicate(producer, seq, highest)
    if status is DedupStatus.NOT_DUP:
        position = await ledger.add_entry(entry(producer, seq, highest or None))
        dedup.record_persisted(producer, max(seq, highest), position)
    return status


async def test_pushed_but_not_persisted_is_unknown_then_dup():
    env = Env()
    ledger = await env.open()
    dedup = MessageDeduplication(ledger)
    await dedup.enable()
    assert dedup.is_duplicate("p", 0, 0) is DedupStatus.NOT_DUP
    assert dedup.is_duplicate("p", 0, 0) is DedupStatus.UNKNOWN  # first copy still in flight
    position = await ledger.add_entry(entry("p", 0))
    dedup.record_persisted("p", 0, position)
    assert dedup.is_duplicate("p", 0, 0) is DedupStatus.DUP
    assert dedup.is_duplicate("p", 1, 0) is DedupStatus.NOT_DUP
    assert dedup.is_duplicate("other", 0, 0) is DedupStatus.NOT_DUP
    dedup.record_failed("p")  # the add of seq 1 failed: a resend is judged afresh
    assert dedup.is_duplicate("p", 1, 0) is DedupStatus.NOT_DUP
    await env.close()


async def test_batch_records_highest_sequence_id():
    env = Env()
    ledger = await env.open()
    dedup = MessageDeduplication(ledger)
    await dedup.enable()
    assert await publish(ledger, dedup, "p", 10, 19) is DedupStatus.NOT_DUP
    assert dedup.last_published_sequence_id("p") == 19
    assert dedup.is_duplicate("p", 15, 0) is DedupStatus.DUP
    assert dedup.is_duplicate("p", 20, 25) is DedupStatus.NOT_DUP
    await env.close()


@pytest.mark.parametrize("crash", [False, True])
async def test_snapshot_and_replay_rebuild_the_maps(crash):
    env = Env()
    ledger = await env.open()
    dedup = MessageDeduplication(ledger, entries_interval=3)
    await dedup.enable()
    for seq in range(7):
        await publish(ledger, dedup, "a", seq)
    await publish(ledger, dedup, "b", 40, 44)
    cursor = ledger.cursors[DEDUP_CURSOR_NAME]
    # snapshots after entries 3 and 6: the cursor holds a's persisted sequence id at the 6th entry
    assert cursor.properties == {"a": 5}
    await ledger.flush_cursors()
    if crash:
        env.store.crash()
        env.factory = None
    else:
        await env.close()
    ledger = await env.open()
    assert DEDUP_CURSOR_NAME in ledger.cursors
    dedup = MessageDeduplication(ledger, entries_interval=3)
    await dedup.enable()
    assert dedup.highest_sequenced_persisted == {"a": 6, "b": 44}
    assert dedup.is_duplicate("a", 6, 0) is DedupStatus.DUP
    assert dedup.is_duplicate("b", 44, 0) is DedupStatus.DUP
    assert dedup.is_duplicate("a", 7, 0) is DedupStatus.NOT_DUP
    await env.close()


async def test_disable_deletes_the_cursor_and_forgets():
    env = Env()
    ledger = await env.open()
    dedup = MessageDeduplication(ledger)
    await dedup.enable()
    await publish(ledger, dedup, "p", 3)
    await dedup.disable()
    assert not dedup.enabled
    assert DEDUP_CURSOR_NAME not in ledger.cursors
    assert dedup.last_published_sequence_id("p") == -1
    await env.close()
    assert not [k for k in env.metadata.keys("/cursors") if DEDUP_CURSOR_NAME in k]


async def test_bad_interval_is_refused():
    env = Env()
    with pytest.raises(ValueError):
        MessageDeduplication(await env.open(), entries_interval=0)
    await env.close()
