"""Trimming of consumed ledgers under the retention policy (semantics.md B1 "Retention and trimming")."""

import asyncio

import pytest

from quasar.ledger.errors import ManagedLedgerFencedError, ManagedLedgerStorageError
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.paths import ledger_table_path
from quasar.metadata.port import encode_json
from quasar.storage.errors import StorageError
from tests.ledger.conftest import stored_json

TOPIC = "persistent://public/default/trim"


async def fill(ledger, count):
    return [await ledger.add_entry(b"x" * 10) for _ in range(count)]


async def test_ledgers_every_cursor_passed_are_trimmed(any_env):
    ledger = await any_env.factory.open(TOPIC)
    ledger.set_retention(0, 0)  # Pulsar's broker default: consumed ledgers go
    cursor = await ledger.open_cursor("sub", "earliest")
    positions = await fill(ledger, 8)  # ledgers of 3 entries: [0..2] [3..5] [6..7] (current)
    assert len(ledger.ledgers) == 3
    assert await ledger.trim_ledgers() == []  # nothing acknowledged
    cursor.mark_delete(positions[4])  # passes the first ledger only
    assert await ledger.trim_ledgers() == [positions[0].ledger_id]
    assert [r.ledger_id for r in ledger.ledgers] == [positions[3].ledger_id, positions[6].ledger_id]
    assert ledger.first_position == positions[3]
    assert [e.position for e in cursor.read_entries(10)] == positions[5:]
    cursor.mark_delete(positions[7])  # the current ledger is never deleted
    assert await ledger.trim_ledgers() == [positions[3].ledger_id]
    factory = await any_env.restart()
    ledger = await factory.open(TOPIC)
    assert ledger.retention == (-1, -1)  # the library default: keep everything until told otherwise
    assert ledger.ledgers[0].ledger_id == positions[6].ledger_id
    assert ledger.get_entry(positions[1]) is None
    assert ledger.cursors["sub"].mark_delete_position == positions[7]


async def test_retention_time_and_size_keep_consumed_ledgers(env):
    ledger = await env.factory.open(TOPIC)
    await fill(ledger, 10)  # closed ledgers of 30 bytes: [0..2] [3..5] [6..8], current [9]
    await ledger.open_cursor("sub", "latest")  # everything consumed
    assert ledger.total_size == 100
    ledger.set_retention(-1, -1)  # unlimited
    assert await ledger.trim_ledgers() == []
    ledger.set_retention(60 * 60 * 1000, -1)  # closed less than an hour ago, size unlimited: kept
    assert await ledger.trim_ledgers() == []
    ledger.set_retention(-1, 70)  # delete while what is left exceeds 70 bytes
    assert len(await ledger.trim_ledgers()) == 1
    assert ledger.total_size == 70
    ledger.set_retention(60 * 60 * 1000, 0)  # expired OR over the size quota (Pulsar): size 0 keeps nothing
    assert len(await ledger.trim_ledgers()) == 2
    assert len(ledger.ledgers) == 1
    with pytest.raises(ValueError):
        ledger.set_retention(-2, 0)


async def test_no_cursor_means_consumed_and_a_store_refusing_the_trim_is_an_error(env, monkeypatch):
    ledger = await env.factory.open(TOPIC)
    positions = await fill(ledger, 7)
    ledger.set_retention(0, 0)  # set after the awaits: the background flusher must not trim first
    assert len(await ledger.trim_ledgers()) == 2  # no durable cursor: everything before the current goes
    assert env.store.queue_min_offsets[(TOPIC, 0)] == 6
    assert ledger.first_position == positions[6]
    ledger.set_retention(-1, -1)
    await fill(ledger, 3)

    def refuse(topic, queue_id, queue_offset):
        raise StorageError("disk gone")

    monkeypatch.setattr(env.store, "set_queue_min_offset", refuse)
    ledger.set_retention(0, 0)
    with pytest.raises(ManagedLedgerStorageError, match="disk gone"):
        await ledger.trim_ledgers()


async def test_a_reader_holds_no_ledger_only_retention_keeps_them(env):
    # Pulsar: a non-durable cursor (a Reader) is not in the slowest-reader computation, so a topic read only by
    # Readers keeps its closed ledgers exactly as long as the retention policy says (docs/retention.md)
    ledger = await env.factory.open(TOPIC)
    ledger.set_retention(-1, -1)  # keep everything while the ledgers fill
    reader = ledger.new_non_durable_cursor(None)  # after the last confirmed entry: reads what comes next
    positions = await fill(ledger, 8)  # [0..2] [3..5] [6..7] (current); the reader has read nothing
    assert ledger.trim_bound() == ledger.confirmed_end_offset  # no durable cursor: everything is "consumed"
    ledger.set_retention(60 * 60 * 1000, -1)  # an hour: the closed ledgers stay although nobody acknowledged
    assert await ledger.trim_ledgers() == []
    ledger.set_retention(0, 0)  # Pulsar's default retention: the closed ledgers go, unread by the reader
    assert await ledger.trim_ledgers() == [positions[0].ledger_id, positions[3].ledger_id]
    assert [e.position for e in reader.read_entries(10)] == positions[6:]  # it skips forward past the gap


async def test_trim_is_a_compare_and_set_write_of_the_table(env):
    ledger = await env.factory.open(TOPIC)
    await fill(ledger, 7)
    await ledger.wait_idle()
    table = await stored_json(env.metadata, ledger_table_path(TOPIC))
    await env.metadata.put(ledger_table_path(TOPIC), encode_json(table))  # another owner wrote it
    ledger.set_retention(0, 0)
    with pytest.raises(ManagedLedgerFencedError):
        await ledger.trim_ledgers()
    assert ledger.is_fenced  # Pulsar fences a managed ledger on BadVersion: it no longer owns the table
    await ledger.close()  # a fenced ledger does not overwrite the other owner's table
    assert await stored_json(env.metadata, ledger_table_path(TOPIC)) == table


async def wait_for(predicate, timeout_s=10.0):
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def test_the_background_round_skips_unchanged_ledgers_yet_trims_when_time_or_cursors_move(
    env, monkeypatch
):
    # many loaded topics: a round must not recompute every ledger's bound when nothing it depends on changed
    # (issue 21), yet a ledger held only by retention time goes once that time ran out, and one a cursor
    # passed goes at the next round
    calls = []
    original = ManagedLedger.trim_bound
    monkeypatch.setattr(ManagedLedger, "trim_bound", lambda self: calls.append(1) or original(self))
    ledger = await env.factory.open(TOPIC)
    cursor = await ledger.open_cursor("sub", "earliest")
    positions = await fill(ledger, 8)  # [0..2] [3..5] [6..7] (current)
    ledger.set_retention(1000, -1)  # closed ledgers stay 1 s after they closed
    cursor.mark_delete(positions[4])  # passes the first ledger, which retention still keeps
    await env.factory.flush_and_trim()
    assert len(ledger.ledgers) == 3
    calls.clear()
    for _ in range(5):
        await env.factory.flush_and_trim()
    assert calls == []  # nothing changed: no bound computed
    assert await wait_for(lambda: len(ledger.ledgers) == 2)  # the first ledger's retention time ran out
    assert ledger.ledgers[0].ledger_id == positions[3].ledger_id
    cursor.mark_delete(positions[7])  # passes the second ledger, closed more than 1 s ago by now
    assert await wait_for(lambda: len(ledger.ledgers) == 1)
    assert ledger.ledgers[0].ledger_id == positions[6].ledger_id
