"""ManagedLedgerFactory.delete: a deleted managed ledger's metadata and entries are gone, and a ledger created
later under the same name starts empty (Pulsar ManagedLedgerImpl.delete)."""

from __future__ import annotations

from quasar.ledger.paths import cursor_path, ledger_table_path
from quasar.ledger.position import EARLIEST

TOPIC = "persistent://public/default/deleted"
OTHER = "persistent://public/default/kept"


async def _add(ledger, count, prefix=b"m"):
    return [await ledger.add_entry(prefix + b"%d" % i) for i in range(count)]


async def test_delete_removes_metadata_and_entries_and_a_new_ledger_starts_empty(any_env):
    factory = any_env.factory
    ledger = await factory.open(TOPIC)
    other = await factory.open(OTHER)
    await _add(ledger, 7)
    await _add(other, 3)
    cursor = await ledger.open_cursor("sub")
    assert cursor is not None
    await factory.flush_cursors()
    assert await any_env.metadata.exists(cursor_path(TOPIC, "sub"))

    assert await factory.delete(TOPIC) is True
    assert ledger.is_closed
    assert TOPIC not in factory.names() and factory.get(TOPIC) is None
    assert not await any_env.metadata.exists(ledger_table_path(TOPIC))
    assert not await any_env.metadata.exists(cursor_path(TOPIC, "sub"))
    assert any_env.store.min_queue_offset(TOPIC, 0) == any_env.store.max_queue_offset(TOPIC, 0) == 7

    again = await factory.open(TOPIC)
    assert again.number_of_entries == 0 and again.read_entries(EARLIEST, 100) == []
    assert [c.name for c in again.cursors] == []
    await _add(again, 2, b"new")
    assert [bytes(e.data) for e in again.read_entries(EARLIEST, 100)] == [b"new0", b"new1"]
    assert [bytes(e.data) for e in other.read_entries(EARLIEST, 100)] == [b"m0", b"m1", b"m2"]

    # after a restart: still only the new entries, and no trace of the deleted cursor
    factory = await any_env.restart()
    reopened = await factory.open(TOPIC)
    assert [bytes(e.data) for e in reopened.read_entries(EARLIEST, 100)] == [b"new0", b"new1"]
    assert [c.name for c in reopened.cursors] == []


async def test_delete_of_an_unknown_ledger_answers_false(any_env):
    assert await any_env.factory.delete("persistent://public/default/never") is False
