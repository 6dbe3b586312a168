"""ManagedCursor: reads, individual and cumulative acks across ledgers, persistence and restore."""

import asyncio

import pytest

from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.errors import (
    CursorAlreadyClosedError,
    CursorNotFoundError,
    InvalidCursorPositionError,
    MarkDeletingMarkedPositionError,
    MetadataError,
)
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.position import EARLIEST, LATEST, Position
from quasar.ledger.range_set import PositionRangeSet
from tests.ledger.conftest import stored_json

TOPIC = "persistent://public/default/cursors"


async def filled(env, count=6):
    ledger = await env.factory.open(TOPIC)
    positions = [await ledger.add_entry(b"e%d" % i) for i in range(count)]
    return ledger, positions


async def test_initial_positions(env):
    ledger, positions = await filled(env, 4)
    latest = await ledger.open_cursor("latest", "latest")
    earliest = await ledger.open_cursor("earliest", "earliest")
    assert latest.mark_delete_position == positions[-1]
    assert latest.read_entries(10) == [] and latest.number_of_entries_in_backlog == 0
    assert earliest.mark_delete_position == Position(positions[0].ledger_id, -1)
    assert earliest.read_position == positions[0]
    assert earliest.number_of_entries_in_backlog == 4
    assert await ledger.open_cursor("earliest", "latest") is earliest  # existing cursor: unchanged
    new = await ledger.add_entry(b"new")
    assert [e.position for e in latest.read_entries(10)] == [new]


async def test_individual_acks_advance_mark_delete_across_a_ledger_boundary(env):
    ledger, p = await filled(env)  # p[0..2] in ledger A, p[3..5] in ledger B
    cursor = await ledger.open_cursor("sub", "earliest")
    assert [e.position for e in cursor.read_entries(10)] == p
    cursor.delete([p[3], p[2], p[1]])
    assert cursor.mark_delete_position == Position(p[0].ledger_id, -1)
    assert list(cursor.individually_deleted) == [
        (p[0], p[2]),  # (A:0, A:2]
        (Position(p[3].ledger_id, -1), p[3]),  # (B:-1, B:0]: ranges of different ledgers stay apart
    ]
    assert cursor.number_of_entries_in_backlog == 3
    cursor.delete([p[0]])
    assert cursor.mark_delete_position == p[3]  # jumped over A:0..A:2 and on into ledger B
    assert cursor.individually_deleted.is_empty
    cursor.delete([p[5]])
    assert cursor.mark_delete_position == p[3] and cursor.is_acked(p[5]) and not cursor.is_acked(p[4])
    assert cursor.number_of_entries_in_backlog == 1
    cursor.delete([p[0], p[3]])  # at or below mark-delete: ignored
    assert cursor.number_of_entries_in_backlog == 1


async def test_reads_skip_individually_deleted_entries(env):
    ledger, p = await filled(env)
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.delete([p[0], p[1], p[3], p[4]])
    assert cursor.mark_delete_position == p[1]
    assert [e.position for e in cursor.read_entries(10)] == [p[2], p[5]]
    assert not cursor.has_more_entries()
    cursor.rewind()
    assert cursor.read_position == p[2]
    assert [e.position for e in cursor.read_entries(1)] == [p[2]]
    assert [e.position for e in cursor.read_entries(1)] == [p[5]]


async def test_read_entries_respects_max_bytes(env):
    ledger = await env.factory.open(TOPIC)
    positions = [await ledger.add_entry(b"x" * 100) for _ in range(5)]
    cursor = await ledger.open_cursor("sub", "earliest")
    assert [e.position for e in cursor.read_entries(10, max_bytes=250)] == positions[:2]
    assert [e.position for e in cursor.read_entries(10, max_bytes=1)] == positions[2:3]  # at least one
    with pytest.raises(ValueError):
        cursor.read_entries(0)


async def test_mark_delete_seek_and_reset(env):
    ledger, p = await filled(env)
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.delete([p[4]])
    cursor.mark_delete(p[3])  # cumulative: jumps over the acked p[4]
    assert cursor.mark_delete_position == p[4]
    assert cursor.read_position == p[5]
    with pytest.raises(MarkDeletingMarkedPositionError):
        cursor.mark_delete(p[1])
    with pytest.raises(InvalidCursorPositionError):
        cursor.mark_delete(Position(p[5].ledger_id, 3))  # past the last confirmed entry
    with pytest.raises(InvalidCursorPositionError):
        cursor.delete([Position(p[5].ledger_id, 9)])  # names no entry
    cursor.seek(p[0])  # not before mark-delete without force
    assert cursor.read_position == p[5]
    cursor.seek(p[1], force=True)
    assert cursor.read_position == p[1]
    cursor.reset_cursor(p[2])
    assert cursor.mark_delete_position == p[1] and cursor.read_position == p[2]
    assert cursor.individually_deleted.is_empty and cursor.number_of_entries_in_backlog == 4
    cursor.reset_cursor(EARLIEST)
    assert cursor.read_position == p[0] and cursor.mark_delete_position == Position(p[0].ledger_id, -1)
    cursor.reset_cursor(LATEST)
    assert cursor.mark_delete_position == p[5] and cursor.number_of_entries_in_backlog == 0


async def test_durable_cursor_restored_with_its_ranges(any_env):
    ledger = await any_env.factory.open(TOPIC)
    p = [await ledger.add_entry(b"e%d" % i) for i in range(6)]
    cursor = await ledger.open_cursor("durable", "earliest")
    cursor.delete([p[0], p[2], p[4], p[5]])
    ranges = list(cursor.individually_deleted)
    factory = await any_env.restart()
    restored = (await factory.open(TOPIC)).cursors["durable"]
    assert restored.mark_delete_position == p[0]
    assert list(restored.individually_deleted) == ranges
    assert restored.read_position == p[1]
    assert [bytes(e.data) for e in restored.read_entries(10)] == [b"e1", b"e3"]
    assert restored.number_of_entries_in_backlog == 2


async def test_non_durable_cursor_persists_nothing(env):
    ledger, p = await filled(env)
    before = env.metadata.write_count
    reader = ledger.new_non_durable_cursor(p[2])
    assert reader.read_position == p[2] and not reader.durable
    reader.delete([p[2], p[3]])
    await reader.flush()
    await env.factory.flush_cursors()
    assert env.metadata.write_count == before
    assert env.metadata.keys("/cursors") == []
    exclusive = ledger.new_non_durable_cursor(p[2], inclusive=False)
    assert exclusive.read_position == p[3]
    at_end = ledger.new_non_durable_cursor(None)
    assert at_end.read_entries(5) == []
    assert "reader" not in "".join(env.metadata.keys())


async def test_background_flusher_persists_changes_and_close_persists_all(env):
    ledger, p = await filled(env)
    cursor = await ledger.open_cursor("sub", "earliest")
    key = CursorStore(env.metadata, TOPIC).path("sub")
    assert (await stored_json(env.metadata, key))["mark_delete"] == [p[0].ledger_id, -1]  # written at open
    cursor.mark_delete(p[1])
    assert cursor.is_dirty
    for _ in range(500):  # the flusher runs every 10 ms; wait for its write (bounded)
        if not cursor.is_dirty:
            break
        await asyncio.sleep(0.01)
    assert (await stored_json(env.metadata, key))["mark_delete"] == list(p[1])
    cursor.delete([p[3]])
    await env.factory.close()
    assert (await stored_json(env.metadata, key))["individually_deleted"] == [[p[3].ledger_id, -1, 0]]
    with pytest.raises(CursorAlreadyClosedError):
        cursor.read_entries(1)


async def test_persisted_ranges_are_capped():
    from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore

    store, metadata = FakeMessageStore(), FakeMetadataStore()
    config = ManagedLedgerConfig(max_unacked_ranges_to_persist=2, min_ledger_rollover_time_ms=0)
    factory = ManagedLedgerFactory(store, metadata, config)
    await factory.start()
    ledger = await factory.open(TOPIC)
    p = [await ledger.add_entry(b"e") for _ in range(10)]
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.delete([p[1], p[3], p[5], p[7]])
    await factory.close()
    factory = ManagedLedgerFactory(store, metadata, config)
    await factory.start()
    restored = (await factory.open(TOPIC)).cursors["sub"]
    assert [hi for _, hi in restored.individually_deleted] == [p[1], p[3]]  # the lowest two ranges
    assert [e.position for e in restored.read_entries(10)] == [p[0], p[2], p[4], p[5], p[6], p[7], p[8], p[9]]
    await factory.close()


async def test_closed_durable_cursor_reopens_from_its_state(env):
    ledger, p = await filled(env)
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.delete([p[0], p[1], p[4]])
    await cursor.close()
    assert cursor.is_closed and "sub" not in ledger.cursors
    with pytest.raises(CursorAlreadyClosedError):
        cursor.mark_delete(p[2])
    again = await ledger.open_cursor("sub", "latest")  # persisted state wins over the initial position
    assert again is not cursor
    assert again.mark_delete_position == p[1] and again.is_acked(p[4]) and not again.is_acked(p[2])


async def test_invalid_individual_ack_acks_nothing(env):
    ledger, p = await filled(env)
    cursor = await ledger.open_cursor("sub", "earliest")
    with pytest.raises(InvalidCursorPositionError) as info:
        cursor.delete([p[0], Position(p[0].ledger_id, 3)])
    assert info.value.position == Position(p[0].ledger_id, 3)
    assert not cursor.is_acked(p[0]) and not cursor.is_dirty


async def test_delete_cursor_removes_its_state(env):
    ledger, _ = await filled(env, 2)
    await ledger.open_cursor("gone", "latest")
    key = CursorStore(env.metadata, TOPIC).path("gone")
    assert await stored_json(env.metadata, key) is not None
    await ledger.delete_cursor("gone")
    assert await stored_json(env.metadata, key) is None and "gone" not in ledger.cursors
    with pytest.raises(CursorNotFoundError):
        await ledger.delete_cursor("gone")
    factory = await env.restart()
    assert "gone" not in (await factory.open(TOPIC)).cursors


async def test_cursor_names_are_escaped_and_nested_ledger_names_kept_apart(env):
    a = await env.factory.open("ns/t")
    b = await env.factory.open("ns/t/x")
    await a.open_cursor("s/1", "latest")
    await b.open_cursor("s", "latest")
    factory = await env.restart()
    assert list((await factory.open("ns/t")).cursors) == ["s/1"]
    assert list((await factory.open("ns/t/x")).cursors) == ["s"]


def test_malformed_cursor_state_raises_metadata_error():
    with pytest.raises(MetadataError):
        CursorSnapshot.from_json({"version": 1, "name": "x", "mark_delete": [1], "individually_deleted": []})
    with pytest.raises(MetadataError):
        CursorSnapshot.from_json(
            {"version": 1, "name": "x", "mark_delete": [1, 2], "individually_deleted": [[1, 5, 2]]}
        )
    snapshot = CursorSnapshot.take(
        "x", Position(1, 2), PositionRangeSet([(Position(1, 3), Position(1, 5))]), max_ranges=10, now_ms=5
    )
    assert CursorSnapshot.from_json(snapshot.to_json()) == snapshot
