"""Fixtures of the TLS tests: a private PKI made with ``trustme`` (a CA, a broker certificate whose SANs are
127.0.0.1 and localhost, a client certificate, and a second, untrusted CA), written as PEM files, and real
``quasar standalone`` brokers with TLS listeners on free ports (stopped by PID at teardown; the tail of their
stderr is added to a failing test's report)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import stderr_sections

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
