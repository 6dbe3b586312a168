"""TLS on a real ``quasar standalone`` process: the official ``pulsar-client`` and Quasar's client over
``pulsar+ssl://`` with hostname validation on, refusal without the CA, required client certificates
(``AuthenticationTLS``), the HTTPS admin API and HTTP lookup, and certificate files replaced while the broker
runs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pulsar
import pytest

from quasar.client import AuthenticationTLS, Client, ConnectError, InitialPosition
from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import QUASAR_COMMAND

from .conftest import Pki, TlsBrokerFactory

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]


def _official(url: str, **kwargs: object) -> pulsar.Client:
    kwargs.setdefault("operation_timeout_seconds", 10)
    return pulsar.Client(url, logger=_quiet_logger(), **kwargs)  # type: ignore[arg-type]


def _quiet_logger() -> object:
    import logging

    logger = logging.getLogger("pulsar-test")
    logger.setLevel(logging.ERROR)
    return logger


def _round_trip_official(client: pulsar.Client, topic: str) -> bytes:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"over-tls")
    message = consumer.receive(10_000)
    consumer.acknowledge(message)
    return message.data()


def _round_trip_quasar(client: Client, topic: str) -> bytes:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer.send(b"over-tls")
    message = consumer.receive(10_000)
    consumer.acknowledge(message)
    return message.data()


def _tls_url(broker: BrokerProcess) -> str:
    assert broker.service_url_tls is not None, "the broker did not report a pulsar+ssl:// URL"
    return broker.service_url_tls


def _handshake(url: str, cafile: Path) -> dict[str, object]:
    """One TLS handshake (host name checked) with ``cafile`` trusted; the broker certificate's fields."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((parts.hostname, parts.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=parts.hostname) as tls,
    ):
        return tls.getpeercert()  # type: ignore[return-value]


def test_ready_line_and_lookups_carry_the_tls_urls(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory()
    url, https = _tls_url(broker), broker.admin_url_tls
    assert url.startswith("pulsar+ssl://127.0.0.1:") and https is not None and https.startswith("https://")
    assert urlsplit(url).port != broker.bound_port and urlsplit(https).port != broker.bound_admin_port
    context = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(
        f"{https}/lookup/v2/topic/persistent/public/default/lk", context=context
    ) as r:
        data = json.loads(r.read())
    assert data["brokerUrlTls"] == url and data["httpUrlTls"] == https
    assert data["brokerUrl"] == broker.service_url and data["httpUrl"] == broker.admin_url
    with urllib.request.urlopen(f"{https}/admin/v2/clusters/standalone", context=context) as r:
        cluster = json.loads(r.read())
    assert cluster["brokerServiceUrlTls"] == url and cluster["serviceUrlTls"] == https
    # the plain listeners are unchanged
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/clusters") as r:
        assert json.loads(r.read()) == ["standalone"]


def test_official_client_produces_and_consumes_over_tls_with_hostname_validation(
    tls_broker_factory: TlsBrokerFactory, pki: Pki
):
    broker = tls_broker_factory()
    client = _official(_tls_url(broker), tls_trust_certs_file_path=str(pki.ca), tls_validate_hostname=True)
    try:
        assert _round_trip_official(client, "persistent://public/default/official-tls") == b"over-tls"
    finally:
        client.close()


def test_official_client_without_the_ca_is_refused(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory()
    client = _official(_tls_url(broker), operation_timeout_seconds=3, tls_validate_hostname=True)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/no-ca")
    finally:
        client.close()
    # trusting another CA is refused the same way
    client = _official(
        _tls_url(broker), operation_timeout_seconds=3, tls_trust_certs_file_path=str(pki.other_ca)
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/no-ca")
    finally:
        client.close()


def test_quasar_client_over_tls_and_refused_without_the_ca(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory()
    with Client(
        _tls_url(broker),
        tls_trust_certs_file_path=str(pki.ca),
        tls_validate_hostname=True,
        operation_timeout_seconds=10,
    ) as client:
        assert _round_trip_quasar(client, "persistent://public/default/quasar-tls") == b"over-tls"
    with (
        Client(
            _tls_url(broker), tls_trust_certs_file_path=str(pki.other_ca), operation_timeout_seconds=2
        ) as client,
        pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.create_producer("persistent://public/default/quasar-tls")


def test_required_client_certificate(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory(
        tls_trust_certs_file_path=str(pki.ca), tls_require_trusted_client_cert_on_connect=True
    )
    url = _tls_url(broker)
    topic = "persistent://public/default/mtls"
    # official client: refused without a certificate, served with AuthenticationTLS
    client = _official(url, operation_timeout_seconds=3, tls_trust_certs_file_path=str(pki.ca))
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()
    client = _official(
        url,
        tls_trust_certs_file_path=str(pki.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)),
    )
    try:
        assert _round_trip_official(client, topic) == b"over-tls"
    finally:
        client.close()
    # Quasar's client: the same, and a certificate of an untrusted CA is refused
    with (
        Client(url, tls_trust_certs_file_path=str(pki.ca), operation_timeout_seconds=2) as quasar_client,
        pytest.raises(ConnectError),
    ):
        quasar_client.create_producer(topic)
    rogue = AuthenticationTLS(pki.rogue_client_cert, pki.rogue_client_key)
    with (
        Client(
            url, tls_trust_certs_file_path=str(pki.ca), authentication=rogue, operation_timeout_seconds=2
        ) as c,
        pytest.raises(ConnectError),
    ):
        c.create_producer(topic)
    auth = AuthenticationTLS(pki.client_cert, pki.client_key)
    with Client(
        url, tls_trust_certs_file_path=str(pki.ca), authentication=auth, operation_timeout_seconds=10
    ) as c:
        assert _round_trip_quasar(c, topic + "-quasar") == b"over-tls"
    # HTTPS admin also requires the certificate
    plain = ssl.create_default_context(cafile=str(pki.ca))
    with (
        pytest.raises((ssl.SSLError, OSError)),
        urllib.request.urlopen(f"{broker.admin_url_tls}/admin/v2/clusters", context=plain) as r,
    ):
        r.read()
    mutual = ssl.create_default_context(cafile=str(pki.ca))
    mutual.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with urllib.request.urlopen(f"{broker.admin_url_tls}/admin/v2/clusters", context=mutual) as r:
        assert json.loads(r.read()) == ["standalone"]


def test_https_admin_answers_with_the_ca_only(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory()
    context = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(f"{broker.admin_url_tls}/admin/v2/tenants", context=context) as r:
        assert "public" in json.loads(r.read())
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            f"{broker.admin_url_tls}/admin/v2/tenants", context=ssl.create_default_context()
        )


def test_replaced_certificate_files_are_picked_up_without_restart(
    tls_broker_factory: TlsBrokerFactory, pki: Pki
):
    broker = tls_broker_factory(tls_cert_refresh_check_duration_sec=0.2)
    url = _tls_url(broker)
    assert _handshake(url, pki.ca)
    # a half-written replacement (garbage certificate) is refused: the old certificate keeps serving
    pki.cert.write_text("not a certificate\n")
    log = broker.log_dir
    deadline = time.monotonic() + 15
    while "cannot be reloaded" not in _stderr(log):
        assert time.monotonic() < deadline, "the failed reload was not logged"
        time.sleep(0.1)
    assert _handshake(url, pki.ca)
    # the new CA's certificate and key: new handshakes get them, with no restart
    shutil.copyfile(pki.other_key, pki.key)
    shutil.copyfile(pki.other_cert, pki.cert)
    deadline = time.monotonic() + 15
    while True:
        try:
            _handshake(url, pki.other_ca)
            break
        except ssl.SSLError:
            assert time.monotonic() < deadline, "the replaced certificate was not picked up"
            time.sleep(0.1)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(url, pki.ca)
    client = _official(url, tls_trust_certs_file_path=str(pki.other_ca), tls_validate_hostname=True)
    try:
        assert _round_trip_official(client, "persistent://public/default/reloaded") == b"over-tls"
    finally:
        client.close()
    assert broker.running


def _stderr(log_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("*.stderr.log")))


def _standalone(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *QUASAR_COMMAND, "standalone", "--data-dir", str(tmp_path / "d"),
         "--port", "0", "--admin-port", "0", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )  # fmt: skip


def test_tls_port_without_certificate_is_a_clear_config_error(tmp_path: Path, pki: Pki):
    result = _standalone(tmp_path, "--broker-service-port-tls", "0")
    assert result.returncode != 0
    assert "tls_certificate_file_path" in result.stderr and "Traceback" not in result.stderr
    config = tmp_path / "missing.toml"
    config.write_text(
        f'tls_certificate_file_path = "{tmp_path / "nope.pem"}"\ntls_key_file_path = "{pki.key}"\n'
    )
    result = _standalone(tmp_path, "--web-service-port-tls", "0", "--config", str(config))
    assert result.returncode != 0
    assert "cannot load tls_certificate_file_path" in result.stderr and "nope.pem" in result.stderr
    assert "Traceback" not in result.stderr


def test_quasar_admin_over_https_with_a_client_certificate(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    from click.testing import CliRunner

    from quasar.cli.admin import admin

    broker = tls_broker_factory(
        tls_trust_certs_file_path=str(pki.ca), tls_require_trusted_client_cert_on_connect=True
    )
    url = ["--admin-url", str(broker.admin_url_tls)]
    mutual = [*url, "--tls-trust-certs-file", str(pki.ca), "--tls-cert-file", str(pki.client_cert),
              "--tls-key-file", str(pki.client_key)]  # fmt: skip
    served = CliRunner().invoke(admin, [*mutual, "clusters", "list"])
    assert served.exit_code == 0 and served.stdout.splitlines() == ["standalone"], served.output
    no_cert = CliRunner().invoke(admin, [*url, "--tls-trust-certs-file", str(pki.ca), "clusters", "list"])
    assert no_cert.exit_code == 1 and "cannot reach the admin API" in no_cert.stderr, no_cert.output
    no_ca = CliRunner().invoke(admin, [*mutual[:2], *mutual[4:], "clusters", "list"])
    assert no_ca.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in no_ca.stderr, no_ca.output
    half = CliRunner().invoke(admin, [*url, "--tls-cert-file", str(pki.client_cert), "clusters", "list"])
    assert half.exit_code == 2 and "go together" in half.stderr, half.output
