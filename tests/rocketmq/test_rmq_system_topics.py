"""RocketMQ's system topics kept internal (``broker/system_topics.py``, docs/rocketmq-limits.md): a namespace with a
pending transactional half message lists no ``RMQ_SYS_*`` / ``TRANS_CHECK_MAX_TIME_TOPIC`` topic to users
(admin listings, a Pulsar pattern consumer), refuses a Pulsar consumer on the op subscription, refuses its
deletion while the half is pending and deletes the system topics with it once resolved. One broker process
(the module's) and the official clients."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import admin

pulsar = pytest.importorskip("pulsar")
pytestmark = pytest.mark.interop

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF"


class _Checker:
    def check(self, message: Any) -> Any:
        from rocketmq import TransactionResolution

        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


def _message(topic: str, body: bytes) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body
    return message


def _delete_namespace(broker: BrokerProcess, namespace: str) -> tuple[int, str]:
    """(status, the error's reason or "")."""
    request = urllib.request.Request(f"{broker.admin_url}/admin/v2/namespaces/{namespace}", method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}").get("reason", "")


def test_system_topics_are_internal_and_go_with_their_namespace(rmq_broker, rmq_config) -> None:
    from rocketmq import Producer, TransactionChecker

    ns = f"sys-{uuid.uuid4().hex[:8]}"
    namespace = f"public/{ns}"
    assert admin(rmq_broker, "PUT", f"/admin/v2/namespaces/{namespace}", {})[0] == 204
    topic = "orders"
    TransactionChecker.register(_Checker)
    producer = Producer(rmq_config(namespace=ns), (topic,), checker=_Checker())
    producer.startup()
    client = pulsar.Client(rmq_broker.service_url, operation_timeout_seconds=10)
    try:
        transaction = producer.begin_transaction()
        producer.send(_message(topic, b"pending"), transaction)
        half = f"persistent://{namespace}/{HALF}"

        status, listed = admin(rmq_broker, "GET", f"/admin/v2/persistent/{namespace}")
        assert status == 200 and not any("RMQ_SYS" in t or "TRANS_CHECK" in t for t in listed)
        status, everything = admin(
            rmq_broker, "GET", f"/admin/v2/persistent/{namespace}?includeSystemTopic=true"
        )
        assert status == 200 and half in everything
        status, listed = admin(rmq_broker, "GET", f"/admin/v2/namespaces/{namespace}/topics?mode=ALL")
        assert status == 200 and half not in listed
        status, listed = admin(
            rmq_broker, "GET", f"/admin/v2/namespaces/{namespace}/topics?include_system_topic=true"
        )
        assert status == 200 and half in listed

        # a pattern consumer (CommandGetTopicsOfNamespace) never attaches to the half topic
        pattern = client.subscribe(re.compile(f"persistent://{namespace}/.*"), "everything")
        status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/{namespace}/{HALF}/stats")
        assert status == 200 and set(stats["subscriptions"]) == {OP}
        pattern.close()

        with pytest.raises(pulsar.NotAllowedError):  # acking there would resolve halves
            client.subscribe(half, OP)
        status, stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/{namespace}/{HALF}/stats")
        assert stats["subscriptions"][OP]["msgBacklog"] == 1  # still pending

        # a real topic the producer may have created is deleted; the pending half still blocks the namespace
        for name in admin(rmq_broker, "GET", f"/admin/v2/persistent/{namespace}")[1]:
            admin(rmq_broker, "DELETE", f"/admin/v2/persistent/{name.split('://', 1)[1]}?force=true")
        status, body = _delete_namespace(rmq_broker, namespace)
        assert status == 409 and "half message" in body, body
        assert admin(rmq_broker, "GET", f"/admin/v2/namespaces/{namespace}")[0] == 200

        transaction.rollback()
        deadline = time.monotonic() + 10
        while True:  # the rollback acknowledges the half on the op subscription
            stats = admin(rmq_broker, "GET", f"/admin/v2/persistent/{namespace}/{HALF}/stats")[1]
            if stats["subscriptions"][OP]["msgBacklog"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        producer.shutdown()
        client.close()
    status, _ = _delete_namespace(rmq_broker, namespace)
    assert status == 204
    assert admin(rmq_broker, "GET", f"/admin/v2/namespaces/{namespace}")[0] == 404
    status, left = admin(rmq_broker, "GET", "/admin/v2/persistent/public/default?includeSystemTopic=true")
    assert status == 200 and not any(namespace + "/" in t for t in left)
