"""BrokerRegistrar against in-process name servers on free ports: registration with all at start (a down one
never fails start), cheap periodic rounds (QUERY_DATA_VERSION only), topic changes coalesced into one full
registration, a restarted name server filled again, a slave told its master, stop unregistering."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from quasar.nameserver import BrokerRegistrar, NameServer
from quasar.protocol.remoting import RemotingCommand, RequestCode

from ._helpers import identity, topic_config

T = "persistent://public/default/t"
U = "persistent://public/default/u"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


class Recorder:
    """Records the request codes a name server handles."""

    def __init__(self, server: NameServer) -> None:
        self.codes: list[int] = []
        handle = server.handle

        def recording(command: RemotingCommand, connection: Any) -> RemotingCommand | None:
            self.codes.append(command.code)
            return handle(command, connection)

        server.handle = recording  # type: ignore[method-assign]


@pytest.fixture
async def servers() -> AsyncIterator[list[NameServer]]:
    made = [NameServer(port=0, http_port=None), NameServer(port=0, http_port=None)]
    for server in made:
        await server.start()
    yield made
    for server in made:
        await server.stop()


async def test_start_registers_with_every_name_server_and_stop_unregisters(servers: list[NameServer]) -> None:
    topics = {T: topic_config(2, (0, 1))}
    registrar = BrokerRegistrar([s.address for s in servers], identity(), lambda: topics, period_s=30)
    await registrar.start()
    try:
        assert registrar.last_results == {s.address: True for s in servers}
        for server in servers:
            assert server.routes.pickup_topic_route_data(T) is not None
    finally:
        await registrar.stop()
    for server in servers:
        assert server.routes.broker_live_table == {} and server.routes.all_routes() == {}
    await registrar.stop()  # twice is fine


async def test_a_down_name_server_never_fails_start(servers: list[NameServer]) -> None:
    down = f"127.0.0.1:{free_port()}"
    registrar = BrokerRegistrar(
        [down, servers[0].address], identity(), lambda: {T: topic_config()}, period_s=30, timeout_s=1
    )
    async with asyncio.timeout(5):
        await registrar.start()
    try:
        assert registrar.last_results == {down: False, servers[0].address: True}
        assert servers[0].routes.pickup_topic_route_data(T) is not None
    finally:
        async with asyncio.timeout(5):
            await registrar.stop()


async def test_periodic_rounds_only_query_the_data_version(servers: list[NameServer]) -> None:
    recorder = Recorder(servers[0])
    calls = 0

    def configs() -> dict[str, dict[str, Any]]:
        nonlocal calls
        calls += 1
        return {T: topic_config()}

    registrar = BrokerRegistrar([servers[0].address], identity(), configs, period_s=0.05)
    await registrar.start()
    try:
        await wait_for(lambda: registrar.rounds >= 5)
    finally:
        await registrar.stop()
    assert recorder.codes[0] == RequestCode.REGISTER_BROKER
    periodic = recorder.codes[1:-1]
    assert periodic and set(periodic) == {RequestCode.QUERY_DATA_VERSION}
    assert recorder.codes[-1] == RequestCode.UNREGISTER_BROKER
    assert calls == 1  # the topic table was built once


async def test_topic_changes_are_coalesced_into_one_full_registration(servers: list[NameServer]) -> None:
    recorder = Recorder(servers[1])
    topics: dict[str, dict[str, Any]] = {T: topic_config()}
    registrar = BrokerRegistrar(
        [s.address for s in servers], identity(), lambda: topics, period_s=30, coalesce_s=0.1
    )
    await registrar.start()
    try:
        before = registrar.data_version
        for name in (U, U + "2", U + "3"):
            topics[name] = topic_config()
            registrar.topics_changed()
        assert registrar.data_version.counter == before.counter + 3
        for server in servers:
            await wait_for(lambda server=server: len(server.routes.topic_queue_table) == 4)
        await asyncio.sleep(0.2)
        assert recorder.codes.count(RequestCode.REGISTER_BROKER) == 2  # start + one coalesced round
    finally:
        await registrar.stop()


async def test_a_restarted_name_server_is_filled_again(servers: list[NameServer]) -> None:
    first, second = servers
    port, first_address = first.port, first.address
    registrar = BrokerRegistrar(
        [first_address, second.address], identity(), lambda: {T: topic_config()}, period_s=0.1, timeout_s=1
    )
    await registrar.start()
    try:
        await first.stop()
        await wait_for(lambda: registrar.last_results.get(first_address) is False)
        rounds = registrar.rounds
        await wait_for(lambda: registrar.rounds >= rounds + 2)
        assert registrar.last_results[second.address] is True  # goes on with the other
        assert second.routes.pickup_topic_route_data(T) is not None
        restarted = NameServer(port=port, http_port=None)
        await restarted.start()
        servers[0] = restarted
        await wait_for(lambda: restarted.routes.pickup_topic_route_data(T) is not None)
        await wait_for(lambda: registrar.last_results.get(first_address) is True)
    finally:
        await registrar.stop()


async def test_a_slave_learns_its_master(servers: list[NameServer]) -> None:
    seen: list[tuple[str, str]] = []
    master = BrokerRegistrar(
        [servers[0].address], identity("g", 0, 10911), lambda: {T: topic_config()}, period_s=30
    )
    slave = BrokerRegistrar(
        [servers[0].address],
        identity("g", 1, 10921),
        dict,
        period_s=0.05,
        on_master=lambda *a: seen.append(a),
    )
    await slave.start()
    try:
        assert seen == [] and slave.master == ("", "")
        await master.start()
        await wait_for(lambda: bool(seen))
        assert seen == [("127.0.0.1:10911", "127.0.0.1:10912")]
        rounds = slave.rounds
        await wait_for(lambda: slave.rounds >= rounds + 3)
        assert len(seen) == 1  # called on changes only
    finally:
        await master.stop()
        await slave.stop()


async def test_a_failing_topic_table_is_logged_and_retried(
    servers: list[NameServer], caplog: pytest.LogCaptureFixture
) -> None:
    state = {"fail": True}

    def configs() -> dict[str, dict[str, Any]]:
        if state["fail"]:
            raise RuntimeError("placement not loaded")
        return {T: topic_config()}

    registrar = BrokerRegistrar([servers[0].address], identity(), configs, period_s=0.05)
    await registrar.start()
    try:
        assert registrar.last_results == {servers[0].address: False}
        assert "placement not loaded" in caplog.text
        state["fail"] = False
        await wait_for(lambda: servers[0].routes.pickup_topic_route_data(T) is not None)
    finally:
        await registrar.stop()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="at least one"):
        BrokerRegistrar([], identity(), dict)
    with pytest.raises(TypeError):
        BrokerRegistrar("127.0.0.1:9876", identity(), dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host:port"):
        BrokerRegistrar(["nohost"], identity(), dict)
    with pytest.raises(ValueError, match="period_s"):
        BrokerRegistrar(["127.0.0.1:9876"], identity(), dict, period_s=0)
    with pytest.raises(ValueError, match="broker_addr"):
        identity().__class__("c", "b", 0, "nohost", "pulsar://x:1", "http://x:2")
