"""Shared fixtures of the RocketMQ endpoint tests (issue 18: rmqcore, rmqconsume, rmqpull).

``rmq_home`` (session, autouse): the official client is first imported with HOME pointing at a temporary
directory, so its log (``~/logs/rocketmq_python``, fixed at import) lands there (HOME is restored at once),
and the client's local-IP probe is pinned to loopback (``Misc._Misc__LOCAL_IP``: it would otherwise
``connect`` a UDP socket to a public address).
``rmq_broker`` (module): one ``quasar standalone`` with the RocketMQ endpoint on a free port, shared by the
tests of a module (stopped by PID at teardown), with strict delayed delivery (never early, as RocketMQ's
timer); ``rmq_endpoint``: its ``host:port``.
``rmq_config(namespace="")``: a ``ClientConfiguration`` for it; ``stub``: a raw ``MessagingServiceStub`` on a
channel to it; ``metadata(client_id=...)``: call metadata as the py client sends it.
``admin(broker, method, path, body)``: a tiny admin REST call (partitioned topics, namespaces).
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import stderr_sections

_BROKERS = pytest.StashKey[list[BrokerProcess]]()


@pytest.fixture(scope="session", autouse=True)
def rmq_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("rmq-home")
    previous = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:  # the client fixes its log directory (~/logs/rocketmq_python) when first imported
        import rocketmq  # noqa: F401
        from rocketmq.v5.util.misc import Misc
    finally:  # the rest of the session keeps its HOME
        if previous is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = previous
    Misc._Misc__LOCAL_IP = "127.0.0.1"  # type: ignore[attr-defined]
    return home


@pytest.fixture(scope="module")
def rmq_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("rmq-broker")
    config = directory / "broker.toml"
    # RocketMQ's timer never delivers early; Pulsar's default tracker may deliver up to one tick early
    config.write_text("is_delayed_delivery_deliver_at_time_strict = true\n")
    process = BrokerProcess(directory / "data", rocketmq_port=0, extra_args=("--config", str(config)))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and "rmq_broker" in getattr(item, "funcargs", {}):
        report.sections += stderr_sections([item.funcargs["rmq_broker"]], "broker")
    return report


@pytest.fixture(scope="module")
def pulsar_client(rmq_broker: BrokerProcess) -> Iterator[Any]:
    """The official Pulsar client on the module's broker (cross-protocol checks), closed after the module."""
    pulsar = pytest.importorskip("pulsar")
    client = pulsar.Client(
        rmq_broker.service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    yield client
    client.close()


@pytest.fixture
def rmq_endpoint(rmq_broker: BrokerProcess) -> str:
    assert rmq_broker.rocketmq_address is not None
    return rmq_broker.rocketmq_address


@pytest.fixture
def rmq_config(rmq_endpoint: str) -> Callable[..., Any]:
    from rocketmq import ClientConfiguration, Credentials

    def make(namespace: str = "") -> Any:
        return ClientConfiguration(rmq_endpoint, Credentials(), namespace=namespace)

    return make


@pytest.fixture
def stub(rmq_endpoint: str) -> Iterator[Any]:
    import grpc
    from rocketmq.grpc_protocol import MessagingServiceStub

    channel = grpc.insecure_channel(rmq_endpoint)
    try:
        yield MessagingServiceStub(channel)
    finally:
        channel.close()


def metadata(client_id: str | None = None, namespace: str = "") -> list[tuple[str, str]]:
    """Call metadata as the py client sends it (a fresh client id unless given; none with ``""``)."""
    out = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"), ("x-mq-namespace", namespace)]
    cid = f"test@{os.getpid()}@{uuid.uuid4().hex[:8]}" if client_id is None else client_id
    if cid:
        out.append(("x-mq-client-id", cid))
    return out


def admin(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One admin REST call: (status, parsed JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, None
