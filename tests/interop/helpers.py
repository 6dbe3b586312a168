"""Shared helpers of the interop tests: an official ``pulsar.Client`` on the test broker, unique topic and
namespace names, and the admin REST call."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pulsar


def new_client(broker) -> pulsar.Client:
    """The official client on ``broker`` (15 s operation timeout; its C++ logger, not Python logging, which
    makes the client abort at interpreter exit)."""
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def topic_name(prefix: str = "t", domain: str = "persistent") -> str:
    """A fresh topic in public/default: ``<domain>://public/default/<prefix>-<10 hex>``."""
    return f"{domain}://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def admin(broker, method: str, path: str, body=None) -> tuple[int, object]:
    """(HTTP status, decoded JSON body or None) of an admin REST call; HTTP errors are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{broker.admin_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
            return resp.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read().decode() or "null")


def new_namespace(broker, prefix: str) -> str:
    """Create ``public/<prefix>-<8 hex>`` through the admin API and return its name."""
    namespace = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
    assert admin(broker, "PUT", f"/admin/v2/namespaces/{namespace}", {})[0] == 204
    return namespace


def create_partitioned(broker, topic: str, partitions: int) -> None:
    """Create ``topic`` (``persistent://tenant/ns/name``) as a partitioned topic through the admin API."""
    local = topic.split("persistent://", 1)[1]
    status, body = admin(broker, "PUT", f"/admin/v2/persistent/{local}/partitions", partitions)
    assert status == 204, body
