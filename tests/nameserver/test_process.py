"""``quasar nameserver`` as a real process: readiness line, HTTP view, clean SIGTERM; bad and oversized frames
close only their connection; two name servers with one registrar, one killed and restarted."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
import urllib.request

import pytest

from quasar.nameserver import BrokerRegistrar, NameServerClient
from quasar.nameserver.client import split_address
from quasar.nameserver.errors import NameServerConnectionError
from quasar.nameserver.messages import DataVersion
from quasar.protocol.remoting import RemotingCommand, RequestCode, ResponseCode
from quasar.testing.nameserver_process import NameServerProcess, parse_ready_line

from ._helpers import identity, topic_config
from .conftest import NameServerFactory

T = "persistent://public/default/t"


def http_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def raw(address: str, data: bytes, timeout_s: float = 5.0) -> bytes:
    """Send ``data`` and read until the server closes the connection (bounded)."""
    received = b""
    with socket.create_connection(split_address(address), timeout=timeout_s) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the name server did not close the connection within {timeout_s} s")


def test_parse_ready_line() -> None:
    line = "quasar nameserver ready: 127.0.0.1:9876 http://127.0.0.1:9877\n"
    assert parse_ready_line("log\n" + line) == ("127.0.0.1:9876", "http://127.0.0.1:9877")
    assert parse_ready_line("quasar standalone ready: pulsar://x:1 http://x:2") is None


def test_process_serves_routes_and_stops_cleanly_on_sigterm(nameserver_factory: NameServerFactory) -> None:
    ns = nameserver_factory()
    assert ns.address is not None and ns.http_url is not None and ns.pid is not None

    async def register() -> dict:
        client = NameServerClient(ns.address)
        try:
            await client.register_broker(identity(), {T: topic_config(3, (0, 1, 2))}, DataVersion(1, 1))
            route = await client.get_route(T + "-partition-2")
            assert route is not None
            return route
        finally:
            await client.aclose()

    route = asyncio.run(register())
    # the registering connection closed: the broker went with it
    assert http_json(f"{ns.http_url}/routes") == {}
    assert route["queueDatas"][0]["partitionCount"] == 3
    assert http_json(f"{ns.http_url}/brokers") == {
        "brokerAddrTable": {},
        "clusterAddrTable": {},
        "brokerLiveTable": {},
    }
    assert ns.stop() == 0
    assert "stopped cleanly" in ns.stderr_text()


def test_bad_and_oversized_frames_close_only_their_connection(nameserver_factory: NameServerFactory) -> None:
    ns = nameserver_factory(extra_args=("--max-frame-size", "4096"))
    assert ns.address is not None

    async def scenario() -> None:
        keeper = NameServerClient(ns.address)
        try:
            await keeper.register_broker(identity(), {T: topic_config()}, DataVersion(1, 1))
            loop = asyncio.get_running_loop()
            for data in (
                struct.pack(">i", 4097) + b"x" * 100,  # above --max-frame-size
                struct.pack(">i", 2**31 - 1),  # 2 GiB announced: refused before allocating
                struct.pack(">iI", 8, 4) + b"{{{{",  # header not JSON
                struct.pack(">iI", 6, 1 << 24) + b"{}",  # binary serialization
            ):
                assert await loop.run_in_executor(None, raw, ns.address, data) == b""
            # a bad body is answered, the connection stays
            bad = RemotingCommand.request(RequestCode.REGISTER_BROKER, 7, identity().key_fields(), b"\xff")
            response = await keeper.request(bad)
            assert response.code == ResponseCode.SYSTEM_ERROR and "JSON" in (response.remark or "")
            assert await keeper.get_route(T) is not None  # still registered, still served
        finally:
            await keeper.aclose()

    asyncio.run(scenario())
    assert ns.running
    log = ns.stderr_text()
    assert "exceeds the maximum frame size" in log and "serialize type 1" in log


@pytest.mark.slow
def test_registrar_goes_on_with_the_other_name_server_and_refills_a_restarted_one(
    nameserver_factory: NameServerFactory,
) -> None:
    first, second = nameserver_factory(), nameserver_factory()
    addresses = [first.address, second.address]
    assert None not in addresses

    async def wait_for(predicate, timeout_s: float = 15.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not await predicate():
                await asyncio.sleep(0.05)

    async def has_route(process: NameServerProcess) -> bool:
        client = NameServerClient(process.address, timeout_s=2)
        try:
            return await client.get_route(T) is not None
        except NameServerConnectionError:
            return False
        finally:
            await client.aclose()

    async def scenario() -> None:
        registrar = BrokerRegistrar(
            addresses, identity(), lambda: {T: topic_config()}, period_s=0.3, timeout_s=1
        )
        await registrar.start()
        try:
            assert registrar.last_results == dict.fromkeys(addresses, True)
            assert await has_route(first) and await has_route(second)
            first.kill()  # kill -9: no goodbye
            await wait_for(lambda: _async(registrar.last_results.get(first.address) is False))
            rounds = registrar.rounds
            await wait_for(lambda: _async(registrar.rounds >= rounds + 3))
            assert registrar.last_results[second.address] is True
            assert await has_route(second)
            await asyncio.to_thread(first.restart)  # same ports, empty tables
            await wait_for(lambda: has_route(first))
            await wait_for(lambda: _async(registrar.last_results == dict.fromkeys(addresses, True)))
        finally:
            await registrar.stop()
        assert not await has_route(first) and not await has_route(second)  # stop unregistered

    asyncio.run(scenario())


async def _async(value: bool) -> bool:
    return value
