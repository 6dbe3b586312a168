"""Hostile topic, tenant and namespace names against a live broker (issue 16, hardening): each is refused with
Pulsar's error wherever it arrives (binary LOOKUP / PARTITIONED_METADATA / PRODUCER / SUBSCRIBE, admin REST
paths after URL-decoding), creates nothing, and the broker keeps serving."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

from quasar.protocol import CommandType, commands
from quasar.protocol.enums import ServerError, SubType
from tests.interop.helpers import admin, new_client, topic_name

pytestmark = pytest.mark.interop

HOSTILE = [
    "persistent://../../x",
    "persistent://public/../x",
    "persistent://public/default/..",
    "..",
    "%2e%2e",
    "%2e%2e%2fescape",
    "a\u202eb",  # right-to-left override: displays as another name
    "a\x01b",
    "x" * 10_000,
    "persistent://public/default/" + "y" * 20_000,
]
IDS = ["dotdot-tenant", "dotdot-ns", "dotdot-topic", "short-dotdot", "pct-dotdot", "pct-slash", "bidi", "ctrl",
       "10kB", "20kB"]  # fmt: skip


def _still_serves(broker) -> None:
    """A fresh official client produces and consumes on a valid topic."""
    client = new_client(broker)
    try:
        topic = topic_name("after-hostile")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"still here")
        assert consumer.receive(timeout_millis=10_000).data() == b"still here"
    finally:
        client.close()


def _created_topics(broker) -> list[str]:
    status, topics = admin(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200
    return topics


@pytest.mark.parametrize("name", HOSTILE, ids=IDS)
def test_binary_commands_refuse_hostile_names(broker, raw, name):
    conn = raw()
    conn.send(commands.new_partitioned_metadata(name, 1))
    meta = conn.expect(CommandType.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    # NotAllowed, not InvalidTopicName: the official client retries the latter until its timeout (lookup.py)
    assert meta.error == ServerError.NotAllowedError and "InvalidTopicName" in meta.message
    conn.send(commands.new_lookup(name, 2))
    lookup = conn.expect(CommandType.LOOKUP_RESPONSE).command.lookupTopicResponse
    assert lookup.response == 2 and lookup.error == ServerError.InvalidTopicName  # 2 = Failed
    conn.send(commands.new_producer(name, 1, 3))
    error = conn.expect(CommandType.ERROR).command.error
    assert error.request_id == 3 and error.error == ServerError.InvalidTopicName
    conn.send(commands.new_subscribe(name, "sub", SubType.Exclusive, 1, 4))
    error = conn.expect(CommandType.ERROR).command.error
    assert error.request_id == 4 and error.error == ServerError.InvalidTopicName
    conn.send(commands.new_ping())  # the connection itself is fine
    conn.expect(CommandType.PONG)
    assert not [t for t in _created_topics(broker) if "/.." in t or "%" in t or len(t) > 1024]
    _still_serves(broker)


@pytest.mark.parametrize(
    "name", ["persistent://public/../x", "%2e%2e%2fx", "z" * 10_000], ids=["ns", "pct", "long"]
)
def test_official_client_fails_at_once_instead_of_retrying(broker, name):
    client = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=60,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        # a retried error would end in Timeout after 60 s; a final one raises NotAllowedError at once
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer(name)
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(name, "s")
    finally:
        client.close()
    _still_serves(broker)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/admin/v2/persistent/public/default/%2e%2e"),
        ("PUT", "/admin/v2/persistent/public/default/%2e%2e%252fx"),
        ("PUT", "/admin/v2/persistent/public/default/%2e%2e/partitions"),
        ("PUT", "/admin/v2/non-persistent/public/default/%2E%2E"),
        ("PUT", "/admin/v2/tenants/%2e%2e"),
        ("PUT", "/admin/v2/namespaces/public/%2e%2e"),
        ("PUT", "/admin/v2/namespaces/public/%2e"),
        ("PUT", "/admin/v2/persistent/public/default/" + "q" * 2_000),
        ("GET", "/admin/v2/persistent/public/default/a%E2%80%AEb/stats"),
        ("GET", "/admin/v2/persistent/public/default/%2e%2e/messages?key=k"),
    ],
    ids=[
        "topic",
        "double-encoded",
        "partitioned",
        "non-persistent",
        "tenant",
        "namespace",
        "dot-namespace",
        "2kB",
        "bidi-stats",
        "query",
    ],
)
def test_rest_refuses_hostile_names_with_412(broker, method, path):
    status, body = admin(broker, method, path, 2 if path.endswith("/partitions") else None)
    assert status == 412, body
    assert isinstance(body, dict) and ("not valid" in body["reason"] or "invalid" in body["reason"])
    status, tenants = admin(broker, "GET", "/admin/v2/tenants")
    assert ".." not in tenants
    status, namespaces = admin(broker, "GET", "/admin/v2/namespaces/public")
    assert "public/.." not in namespaces and "public/." not in namespaces
    assert not [t for t in _created_topics(broker) if t.endswith("/..") or "%" in t or len(t) > 1024]
    _still_serves(broker)


def test_rest_still_accepts_valid_unusual_names(broker):
    name = f"a..b={uuid.uuid4().hex[:6]}:c"
    status, body = admin(broker, "PUT", f"/admin/v2/persistent/public/default/{name}")
    assert status == 204, body
    assert f"persistent://public/default/{name}" in _created_topics(broker)
    tenant = f"t.{uuid.uuid4().hex[:6]}"
    assert admin(broker, "PUT", f"/admin/v2/tenants/{tenant}")[0] == 204


def test_overlong_url_is_refused_without_harm(broker):
    request = urllib.request.Request(f"{broker.admin_url}/admin/v2/tenants/{'t' * 100_000}", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code in (400, 414, 431)  # aiohttp: 400 "Got more than 8190 bytes" before any handler
    caught.value.close()
    _still_serves(broker)
