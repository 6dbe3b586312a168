"""One broker set up like Pulsar's own client test service: TLS on both listeners, token + basic + TLS client
certificate authentication, authorization with a super user and namespace permissions. The official client
reaches it over ``pulsar+ssl://`` with each authentication method; the admin API answers over HTTPS."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from passlib.hash import apr_md5_crypt

from quasar.security.tokens import create_token
from quasar.testing.subprocess_harness import QUASAR_COMMAND
from tests.security.conftest import Pki, TlsBrokerFactory

pytestmark = pytest.mark.interop

SUPER_USER = "admin"
CLIENT_CN = "client-a"  # the pki fixture's client certificate


def _https(
    url: str, pki: Pki, method: str = "GET", body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(pki.ca))
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _client(broker: Any, pki: Pki, authentication: Any) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url_tls,
        authentication=authentication,
        tls_trust_certs_file_path=str(pki.ca),
        tls_validate_hostname=True,
        operation_timeout_seconds=8,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _round_trip(client: pulsar.Client, topic: str) -> bytes:
    consumer = client.subscribe(topic, f"s-{uuid.uuid4().hex[:6]}")
    client.create_producer(topic).send(b"secure")
    message = consumer.receive(10_000)
    consumer.acknowledge(message)
    return message.data()


def test_tls_token_basic_and_certificate_authentication_with_authorization(
    tls_broker_factory: TlsBrokerFactory, pki: Pki, tmp_path: Path
):
    key_file = tmp_path / "secret.key"
    made = subprocess.run(
        [sys.executable, *QUASAR_COMMAND, "tokens", "create-secret-key", "--output", str(key_file)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"bob:{apr_md5_crypt.hash('bob-secret')}\n")
    broker = tls_broker_factory(
        tls_trust_certs_file_path=str(pki.ca),
        authentication_enabled=True,
        authentication_providers=["token", "basic", "tls"],
        token_secret_key=f"file://{key_file}",
        basic_auth_conf=str(htpasswd),
        authorization_enabled=True,
        super_user_roles=[SUPER_USER],
    )
    secret = key_file.read_bytes()
    admin_token = create_token(SUPER_USER, secret_key=secret, expiry_s=3600)
    app_token = create_token("app", secret_key=secret, expiry_s=3600)
    https = broker.admin_url_tls

    assert _https(f"{https}/admin/v2/tenants", pki)[0] == 401  # nothing but health is open
    namespace = f"public/secure-{uuid.uuid4().hex[:6]}"
    assert _https(f"{https}/admin/v2/namespaces/{namespace}", pki, "PUT", {}, admin_token)[0] == 204
    for role in ("app", "bob", CLIENT_CN):
        status, body = _https(
            f"{https}/admin/v2/namespaces/{namespace}/permissions/{role}",
            pki,
            "POST",
            ["produce", "consume"],
            admin_token,
        )
        assert status == 204, body
    status, grants = _https(f"{https}/admin/v2/namespaces/{namespace}/permissions", pki, token=admin_token)
    assert status == 200 and set(grants) >= {"app", "bob", CLIENT_CN}
    assert _https(f"{https}/admin/v2/namespaces/{namespace}/permissions", pki, token=app_token)[0] == 403

    topic = f"persistent://{namespace}/t-{uuid.uuid4().hex[:6]}"
    methods = {
        "token": pulsar.AuthenticationToken(app_token),
        "basic": pulsar.AuthenticationBasic("bob", "bob-secret"),
        "tls": pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)),
    }
    for name, authentication in methods.items():
        client = _client(broker, pki, authentication)
        try:
            assert _round_trip(client, topic) == b"secure", name
        finally:
            client.close()

    stranger = create_token("stranger", secret_key=secret, expiry_s=3600)
    client = _client(broker, pki, pulsar.AuthenticationToken(stranger))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
    finally:
        client.close()
