"""The state journal: ledger and cursor state written on a master is journaled in the commit log and applied on
a slave's local store, byte for byte the same values; truncation re-applies; bad records are skipped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.metadata.memory import MemoryMetadataStore
from quasar.metadata.port import Delete, Put
from quasar.replication.state_journal import (
    JOURNAL_TOPIC,
    OP_DELETE,
    OP_DELETE_RECURSIVE,
    OP_PUT,
    JournalApplier,
    JournaledMetadataStore,
    JournalFormatError,
    JournalOp,
    decode_journal,
    encode_journal,
)
from quasar.storage import MessageStore, StoreConfig
from quasar.storage.status import PutStatus

_paths = st.lists(
    st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=8),
    min_size=1,
    max_size=3,
).map(lambda parts: "/cursors/" + "/".join(parts))
_ops = st.lists(
    st.one_of(
        st.builds(JournalOp, st.just(OP_PUT), _paths, st.binary(max_size=64)),
        st.builds(JournalOp, st.just(OP_DELETE), _paths),
        st.builds(JournalOp, st.just(OP_DELETE_RECURSIVE), _paths),
    ),
    max_size=8,
)


@given(_ops)
def test_records_round_trip(ops: list[JournalOp]) -> None:
    assert decode_journal(encode_journal(ops)) == ops


@given(st.binary(max_size=64))
def test_garbage_raises_the_format_error_only(data: bytes) -> None:
    try:
        decode_journal(data)
    except JournalFormatError:
        pass


def test_truncated_record_is_refused() -> None:
    body = encode_journal([JournalOp(OP_PUT, "/cursors/a/b", b"value")])
    for cut in range(len(body)):
        with pytest.raises(JournalFormatError):
            decode_journal(body[:cut])


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    message_store = MessageStore(StoreConfig(root_dir=tmp_path / "store", commit_log_file_size=1 << 20))
    message_store.open()
    await message_store.start()
    yield message_store
    await message_store.close()


def _sink(store: MessageStore) -> SimpleNamespace:
    """The journal's sink on a bare store (the broker gives it the replicated store)."""
    return SimpleNamespace(put_unchecked=store.put)


async def _flushed(store: MessageStore, end: int) -> PutStatus:
    return await store.wait_flushed(end)


async def test_master_writes_are_applied_on_the_slave_store(store: MessageStore) -> None:
    master_local = MemoryMetadataStore()
    journaled = JournaledMetadataStore(master_local, _sink(store), lambda end: _flushed(store, end))
    await journaled.put("/managed-ledgers/t", b'{"ledgers": [1]}')
    await journaled.put("/cursors/t/sub", b'{"mark_delete": [1, 5]}')
    await journaled.put("/cursors/t/old", b"x")
    await journaled.delete("/cursors/t/old")
    await journaled.multi([Put("/ledger-ids/next", b"11"), Delete("/cursors/t/none")])
    await journaled.put("/admin/not-journaled", b"local only")
    assert journaled.records_written == 5
    assert store.max_queue_offset(JOURNAL_TOPIC, 0) == 5

    slave_local = MemoryMetadataStore()
    applier = JournalApplier(store, slave_local)
    assert await applier.drain() == 5
    for path in ("/managed-ledgers/t", "/cursors/t/sub", "/ledger-ids/next"):
        mine, theirs = await master_local.get(path), await slave_local.get(path)
        assert mine is not None and theirs is not None and mine.value == theirs.value
    assert await slave_local.get("/cursors/t/old") is None
    assert await slave_local.get("/admin/not-journaled") is None
    assert await applier.drain() == 0  # nothing new: nothing applied twice

    await journaled.delete_recursive("/cursors/t")
    assert await applier.drain() == 1
    assert await slave_local.get_children("/cursors") == []


async def test_snapshot_rejournals_every_value(store: MessageStore) -> None:
    master_local = MemoryMetadataStore()
    journaled = JournaledMetadataStore(master_local, _sink(store), lambda end: _flushed(store, end))
    await master_local.put("/managed-ledgers/a", b"A")  # written before journaling was on
    await master_local.put("/cursors/a/s1", b"S1")
    await master_local.put("/cursors/a/s2", b"S2")
    assert await journaled.snapshot() == 3
    slave_local = MemoryMetadataStore()
    await JournalApplier(store, slave_local).drain()
    assert (await slave_local.get("/cursors/a/s2")).value == b"S2"  # type: ignore[union-attr]
    assert (await slave_local.get("/managed-ledgers/a")).value == b"A"  # type: ignore[union-attr]


async def test_disabled_journal_writes_locally_only(store: MessageStore) -> None:
    journaled = JournaledMetadataStore(MemoryMetadataStore(), _sink(store), lambda end: _flushed(store, end))
    journaled.enabled = False
    await journaled.put("/cursors/t/s", b"1")
    assert store.max_queue_offset(JOURNAL_TOPIC, 0) == 0


async def test_bad_records_are_skipped_and_counted(store: MessageStore) -> None:
    store.put(JOURNAL_TOPIC, 0, b"not a journal record")
    store.put(JOURNAL_TOPIC, 0, encode_journal([JournalOp(OP_PUT, "/tenants/evil", b"x")]))
    store.put(JOURNAL_TOPIC, 0, encode_journal([JournalOp(OP_PUT, "/cursors/t/s", b"ok")]))
    slave_local = MemoryMetadataStore()
    applier = JournalApplier(store, slave_local)
    await applier.drain()
    assert applier.records_rejected == 2 and applier.records_applied == 1
    assert await slave_local.get("/tenants/evil") is None
    assert (await slave_local.get("/cursors/t/s")).value == b"ok"  # type: ignore[union-attr]


async def test_applier_restarts_from_its_persisted_offset_and_reapplies_after_truncation(
    store: MessageStore,
) -> None:
    journaled = JournaledMetadataStore(MemoryMetadataStore(), _sink(store), lambda end: _flushed(store, end))
    await journaled.put("/cursors/t/s", b"1")
    slave_local = MemoryMetadataStore()
    await JournalApplier(store, slave_local).drain()
    await journaled.put("/cursors/t/s", b"2")
    again = JournalApplier(store, slave_local)  # a restarted slave: resumes from the stored offset
    assert await again.drain() == 1
    assert (await slave_local.get("/cursors/t/s")).value == b"2"  # type: ignore[union-attr]
    again.next_offset = 99  # as if the journal had been truncated below what was applied
    await slave_local.put("/cursors/t/stale", b"from a truncated tail")
    assert await again.drain() == 2
    assert await slave_local.get("/cursors/t/stale") is None
    assert (await slave_local.get("/cursors/t/s")).value == b"2"  # type: ignore[union-attr]
