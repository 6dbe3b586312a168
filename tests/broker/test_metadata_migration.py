"""The one-time upgrade of the previous release's ``kv`` metadata table (broker/metadata_migration.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from quasar.broker.broker_service import BrokerService
from quasar.broker.metadata_migration import legacy_path, migrate_legacy_metadata
from quasar.broker.policies import MESSAGE_TTL
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.paths import LEDGER_ID_COUNTER_PATH, cursor_path, ledger_table_path
from quasar.metadata import decode_json
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.protocol import TopicName
from quasar.testing.fake_store import FakeMessageStore

T = "persistent://public/default/t"
LEGACY = {
    "/admin/tenants/public": '{"adminRoles":[],"allowedClusters":["standalone"]}',
    "/admin/tenants/acme": '{"adminRoles":["ops"],"allowedClusters":["standalone"]}',
    "/admin/policies/public/default": "{}",
    "/admin/policies/acme/orders": '{"message_ttl_in_seconds":60}',
    "/admin/partitioned-topics/persistent/acme/orders/p": '{"partitions":4}',
    "/admin/topic-policies/persistent/public/default/t": '{"message_ttl_in_seconds":5}',
    "/broker/boot-count": "7",
    "/ledger-ids/next": "2048",
    f"/managed-ledgers/{T}": '{"ledgers":[]}',
    "/managed-ledgers/persistent://acme/orders/p-partition-1": '{"ledgers":[]}',
    f"/cursors/{T}/sub%2Fa": '{"name":"sub/a"}',
    "no-leading-slash": "1",
}


def test_legacy_keys_map_to_one_segment_per_name():
    assert legacy_path(f"/managed-ledgers/{T}") == ledger_table_path(T)
    assert legacy_path(f"/cursors/{T}/sub%2Fa") == cursor_path(T, "sub/a")
    assert legacy_path("/admin/tenants/public") == "/admin/tenants/public"
    assert legacy_path("/admin/policies/acme/orders") == "/admin/policies/acme/orders"
    assert legacy_path("/admin/partitioned-topics/persistent/acme/orders/p%x") == (
        "/admin/partitioned-topics/persistent/acme/orders/p%25x"
    )
    assert legacy_path("/broker/boot-count") == "/broker/boot-count"
    for bad in (
        "no-leading-slash",
        "/admin/policies/only-tenant",
        "/admin/partitioned-topics/x",
        "/cursors/l/",
    ):
        with pytest.raises(ValueError):
            legacy_path(bad)


async def test_legacy_table_is_upgraded_and_served(tmp_path: Path):
    db = tmp_path / "metadata.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
    conn.executemany("INSERT INTO kv VALUES (?, ?)", LEGACY.items())
    conn.commit()
    conn.close()

    metadata = await SqliteMetadataStore.open(db)
    assert await migrate_legacy_metadata(metadata) == len(LEGACY) - 1  # the malformed key is dropped
    assert await migrate_legacy_metadata(metadata) is None  # once only
    counter = await metadata.get(LEDGER_ID_COUNTER_PATH)
    assert counter is not None and decode_json(LEDGER_ID_COUNTER_PATH, counter.value) == 2048
    assert await metadata.exists(cursor_path(T, "sub/a"))

    factory = ManagedLedgerFactory(FakeMessageStore(), metadata)
    await factory.start()
    service = BrokerService(factory, metadata)
    await service.bootstrap()
    try:
        assert service.generate_producer_name() == "standalone-8-1"  # the boot count carried over
        assert service.tenants() == ["acme", "public", "pulsar"]
        assert service.namespace_policy("acme/orders", MESSAGE_TTL) == 60
        assert service.partitions(TopicName.parse("persistent://acme/orders/p")) == 4
        assert service.topic_policy(TopicName.parse(T), MESSAGE_TTL) == 5
        assert T in factory.names() and "persistent://acme/orders/p-partition-1" in factory.names()
        assert service.list_topics("public/default") == [T]
    finally:
        await service.close()
        await factory.close()
        await metadata.close()
