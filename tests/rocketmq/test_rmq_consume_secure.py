"""Consumption on a broker with token authentication and authorization (one per module): the consumption
RPCs check the caller's consume permission on the topic and group, as a Pulsar SUBSCRIBE is checked."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from quasar.security.tokens import create_secret_key, create_token
from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import metadata

KEY = create_secret_key()
pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("rmq-authz-broker")
    key_file = directory / "secret.key"
    key_file.write_bytes(KEY)
    config = directory / "broker.toml"
    config.write_text(
        'authentication_enabled = true\nauthentication_providers = ["token"]\n'
        f'token_secret_key = "file://{key_file}"\n'
        'authorization_enabled = true\nsuper_user_roles = ["admin"]\n'
    )
    process = BrokerProcess(directory / "data", rocketmq_port=0, extra_args=("--config", str(config)))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _signed(role: str) -> list[tuple[str, str]]:
    token = create_token(role, secret_key=KEY)
    header = f"MQv2-HMAC-SHA1 Credential={token}, SignedHeaders=x-mq-date-time, Signature=00"
    return [*metadata(), ("authorization", header)]


def _grant(broker: BrokerProcess, role: str, actions: list[str]) -> None:
    admin_token = create_token("admin", secret_key=KEY)
    request = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/namespaces/public/default/permissions/{role}",
        data=json.dumps(actions).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {admin_token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204


def test_consumption_needs_consume_permission(secured: BrokerProcess) -> None:
    import grpc
    from rocketmq.grpc_protocol import AckMessageRequest, MessagingServiceStub, ReceiveMessageRequest

    _grant(secured, "writer", ["produce"])
    _grant(secured, "reader", ["consume"])
    receive = ReceiveMessageRequest(batch_size=0, auto_renew=True)  # batch 0: answered right after the checks
    receive.group.name = "g"
    receive.message_queue.topic.name = "secured-topic"
    ack = AckMessageRequest()
    ack.group.name = "g"
    ack.topic.name = "secured-topic"
    ack.entries.add(message_id="01AB", receipt_handle="1 1 1 0 0 standalone 0 1")
    assert secured.rocketmq_address is not None
    with grpc.insecure_channel(secured.rocketmq_address) as channel:
        stub: Any = MessagingServiceStub(channel)
        (answer,) = list(stub.ReceiveMessage(receive, metadata=_signed("writer"), timeout=10))
        assert answer.status.code == 40300 and "consume" in answer.status.message
        assert stub.AckMessage(ack, metadata=_signed("writer"), timeout=10).status.code == 40300
        (answer,) = list(stub.ReceiveMessage(receive, metadata=_signed("reader"), timeout=10))
        assert answer.status.code == 40000  # past the permission check: the batch size is refused
        assert stub.AckMessage(ack, metadata=_signed("reader"), timeout=10).status.code == 40013
