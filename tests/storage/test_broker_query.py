"""Query by key through a real broker (in-process BrokerApp, official pulsar-client producing): the key
extractor indexes partition keys of plain and batched entries, the admin handler answers message ids, and
``quasar query`` prints them."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

from quasar.broker.admin import query as admin_query
from quasar.broker.admin.routes import SERVICE_KEY
from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig
from quasar.cli.query import parse_time_ms, query, topic_path

pulsar = pytest.importorskip("pulsar")
pytestmark = pytest.mark.interop

TOPIC = "persistent://public/default/query-me"


def _produce(service_url: str) -> dict[str, list[bytes]]:
    """Plain messages with keys k0..k3, then a batched burst with keys b0..b2; returns payloads per key."""
    sent: dict[str, list[bytes]] = {}
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(20):
            payload = f"plain-{i}".encode()
            producer.send(payload, partition_key=f"k{i % 4}")
            sent.setdefault(f"k{i % 4}", []).append(payload)
        producer.close()
        batched = client.create_producer(
            TOPIC, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
        )
        for i in range(30):
            payload = f"batched-{i}".encode()
            batched.send_async(payload, None, partition_key=f"b{i % 3}")
            sent.setdefault(f"b{i % 3}", []).append(payload)
        batched.flush()
        batched.close()
    finally:
        client.close()
    return sent


async def test_query_by_key_end_to_end(tmp_path: Path):
    config = BrokerConfig(
        port=0,
        admin_port=0,
        data_dir=tmp_path / "data",
        commit_log_file_size=256 * 1024,
        max_hash_slot_num=512,
        max_index_num=4096,
        rocketmq_enabled=False,
    )
    app = BrokerApp(config)
    await app.start()
    loop = asyncio.get_running_loop()
    admin = web.Application()
    admin[SERVICE_KEY] = app.service
    admin[admin_query.MESSAGE_STORE] = app.store
    admin_query.register(admin)
    client = TestClient(TestServer(admin))
    await client.start_server()
    try:
        before = int(time.time() * 1000)
        sent = await loop.run_in_executor(None, _produce, app.service_url)
        assert app.store is not None
        for _ in range(1000):  # the index is built on the reput thread
            if app.store.statistics().dispatch_behind_bytes == 0:
                break
            await asyncio.sleep(0.01)
        path = "/admin/v2/persistent/public/default/query-me/messages"

        response = await client.get(path, params={"key": "k1"})
        assert response.status == 200
        found = await response.json()
        assert [base64.b64decode(m["payload"]) for m in found] == sent["k1"]
        assert all(m["batchIndex"] == -1 and m["key"] == "k1" for m in found)
        assert [m["messageId"] for m in found] == [f"{m['ledgerId']}:{m['entryId']}" for m in found]
        assert all(m["publishTime"] >= before for m in found)

        response = await client.get(path, params={"key": "b2"})
        found = await response.json()
        assert [base64.b64decode(m["payload"]) for m in found] == sent["b2"]
        assert all(m["batchIndex"] >= 0 for m in found)  # messages inside batches
        assert all(m["messageId"].count(":") == 2 for m in found)

        # time range: nothing before the test started
        response = await client.get(path, params={"key": "k1", "to": str(before - 60_000)})
        assert await response.json() == []
        response = await client.get(path, params={"key": "k1", "from": str(before), "max": "2"})
        assert len(await response.json()) == 2  # max counts entries

        assert (await client.get(path)).status == 400  # no key
        assert (await client.get(path, params={"key": "k", "from": "soon"})).status == 400
        missing = "/admin/v2/persistent/public/default/no-such-topic/messages"
        assert (await client.get(missing, params={"key": "k"})).status == 404

        # the CLI against the same endpoint
        url = str(client.make_url(""))
        runner = CliRunner()
        result = await loop.run_in_executor(
            None, lambda: runner.invoke(query, [TOPIC, "--key", "k2", "--admin-url", url, "--json"])
        )
        assert result.exit_code == 0, result.output
        assert [base64.b64decode(m["payload"]) for m in json.loads(result.output)] == sent["k2"]
        table = await loop.run_in_executor(
            None, lambda: runner.invoke(query, ["query-me", "-k", "k3", "--admin-url", url])
        )
        assert table.exit_code == 0 and "plain-3" in table.output
    finally:
        await client.close()
        await app.stop()


def test_cli_argument_parsing():
    assert topic_path("x") == "persistent/public/default/x"
    assert topic_path("persistent://t/ns/a b") == "persistent/t/ns/a%20b"
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14T22:13:20+00:00") == 1_700_000_000_000
    runner = CliRunner()
    assert runner.invoke(query, ["x"]).exit_code == 2  # --key is required
    assert runner.invoke(query, ["a/b", "--key", "k"]).exit_code == 2  # not a topic name
    result = runner.invoke(
        query, ["x", "--key", "k", "--from", "yesterday", "--admin-url", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 2 and "ISO 8601" in result.output


def test_broker_config_passes_every_storage_setting(tmp_path: Path):
    from quasar.broker.app import _store_config

    config = BrokerConfig.from_mapping(
        {
            "data_dir": str(tmp_path),
            "commit_log_file_size": 65536,
            "mapped_file_size_consume_queue": 2000,
            "flush_disk_type": "ASYNC_FLUSH",
            "flush_interval_commit_log_ms": 123,
            "flush_commit_log_least_pages": 7,
            "message_index_enable": False,
            "max_hash_slot_num": 99,
            "max_index_num": 999,
            "warm_mapped_file_enable": True,
            "file_reserved_time_h": 1.5,
            "delete_when": "01;13",
            "disk_max_used_space_ratio": 70,
            "disk_space_clean_forcibly_ratio": 80,
            "disk_space_warning_level_ratio": 88,
            "clean_resource_interval_ms": 500,
            "delete_file_batch_max": 3,
            "clean_file_forcibly_enable": False,
        }
    )
    store_config = _store_config(config, tmp_path / "store")
    assert store_config.commit_log_file_size == 65536 and store_config.consume_queue_file_size == 2000
    assert store_config.flush_disk_type.name == "ASYNC_FLUSH" and store_config.flush_interval_ms == 123
    assert store_config.flush_least_pages == 7 and not store_config.message_index_enable
    assert (store_config.max_hash_slot_num, store_config.max_index_num) == (99, 999)
    assert store_config.warm_mapped_file_enable and store_config.file_reserved_time_h == 1.5
    assert store_config.delete_when == "01;13" and store_config.disk_max_used_space_ratio == 70
    assert store_config.warning_level_ratio == 0.88 and store_config.clean_forcibly_ratio == 0.80
    assert store_config.clean_resource_interval_ms == 500 and store_config.delete_file_batch_max == 3
    assert not store_config.clean_file_forcibly_enable
    with pytest.raises(ValueError):
        _store_config(BrokerConfig(delete_when="4am"), tmp_path / "store")
    with pytest.raises(ValueError):
        _store_config(BrokerConfig(mapped_file_size_consume_queue=1001), tmp_path / "store")
