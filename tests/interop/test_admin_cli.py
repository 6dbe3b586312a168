"""``quasar admin`` (pulsar-admin's commands over the REST API) against one real broker process for the
module, through click's CliRunner: what each command prints (tables, names, JSON, peeked messages) is checked
against the admin REST answers and against what the broker does next; errors exit 1 with the server's
reason, bad arguments exit 2, an unreachable broker exits 1 with a clear message."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner, Result

from quasar.cli.admin import admin as admin_group
from quasar.cli.admin.args import parse_relative_seconds, parse_size
from quasar.cli.admin.http import AdminApiError, AdminClient, AdminSettings
from quasar.testing.broker_process import BrokerProcess
from tests.interop.helpers import admin as rest
from tests.interop.helpers import new_client

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin-cli") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def run(broker: BrokerProcess, *args: str, code: int = 0) -> Result:
    """``quasar admin --admin-url <broker> ARGS`` in process; asserts the exit status ``code``."""
    result = CliRunner(env={"COLUMNS": "220"}).invoke(admin_group, ["--admin-url", broker.admin_url, *args])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def run_json(broker: BrokerProcess, *args: str) -> Any:
    return json.loads(run(broker, *args, "--json").stdout)


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def _get(broker: BrokerProcess, path: str) -> Any:
    status, body = rest(broker, "GET", path)
    assert status == 200, body
    return body


_MOVING = ("msgRate", "msgThroughput", "averageMsgSize", "lastAckedTimestamp", "lastConsumedTimestamp")


def _without_moving(value: Any) -> Any:
    """``value`` without the fields that move between two reads (rates, last-activity times)."""
    if isinstance(value, dict):
        return {k: _without_moving(v) for k, v in value.items() if not k.startswith(_MOVING)}
    if isinstance(value, list):
        return [_without_moving(v) for v in value]
    return value


# ---------------------------------------------------------------------- tenants, namespaces
def test_tenant_and_namespace_commands(broker: BrokerProcess) -> None:
    tenant = _unique("acme")
    run(broker, "tenants", "create", tenant, "--admin-roles", "ops,dev")
    assert tenant in run(broker, "tenants", "list").stdout.splitlines()
    assert _get(broker, f"/admin/v2/tenants/{tenant}") == {
        "adminRoles": ["ops", "dev"],
        "allowedClusters": ["standalone"],  # every cluster by default, as pulsar-admin
    }
    run(broker, "tenants", "update", tenant, "-r", "ops")
    table = run(broker, "tenants", "get", tenant).stdout
    assert "adminRoles" in table and '["ops"]' in table and "standalone" in table
    assert run_json(broker, "tenants", "get", tenant) == {
        "adminRoles": ["ops"],
        "allowedClusters": ["standalone"],
    }
    failed = run(broker, "tenants", "create", tenant, code=1)
    assert "answered 409" in failed.stderr

    namespace = f"{tenant}/orders"
    run(broker, "namespaces", "create", namespace)
    assert run(broker, "namespaces", "list", tenant).stdout.splitlines() == [namespace]
    assert run_json(broker, "namespaces", "policies", namespace) == _get(
        broker, f"/admin/v2/namespaces/{namespace}"
    )
    assert "replication_clusters" in run(broker, "namespaces", "policies", namespace).stdout
    run(broker, "topics", "create", f"persistent://{namespace}/t1")
    assert run(broker, "namespaces", "topics", namespace).stdout.splitlines() == [
        f"persistent://{namespace}/t1"
    ]
    refused = run(broker, "namespaces", "delete", namespace, code=1)
    assert "Cannot delete non empty namespace" in refused.stderr
    refused = run(broker, "tenants", "delete", tenant, code=1)
    assert "The tenant still has active namespaces" in refused.stderr
    empty = f"{tenant}/empty"
    run(broker, "namespaces", "create", empty)
    run(broker, "namespaces", "delete", empty)
    assert empty not in _get(broker, f"/admin/v2/namespaces/{tenant}")

    missing = run(broker, "tenants", "get", _unique("nobody"), code=1)
    assert "answered 404: Tenant does not exist" in missing.stderr
    missing = run(broker, "namespaces", "list", _unique("nobody"), code=1)
    assert "answered 404" in missing.stderr and "does not exist" in missing.stderr
    assert "not a namespace" in run(broker, "namespaces", "policies", "just-one-part", code=2).stderr


def test_namespace_policy_commands(broker: BrokerProcess) -> None:
    namespace = f"public/{_unique('pol')}"
    ns = f"/admin/v2/namespaces/{namespace}"
    run(broker, "namespaces", "create", namespace)

    run(broker, "namespaces", "set-retention", namespace, "-s", "10G", "-t", "3d")
    retention = {"retentionTimeInMinutes": 3 * 24 * 60, "retentionSizeInMB": 10 * 1024}
    assert _get(broker, ns + "/retention") == retention
    assert json.loads(run(broker, "namespaces", "get-retention", namespace).stdout) == retention
    run(broker, "namespaces", "set-retention", namespace, "--size", "-1", "--time", "-1")
    assert _get(broker, ns + "/retention") == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    run(broker, "namespaces", "remove-retention", namespace)
    assert _get(broker, ns + "/retention") is None
    assert (
        "not a size"
        in run(broker, "namespaces", "set-retention", namespace, "-s", "1X", "-t", "1d", code=2).stderr
    )

    run(broker, "namespaces", "set-message-ttl", namespace, "-ttl", "1h")
    assert _get(broker, ns + "/messageTTL") == 3600
    assert run(broker, "namespaces", "get-message-ttl", namespace).stdout.strip() == "3600"
    run(broker, "namespaces", "remove-message-ttl", namespace)
    assert _get(broker, ns + "/messageTTL") is None

    run(broker, "namespaces", "set-backlog-quota", namespace, "-l", "2G", "-p", "producer_exception")
    run(broker, "namespaces", "set-backlog-quota", namespace, "-lt", "1h", "-p", "producer_exception",
        "-t", "message_age")  # fmt: skip
    quota = {"limitSize": 2 * 1024**3, "limitTime": 3600, "policy": "producer_exception"}
    assert _get(broker, ns + "/backlogQuotaMap") == quota
    assert json.loads(run(broker, "namespaces", "get-backlog-quotas", namespace).stdout) == quota
    run(broker, "namespaces", "remove-backlog-quota", namespace)  # destination_storage: the size limit
    assert _get(broker, ns + "/backlogQuotaMap") == {**quota, "limitSize": -1}
    run(broker, "namespaces", "remove-backlog-quota", namespace, "-t", "message_age")
    assert _get(broker, ns + "/backlogQuotaMap") is None
    missing = run(broker, "namespaces", "set-backlog-quota", namespace, "-p", "producer_exception", code=2)
    assert "--limit is required" in missing.stderr

    run(broker, "namespaces", "set-deduplication", namespace, "--enable")
    assert _get(broker, ns + "/deduplication") is True
    run(broker, "namespaces", "set-deduplication", namespace, "-d")
    assert run(broker, "namespaces", "get-deduplication", namespace).stdout.strip() == "false"

    run(broker, "namespaces", "grant-permission", namespace, "--role", "app", "--actions", "produce,consume")
    assert _get(broker, ns + "/permissions") == {"app": ["consume", "produce"]}
    assert "consume, produce" in run(broker, "namespaces", "permissions", namespace).stdout
    run(broker, "namespaces", "revoke-permission", namespace, "--role", "app")
    assert run_json(broker, "namespaces", "permissions", namespace) == {}

    run(broker, "namespaces", "set-compaction-threshold", namespace, "-t", "100M")
    assert _get(broker, ns + "/compactionThreshold") == 100 * 1024**2
    run(broker, "namespaces", "remove-compaction-threshold", namespace)
    assert run(broker, "namespaces", "get-compaction-threshold", namespace).stdout.strip() == "null"

    run(broker, "namespaces", "set-schema-compatibility-strategy", namespace, "-c", "full")
    assert run(broker, "namespaces", "get-schema-compatibility-strategy", namespace).stdout.strip() == "FULL"
    missing = run(broker, "namespaces", "set-message-ttl", "public/no-such-ns", "-ttl", "60", code=1)
    assert "answered 404" in missing.stderr


# ---------------------------------------------------------------------- topics
def _produce(broker: BrokerProcess, topic: str, subscription: str | None = None) -> list[Any]:
    """Three single messages with keys and properties, then a batch of three under key ``kb``; subscribes
    ``subscription`` first (no consumer left connected). Returns the single messages' ids."""
    client = new_client(broker)
    try:
        if subscription is not None:
            client.subscribe(topic, subscription).close()
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [
            producer.send(f"order-{i}".encode(), partition_key=f"k{i}", properties={"n": str(i)})
            for i in range(3)
        ]
        batcher = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
        for i in range(3):
            batcher.send_async(f"batched-{i}".encode(), None, partition_key="kb")
        batcher.flush()
        return ids
    finally:
        client.close()


def test_topic_stats_json_is_the_rest_answer_and_the_tables_show_it(broker: BrokerProcess) -> None:
    topic = f"persistent://public/default/{_unique('stats')}"
    _produce(broker, topic, "audit")
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "live", consumer_name="reader-1")  # connected during the reads
        from_cli = run_json(broker, "topics", "stats", topic)
        from_rest = _get(broker, _path(topic) + "/stats")
        assert _without_moving(from_cli) == _without_moving(from_rest)
        assert from_cli["subscriptions"]["audit"]["msgBacklog"] == 4  # 3 entries + 1 batch entry
        table = run(broker, "topics", "stats", topic).stdout
        assert topic in table and "storageSize" in table and str(from_rest["storageSize"]) in table
        audit_row = next(line for line in table.splitlines() if "audit" in line)
        assert "Exclusive" in audit_row and " 4 " in audit_row
        assert "reader-1" in table  # the consumers table
        short = topic.rsplit("/", 1)[1]  # pulsar-admin's short form: public/default is assumed
        assert _without_moving(run_json(broker, "topics", "stats", short)) == _without_moving(from_rest)
        assert _without_moving(
            run_json(broker, "topics", "stats", f"public/default/{short}")
        ) == _without_moving(from_rest)
        consumer.close()
    finally:
        client.close()
    missing = run(broker, "topics", "stats", _unique("nothing"), code=1)
    assert "answered 404" in missing.stderr and "does not exist" in missing.stderr
    assert "not a topic name" in run(broker, "topics", "stats", "a/b", code=2).stderr


def test_topic_commands(broker: BrokerProcess) -> None:
    topic = f"persistent://public/default/{_unique('topic')}"
    ids = _produce(broker, topic, "s")
    assert topic in run(broker, "topics", "list", "public/default").stdout.splitlines()
    internal = run_json(broker, "topics", "internal-stats", topic)
    assert internal == _get(broker, _path(topic) + "/internalStats") and internal["numberOfEntries"] == 4
    table = run(broker, "topics", "stats-internal", topic).stdout  # pulsar-admin's name
    assert internal["lastConfirmedEntry"] in table and "markDeletePosition" in table
    last = json.loads(run(broker, "topics", "last-message-id", topic).stdout)
    assert (last["ledgerId"], last["entryId"], last["batchIndex"]) == (ids[0].ledger_id(), 3, 2)

    found = run_json(broker, "topics", "query", topic, "--key", "k1")
    assert [base64.b64decode(m["payload"]) for m in found] == [b"order-1"]
    table = run(broker, "topics", "query", topic, "--key", "kb").stdout
    assert "batched-0" in table and "batched-2" in table and ":3:1" in table

    run(broker, "topics", "compact", topic)
    for _ in range(100):  # bounded: 100 polls, 10 s at most
        status = run(broker, "topics", "compaction-status", topic).stdout
        if "running" not in status:
            break
        time.sleep(0.1)
    assert "Compaction was a success" in status

    run(broker, "topics", "unload", topic)
    assert _get(broker, _path(topic) + "/subscriptions") == ["s"]  # loads again
    out = run(broker, "topics", "terminate", topic).stdout
    assert "Topic successfully terminated, the last message id is" in out
    assert "Termination of a partitioned topic" not in out

    partitioned = f"persistent://public/default/{_unique('parts')}"
    run(broker, "topics", "create-partitioned-topic", partitioned, "-p", "3")
    assert json.loads(run(broker, "topics", "get-partitioned-topic-metadata", partitioned).stdout) == {
        "partitions": 3
    }
    assert (
        partitioned in run(broker, "topics", "list-partitioned-topics", "public/default").stdout.splitlines()
    )
    run(broker, "topics", "create-subscription", partitioned, "-s", "all", "-m", "earliest")
    stats = run_json(broker, "topics", "partitioned-stats", partitioned, "--per-partition")
    assert stats["metadata"]["partitions"] == 3 and len(stats["partitions"]) == 3
    table = run(broker, "topics", "partitioned-stats", partitioned).stdout
    assert "(3 partitions)" in table and "all" in table
    refused = run(broker, "topics", "create", partitioned, code=1)
    assert "answered 409" in refused.stderr
    assert (
        "Invalid value"
        in run(broker, "topics", "create-partitioned-topic", partitioned, "-p", "0", code=2).stderr
    )


def test_subscription_commands_and_peek(broker: BrokerProcess) -> None:
    topic = f"persistent://public/default/{_unique('subs')}"
    _produce(broker, topic)
    run(broker, "topics", "create-subscription", topic, "-s", "from-start", "-m", "earliest")
    run(broker, "topics", "create-subscription", topic, "-s", "at-end")
    assert run(broker, "topics", "subscriptions", topic).stdout.splitlines() == ["at-end", "from-start"]

    def backlog(sub: str) -> int:
        return int(_get(broker, _path(topic) + "/stats")["subscriptions"][sub]["msgBacklog"])

    assert (backlog("from-start"), backlog("at-end")) == (4, 0)

    printed = run(broker, "topics", "peek-messages", topic, "-s", "from-start", "-n", "5").stdout
    blocks = printed.split("-------------------------------------------------------------------------\n")
    assert len(blocks) == 5  # 3 single messages and the first two of the batch
    assert blocks[0].startswith("Message ID: ") and '"n": "0"' in blocks[0] and "Key: k0" in blocks[0]
    assert "|00000000| 6f 72 64 65 72 2d 30" in blocks[0] and "|order-0         |" in blocks[0]
    assert (
        blocks[3].lstrip().startswith("Batch Message ID: ")
        and ":3:0" in blocks[3]
        and "batched-0" in blocks[3]
    )
    assert "batched-1" in blocks[4] and "batched-2" not in printed
    peeked = run_json(broker, "topics", "peek-messages", topic, "-s", "from-start", "-n", "10")
    assert [base64.b64decode(m["payload"]) for m in peeked] == [
        b"order-0", b"order-1", b"order-2", b"batched-0", b"batched-1", b"batched-2"
    ]  # fmt: skip
    assert peeked[1]["properties"] == {"n": "1"} and peeked[4]["key"] == "kb"
    assert backlog("from-start") == 4  # peeking consumes nothing

    run(broker, "topics", "skip", topic, "-s", "from-start", "-n", "2")
    assert backlog("from-start") == 2
    assert (
        json.loads(run(broker, "topics", "peek-messages", topic, "-s", "from-start", "--json").stdout)[0][
            "payload"
        ]
        == base64.b64encode(b"order-2").decode()
    )
    run(broker, "topics", "skip-all", topic, "-s", "from-start")
    assert backlog("from-start") == 0
    run(broker, "topics", "reset-cursor", topic, "-s", "from-start", "-t", "1h")
    assert backlog("from-start") == 4
    run(broker, "topics", "clear-backlog", topic, "-s", "from-start")  # pulsar-admin's name of skip-all
    assert backlog("from-start") == 0
    first = peeked[0]["messageId"]
    run(broker, "topics", "reset-cursor", topic, "-s", "from-start", "-m", first, "-e")
    assert backlog("from-start") == 3
    run(broker, "topics", "expire-messages", topic, "-s", "from-start", "-t", "0")
    assert backlog("from-start") == 0
    run(broker, "topics", "reset-cursor", topic, "-s", "at-end", "-t", "1h")
    run(broker, "topics", "expire-messages-all-subscriptions", topic, "-t", "0")
    assert backlog("at-end") == 0
    assert "exactly one of" in run(broker, "topics", "reset-cursor", topic, "-s", "at-end", code=2).stderr

    run(broker, "topics", "unsubscribe", topic, "-s", "at-end")
    assert _get(broker, _path(topic) + "/subscriptions") == ["from-start"]
    missing = run(broker, "topics", "peek-messages", topic, "-s", "at-end", code=1)
    assert "answered 404: Subscription not found" in missing.stderr
    missing = run(broker, "topics", "skip", topic, "-s", "at-end", "-n", "1", code=1)
    assert "Subscription not found" in missing.stderr


def test_topic_delete_and_delete_partitioned_topic(broker: BrokerProcess) -> None:
    topic = f"persistent://public/default/{_unique('doomed')}"
    _produce(broker, topic, "s")
    run(broker, "topics", "delete", topic, "-f")
    assert topic not in _get(broker, "/admin/v2/persistent/public/default")
    assert rest(broker, "GET", _path(topic) + "/stats")[0] == 404
    partitioned = f"persistent://public/default/{_unique('doomed-parts')}"
    run(broker, "topics", "create-partitioned-topic", partitioned, "-p", "2")
    run(broker, "topics", "delete-partitioned-topic", partitioned)
    assert partitioned not in _get(broker, "/admin/v2/persistent/public/default/partitioned")
    assert "answered 404" in run(broker, "topics", "delete", topic, code=1).stderr


def test_schema_and_cluster_commands(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = f"persistent://public/default/{_unique('schema')}"
    definition = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    payload = tmp_path / "schema.json"
    payload.write_text(json.dumps({"type": "AVRO", "schema": json.dumps(definition), "properties": {}}))
    assert run(broker, "schemas", "upload", topic, "-f", str(payload)).stdout.strip() == "schema version 0"
    got = json.loads(run(broker, "schemas", "get", topic).stdout)
    assert got["type"] == "AVRO" and json.loads(got["data"]) == definition
    run(broker, "schemas", "delete", topic)
    assert "answered 404" in run(broker, "schemas", "get", topic, code=1).stderr
    payload.write_text("{not json")
    assert (
        "not a JSON schema payload"
        in run(broker, "schemas", "upload", topic, "-f", str(payload), code=2).stderr
    )

    assert run(broker, "clusters", "list").stdout.splitlines() == ["standalone"]
    assert run_json(broker, "clusters", "get", "standalone") == _get(broker, "/admin/v2/clusters/standalone")
    assert run_json(broker, "brokers", "list") == _get(broker, "/admin/v2/brokers")


# ---------------------------------------------------------------------- connection and parsing
def test_unreachable_broker_and_bad_admin_url(broker: BrokerProcess) -> None:
    result = CliRunner().invoke(admin_group, ["--admin-url", "http://127.0.0.1:1", "tenants", "list"])
    assert result.exit_code == 1 and "cannot reach the admin API at http://127.0.0.1:1" in result.stderr
    result = CliRunner().invoke(admin_group, ["--admin-url", "ftp://x", "tenants", "list"])
    assert result.exit_code == 2 and "not an http:// or https:// URL" in result.stderr
    result = CliRunner(env={"QUASAR_ADMIN_URL": broker.admin_url}).invoke(admin_group, ["tenants", "list"])
    assert result.exit_code == 0 and "public" in result.stdout.splitlines()


def test_redirects_are_followed_with_the_credentials() -> None:
    """A cluster answers 307 to the topic's owner; httpx would drop Authorization on that other origin."""
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        if request.url.port == 8080:
            return httpx.Response(307, headers={"location": "http://10.0.0.2:8081/admin/v2/x/stats?a=1"})
        return httpx.Response(200, json={"ok": True})

    settings = AdminSettings(admin_url="http://10.0.0.1:8080", auth_token="tok")
    with AdminClient(settings, transport=httpx.MockTransport(handler)) as client:
        assert client.get_json("/admin/v2/x/stats", {"a": 1}) == {"ok": True}
    assert seen == [
        ("http://10.0.0.1:8080/admin/v2/x/stats?a=1", "Bearer tok"),
        ("http://10.0.0.2:8081/admin/v2/x/stats?a=1", "Bearer tok"),
    ]

    def loop(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"location": str(request.url)})

    with (
        AdminClient(settings, transport=httpx.MockTransport(loop)) as client,
        pytest.raises(AdminApiError) as err,
    ):
        client.get_json("/admin/v2/x")
    assert "redirects" in err.value.reason


def test_sizes_and_relative_times_parse_as_pulsar_admin() -> None:
    assert (
        parse_size("10G") == 10 * 1024**3 and parse_size("4096") == 4096 and parse_size("16m") == 16 * 1024**2
    )
    assert parse_size("-1") == -1 and parse_relative_seconds("-1") == -1
    assert parse_relative_seconds("3d") == 3 * 86400 and parse_relative_seconds("120") == 120
    assert parse_relative_seconds("10m") == 600 and parse_relative_seconds("2w") == 14 * 86400
    for bad in ("", "G", "1.5G", "-2", "10x"):
        with pytest.raises(click.BadParameter, match="size"):
            parse_size(bad)


def test_an_answer_that_is_not_json_is_a_clear_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>not an admin API</html>")

    with AdminClient(AdminSettings(), transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(click.ClickException, match="not JSON"):
            client.get_json("/admin/v2/tenants")
        assert client.request("GET", "/admin/v2/x").text.startswith("<html>")  # raw answers stay raw
