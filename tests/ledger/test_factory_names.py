"""ManagedLedgerFactory name index (exists / prefix queries) and the new-ledger fast path of ``open``."""

from quasar.ledger.cursor_store import CursorStore
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.paths import MANAGED_LEDGERS_ROOT, ledger_table_path
from quasar.metadata.port import encode_json
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore


class CountingMetadata(FakeMetadataStore):
    """Counts the reads a caller makes (get, get_children)."""

    reads = 0

    async def get(self, path):
        self.reads += 1
        return await super().get(path)

    async def get_children(self, path):
        self.reads += 1
        return await super().get_children(path)


async def test_prefix_queries_and_exists_follow_creation_and_deletion(env):
    for name in ("persistent://a/b/x", "persistent://a/b/y", "persistent://a/bc/z", "non-persistent://a/b/q"):
        await env.factory.open(name)
    factory = env.factory
    assert factory.exists("persistent://a/b/x") and not factory.exists("persistent://a/b/none")
    assert list(factory.names_with_prefix("persistent://a/b/")) == [
        "persistent://a/b/x",
        "persistent://a/b/y",
    ]
    assert factory.count_with_prefix("persistent://a/b/") == 2
    assert factory.count_with_prefix("persistent://a/") == 3
    assert factory.count_with_prefix("persistent://zz/") == 0
    await factory.delete("persistent://a/b/x")
    assert not factory.exists("persistent://a/b/x")
    assert factory.count_with_prefix("persistent://a/b/") == 1


async def test_a_new_ledger_is_created_without_reading_the_metadata_store():
    metadata = CountingMetadata()
    factory = ManagedLedgerFactory(FakeMessageStore(), metadata)
    await factory.start()
    reads, writes = metadata.reads, metadata.write_count
    ledger = await factory.open("persistent://t/n/new")
    assert metadata.reads == reads  # no read of a table or of cursors that cannot exist
    assert metadata.write_count == writes + 1  # the new ledger table, once
    assert ledger.cursors == {}
    assert metadata.keys(MANAGED_LEDGERS_ROOT) == [ledger_table_path("persistent://t/n/new")]
    await factory.close()


async def test_a_ledger_the_factory_did_not_list_keeps_its_stored_table_and_cursors():
    """A table written after ``start`` listed the names (e.g. by the previous owner) is read, not replaced."""
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    factory = ManagedLedgerFactory(store, metadata)
    await factory.start()
    name = "persistent://t/n/late"
    old = await ManagedLedger.open(name, store, metadata, factory.config, factory._allocator)
    positions = [await old.add_entry(b"m%d" % i) for i in range(3)]
    cursor = await old.open_cursor("sub", "earliest")
    cursor.mark_delete(positions[0])
    await old.close()
    assert not factory.exists(name)
    ledger = await factory.open(name)
    assert ledger.number_of_entries == 3
    assert ledger.cursors["sub"].mark_delete_position == positions[0]
    assert (await CursorStore(metadata, name).load_all()).keys() == {"sub"}
    await factory.close()


async def test_a_partly_written_table_is_not_overwritten_by_the_fast_path():
    metadata = FakeMetadataStore()
    factory = ManagedLedgerFactory(FakeMessageStore(), metadata)
    await factory.start()
    table = {"ledgers": [{"ledger_id": 77, "first_queue_offset": 0, "created_ms": 0}]}
    await metadata.put(ledger_table_path("x"), encode_json(table))
    ledger = await factory.open("x")
    assert ledger.ledgers[0].ledger_id == 77
    await factory.close()
