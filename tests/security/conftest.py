"""Fixtures of the security tests.

A real ``quasar standalone`` with authentication (token + basic) and authorization on, set up like
Pulsar's own client test service: a super user ``admin``, an anonymous role ``anonymous``, tokens signed with a
secret key made by ``quasar tokens``, and an htpasswd file with an ``$apr1$`` and a crypt user.

``secured``: one broker per module (a :class:`Secured` with the broker, the key and token helpers, and an admin
REST helper that sends credentials); ``strict``: the same without an anonymous role. Both are stopped by PID
at teardown.

Fixtures of the TLS tests: a private PKI made with ``trustme`` (a CA, a broker certificate whose SANs are
127.0.0.1 and localhost, a client certificate, and a second, untrusted CA), written as PEM files, and real
``quasar standalone`` brokers with TLS listeners on free ports (stopped by PID at teardown; the tail of their
stderr is added to a failing test's report).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from passlib.hash import apr_md5_crypt, des_crypt

from quasar.security.tokens import create_token
from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import QUASAR_COMMAND, stderr_sections

AUDIENCE = "quasar-test"
SUPER_USER = "admin"
ANONYMOUS = "anonymous"
PASSWORDS = {"bob": "bob-secret", "carol": "carol-pw"}


@dataclass
class Secured:
    broker: BrokerProcess
    secret_key: bytes
    key_file: Path

    def token(self, subject: str, *, expiry_s: int | None = 3600, audience: str = AUDIENCE) -> str:
        return create_token(subject, secret_key=self.secret_key, expiry_s=expiry_s, claims={"aud": audience})

    def admin(self, method: str, path: str, body=None, *, token: str | None = None, headers=None):
        """(status, JSON body or text) of an admin REST call with ``Authorization: Bearer token`` (default:
        the super user's); ``token=""`` sends no credentials."""
        token = self.token(SUPER_USER) if token is None else token
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.broker.admin_url}{path}", data=data, method=method, headers=all_headers
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read().decode()
                return resp.status, _decode(text)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, _decode(exc.read().decode())

    def new_namespace(self, prefix: str) -> str:
        namespace = f"public/{prefix}-{uuid.uuid4().hex[:8]}"
        status, body = self.admin("PUT", f"/admin/v2/namespaces/{namespace}", {})
        assert status == 204, body
        return namespace


def _decode(text: str):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def quasar_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *QUASAR_COMMAND, *args], capture_output=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from _secured_broker(tmp_path_factory, anonymous_role=ANONYMOUS)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from _secured_broker(tmp_path_factory, anonymous_role="")


def _secured_broker(tmp_path_factory: pytest.TempPathFactory, *, anonymous_role: str) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    key_file = root / "secret.key"
    made = quasar_cli("tokens", "create-secret-key", "--output", str(key_file))
    assert made.returncode == 0, made.stderr
    htpasswd = root / "htpasswd"
    htpasswd.write_text(
        f"bob:{apr_md5_crypt.hash(PASSWORDS['bob'])}\ncarol:{des_crypt.hash(PASSWORDS['carol'])}\n"
    )
    config = root / "broker.toml"
    config.write_text(
        "\n".join(
            [
                "authentication_enabled = true",
                'authentication_providers = ["token", "basic", "tls"]',
                f'token_secret_key = "file://{key_file}"',
                'token_audience_claim = "aud"',
                f'token_audience = "{AUDIENCE}"',
                f'basic_auth_conf = "{htpasswd}"',
                f'anonymous_user_role = "{anonymous_role}"',
                "authorization_enabled = true",
                f'super_user_roles = ["{SUPER_USER}"]',
                "authentication_refresh_check_seconds = 1",
            ]
        )
        + "\n"
    )
    broker = BrokerProcess(root / "data", extra_args=("--config", str(config)))
    broker.start()
    try:
        yield Secured(broker, key_file.read_bytes(), key_file)
    finally:
        broker.stop()


_BROKERS = pytest.StashKey[list[BrokerProcess]]()


@dataclass(frozen=True)
class Pki:
    """PEM files: ``ca`` (trusted CA), ``cert``/``key`` (broker, SAN 127.0.0.1 + localhost), ``client_cert`` /
    ``client_key`` (CN ``client-a``, signed by ``ca``), ``other_ca`` with ``other_cert``/``other_key`` (a broker
    certificate of an untrusted CA) and ``rogue_client_cert``/``rogue_client_key`` (a client of ``other_ca``)."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_cert: Path
    other_key: Path
    rogue_client_cert: Path
    rogue_client_key: Path
    ca_obj: trustme.CA


def _write_leaf(leaf: trustme.LeafCert, cert: Path, key: Path) -> None:
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    directory.mkdir()
    ca, other = trustme.CA(), trustme.CA()
    paths = {name: directory / f"{name}.pem" for name in Pki.__dataclass_fields__ if name != "ca_obj"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other.cert_pem.write_to_path(str(paths["other_ca"]))
    _write_leaf(ca.issue_cert("127.0.0.1", "localhost"), paths["cert"], paths["key"])
    _write_leaf(other.issue_cert("127.0.0.1", "localhost"), paths["other_cert"], paths["other_key"])
    _write_leaf(ca.issue_cert("client-a", common_name="client-a"), paths["client_cert"], paths["client_key"])
    _write_leaf(
        other.issue_cert("rogue", common_name="rogue"), paths["rogue_client_cert"], paths["rogue_client_key"]
    )
    return Pki(ca_obj=ca, **paths)


TlsBrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def tls_broker_factory(
    tmp_path: Path, pki: Pki, request: pytest.FixtureRequest
) -> Iterator[TlsBrokerFactory]:
    """``tls_broker_factory(**settings)``: a started broker serving TLS on both listeners (free ports) with the
    ``pki`` certificate; ``settings`` are further BrokerConfig settings, written to a TOML ``--config`` file."""
    made: list[BrokerProcess] = []
    request.node.stash[_BROKERS] = made

    def make(**settings: object) -> BrokerProcess:
        index = len(made)
        config = tmp_path / f"broker{index}.toml"
        config.write_text("".join(f"{name} = {_toml(value)}\n" for name, value in settings.items()))
        process = BrokerProcess(
            tmp_path / f"data{index}",
            extra_args=(
                "--broker-service-port-tls", "0", "--web-service-port-tls", "0",
                "--tls-certificate-file-path", str(pki.cert), "--tls-key-file-path", str(pki.key),
                "--config", str(config),
            ),
        )  # fmt: skip
        made.append(process)
        return process.start()

    yield make
    for process in made:
        process.stop()


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        report.sections += stderr_sections(item.stash.get(_BROKERS, []), "broker")
    return report
