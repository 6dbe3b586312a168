"""Upgrade: a data directory whose ``metadata.db`` has the previous release's ``kv(key, value)`` table (JSON
text under whole-name keys such as ``/managed-ledgers/persistent://public/default/t``) is served by the new
broker with its tenants, namespaces, partitioned topics, topics and cursors.

The legacy file is made from a real one: a broker writes its data, then its ``metadata`` rows are turned
back into the old layout (the inverse of ``broker.metadata_migration``), and a new broker starts on it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest

from quasar.metadata import decode_segment

from .helpers import admin, create_partitioned, new_client, topic_name

pytestmark = pytest.mark.interop


def legacy_key(path: str) -> str:
    """The previous release's key for new ``path``: whole names, cursors percent-encoded."""
    segments = [decode_segment(segment) for segment in path[1:].split("/")]
    if segments[0] == "cursors":
        segments[-1] = quote(segments[-1], safe="")
    return "/" + "/".join(segments)


def downgrade_metadata(db: Path) -> int:
    """Rewrite ``db`` in the previous release's layout; returns the number of keys."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT path, value FROM metadata").fetchall()
        conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
        conn.executemany(
            "INSERT INTO kv VALUES (?, ?)", [(legacy_key(p), bytes(v).decode()) for p, v in rows]
        )
        conn.execute("DROP TABLE metadata")
        conn.commit()
    finally:
        conn.close()
    return len(rows)


def test_previous_release_data_dir_is_served(broker_factory, tmp_path: Path):
    data_dir = tmp_path / "data"
    broker = broker_factory(data_dir=data_dir)
    assert admin(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": []})[0] == 204
    assert admin(broker, "PUT", "/admin/v2/namespaces/acme/orders", {})[0] == 204
    partitioned = "persistent://acme/orders/by-region"
    create_partitioned(broker, partitioned, 3)
    topic = topic_name("upgrade")
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub/with:odd%chars")
        for i in range(10):
            producer.send(f"m{i}".encode())
        for _ in range(4):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        consumer.close()  # the mark-delete position is persisted at close
        producer.close()
    finally:
        client.close()
    broker.stop()

    assert downgrade_metadata(data_dir / "metadata.db") > 5
    conn = sqlite3.connect(data_dir / "metadata.db")
    keys = {key for (key,) in conn.execute("SELECT key FROM kv")}
    conn.close()
    assert f"/managed-ledgers/{topic}" in keys and "/admin/tenants/acme" in keys
    assert f"/cursors/{topic}/{quote('sub/with:odd%chars', safe='')}" in keys

    broker.start()  # the upgrade runs at start-up
    status, tenants = admin(broker, "GET", "/admin/v2/tenants")
    assert status == 200 and "acme" in tenants
    assert admin(broker, "GET", "/admin/v2/namespaces/acme")[1] == ["acme/orders"]
    assert admin(broker, "GET", "/admin/v2/persistent/acme/orders/partitioned")[1] == [partitioned]
    assert admin(broker, "GET", "/admin/v2/persistent/acme/orders/by-region/partitions")[1] == {
        "partitions": 3
    }
    assert topic in admin(broker, "GET", "/admin/v2/persistent/public/default")[1]
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "sub/with:odd%chars")
        message = consumer.receive(timeout_millis=5000)
        assert message.data() == b"m4"  # the cursor survived: the first unacknowledged message
        consumer.close()
    finally:
        client.close()
    conn = sqlite3.connect(data_dir / "metadata.db")
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'kv'").fetchone()[0] == 0
    conn.close()
