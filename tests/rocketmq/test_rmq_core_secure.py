"""The RocketMQ endpoint of a secured broker (one per module): TLS (``rocketmq_port_tls`` with the broker's
certificate files) — routes name the TLS port to a TLS caller (the plain port to a plain one), plaintext is
refused on the TLS port — and token authentication — the official producer presents its Pulsar token as
access key (``Credentials(ak=token)``) and sends over TLS; no or a forged token is UNAUTHORIZED."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from quasar.security.tokens import create_secret_key, create_token
from quasar.testing.broker_process import BrokerProcess
from tests.rocketmq.conftest import metadata

KEY = create_secret_key()

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("rmq-pki")
    ca = trustme.CA()
    paths = {name: directory / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    paths["cert"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(paths["key"]))
    return paths


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Path]) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("rmq-tls-broker")
    config = directory / "broker.toml"
    config.write_text(
        "rocketmq_port_tls = 0\n"
        f'tls_certificate_file_path = "{pki["cert"]}"\n'
        f'tls_key_file_path = "{pki["key"]}"\n'
        f'tls_trust_certs_file_path = "{pki["ca"]}"\n'
    )
    key_file = directory / "secret.key"
    key_file.write_bytes(KEY)
    with config.open("a") as toml:
        toml.write(
            'authentication_enabled = true\nauthentication_providers = ["token"]\n'
            f'token_secret_key = "file://{key_file}"\n'
        )
    process = BrokerProcess(directory / "data", rocketmq_port=0, extra_args=("--config", str(config)))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _signed(token: str) -> list[tuple[str, str]]:
    """Call metadata with the py client's authorization header carrying ``token`` as access key."""
    header = f"MQv2-HMAC-SHA1 Credential={token}, SignedHeaders=x-mq-date-time, Signature=00"
    return [*metadata(), ("authorization", header)]


def _pb() -> tuple[Any, Any, Any]:
    from rocketmq.grpc_protocol import MessagingServiceStub, definition_pb2, service_pb2

    return definition_pb2, service_pb2, MessagingServiceStub


def test_tls_caller_is_routed_to_the_tls_port(tls_broker: BrokerProcess, pki: dict[str, Path]) -> None:
    d, s, stub_class = _pb()
    assert tls_broker.rocketmq_tls_address is not None and tls_broker.rocketmq_address is not None
    tls_port = tls_broker.rocketmq_tls_address.rsplit(":", 1)[1]
    credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
    with grpc.secure_channel(tls_broker.rocketmq_tls_address, credentials) as channel:
        answer = stub_class(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")),
            metadata=_signed(create_token("app", secret_key=KEY)),
            timeout=10,
        )
    assert answer.status.code == d.Code.OK
    assert [a.port for a in answer.message_queues[0].broker.endpoints.addresses] == [int(tls_port)]
    with grpc.insecure_channel(tls_broker.rocketmq_address) as channel:  # the plaintext port stays
        plain = stub_class(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")),
            metadata=_signed(create_token("app", secret_key=KEY)),
            timeout=10,
        )
    assert [a.port for a in plain.message_queues[0].broker.endpoints.addresses] == [
        int(tls_broker.rocketmq_address.rsplit(":", 1)[1])
    ]
    with grpc.insecure_channel(tls_broker.rocketmq_tls_address) as channel, pytest.raises(grpc.RpcError):
        stub_class(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="T")), metadata=metadata(), timeout=3
        )


def test_official_producer_sends_over_tls(
    tls_broker: BrokerProcess, pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the py client's TLS channel trusts gRPC's default roots: point them at the test CA
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(pki["ca"]))
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    assert tls_broker.rocketmq_tls_address is not None
    producer = Producer(
        ClientConfiguration(
            tls_broker.rocketmq_tls_address, Credentials(ak=create_token("app", secret_key=KEY))
        ),
        ("tls-topic",),
        tls_enable=True,
    )
    producer.startup()
    try:
        message = Message()
        message.topic = "tls-topic"
        message.body = b"secret"
        receipt = producer.send(message)
    finally:
        producer.shutdown()
    assert receipt.offset == 0 and len(receipt.message_id) == 34


def test_calls_without_a_valid_token_are_unauthorized(tls_broker: BrokerProcess) -> None:
    d, s, stub_class = _pb()
    assert tls_broker.rocketmq_address is not None
    request = s.QueryRouteRequest(topic=d.Resource(name="T"))
    forged = create_token("app", secret_key=create_secret_key())
    with grpc.insecure_channel(tls_broker.rocketmq_address) as channel:
        stub = stub_class(channel)
        assert stub.QueryRoute(request, metadata=metadata(), timeout=10).status.code == d.Code.UNAUTHORIZED
        assert (
            stub.QueryRoute(request, metadata=_signed(forged), timeout=10).status.code == d.Code.UNAUTHORIZED
        )
        sent = stub.SendMessage(s.SendMessageRequest(), metadata=metadata(), timeout=10)
        assert sent.status.code == d.Code.UNAUTHORIZED
