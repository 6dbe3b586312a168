"""``nameserver://`` service URLs: NameServerLookupService against an in-process name server (routes, partitions,
listeners, failover between name servers, retriable errors then a clear one), and Quasar's client producing and
consuming through a real ``quasar nameserver`` process whose routes come from BrokerRegistrars pointing at real
``quasar standalone`` brokers (a partition moved to another group is found again on reconnect)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import quasar.client as qc
from quasar.client.client import AsyncClient
from quasar.client.config import ClientConfig
from quasar.client.connection_pool import ConnectionPool
from quasar.client.errors import LookupError_
from quasar.client.nameserver_lookup import NameServerLookupService, is_nameserver_url, parse_nameserver_url
from quasar.nameserver import BrokerIdentity, BrokerRegistrar, NameServer, NameServerClient
from quasar.nameserver.messages import DataVersion
from tests.interop.conftest import BrokerFactory
from tests.nameserver.conftest import NameServerFactory, nameserver_factory  # noqa: F401

T = "persistent://public/default/parts"
U = "persistent://public/default/single"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ident(
    group: str, port: int, *, broker_id: int = 0, service_url: str | None = None, **kw: Any
) -> BrokerIdentity:
    return BrokerIdentity(
        cluster_name="c1",
        broker_name=group,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{port}",
        service_url=service_url or f"pulsar://127.0.0.1:{port}",
        web_service_url=f"http://127.0.0.1:{port + 1}",
        **kw,
    )


def config(count: int = 0, partitions: list[int] | tuple[int, ...] = ()) -> dict[str, Any]:
    queues = max(1, len(partitions))
    return {
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicSysFlag": 0,
        "order": False,
        "partitionCount": count,
        "partitions": list(partitions),
    }


def test_parse_nameserver_url() -> None:
    assert parse_nameserver_url("nameserver://a:1;b:2,c:3/") == [("a", 1), ("b", 2), ("c", 3)]
    assert parse_nameserver_url("nameserver://a:1;a:1") == [("a", 1)]
    assert is_nameserver_url("nameserver://a:1") and not is_nameserver_url("pulsar://a:1")
    for bad in ("nameserver://", "nameserver://a", "nameserver://a:0", "pulsar://a:1"):
        with pytest.raises(ValueError):
            parse_nameserver_url(bad)
    with pytest.raises(TypeError):
        ClientConfig(listener_name=5)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- in-process name server --


@pytest.fixture
async def server() -> AsyncIterator[NameServer]:
    ns = NameServer(port=0, http_port=None)
    await ns.start()
    yield ns
    await ns.stop()


@pytest.fixture
async def registry(server: NameServer) -> AsyncIterator[Callable[..., Any]]:
    """``await register(identity, topics)``: a registration kept alive for the test (its own connection)."""
    clients: list[NameServerClient] = []

    async def register(who: BrokerIdentity, topics: dict[str, dict[str, Any]]) -> NameServerClient:
        client = NameServerClient(server.address)
        clients.append(client)
        await client.register_broker(who, topics, DataVersion(1, 1))
        return client

    yield register
    for client in clients:
        await client.aclose()


def lookup_service(url: str, **config: Any) -> NameServerLookupService:
    settings = {"operation_timeout_seconds": 1.0, "initial_backoff_interval_ms": 20, **config}
    return NameServerLookupService(ConnectionPool(ClientConfig(**settings)), url, request_timeout_s=0.5)


async def test_routes_answer_partitioned_metadata_and_lookups(server: NameServer, registry) -> None:
    await registry(ident("broker-a", 7001), {T: config(4, [0, 2])})
    await registry(ident("broker-b", 7101), {T: config(4, [1, 3]), U: config()})
    lookups = lookup_service(f"nameserver://{server.address}")
    try:
        assert await lookups.get_partitioned_metadata(T) == 4
        assert await lookups.get_partitioned_metadata(T + "-partition-1") == 0
        assert await lookups.get_partitioned_metadata(U) == 0
        ports = [(await lookups.lookup(f"{T}-partition-{i}"))[1] for i in range(4)]
        assert ports == [7001, 7101, 7001, 7101]
        assert await lookups.lookup(U) == ("127.0.0.1", 7101)
        with pytest.raises(LookupError_, match="partitioned"):
            await lookups.lookup(T)
    finally:
        await lookups.aclose()


async def test_listener_name_picks_the_listener_url(server: NameServer, registry) -> None:
    listeners = {"internal": {"pulsar": "pulsar://10.1.2.3:6650"}}
    await registry(ident("broker-a", 7001, listeners=listeners), {U: config()})
    lookups = lookup_service(f"nameserver://{server.address}", listener_name="internal")
    other = lookup_service(f"nameserver://{server.address}", listener_name="external")
    try:
        assert await lookups.lookup(U) == ("10.1.2.3", 6650)
        with pytest.raises(LookupError_, match="no advertised listener named 'external'"):
            await other.lookup(U)
    finally:
        await lookups.aclose()
        await other.aclose()


async def test_tls_lookups_answer_the_tls_urls(server: NameServer, registry) -> None:
    listeners = {"internal": {"pulsar": "pulsar://10.1.2.3:6650", "pulsar+ssl": "pulsar+ssl://10.1.2.3:6651"}}
    tls_url = "pulsar+ssl://127.0.0.1:7443"
    await registry(ident("broker-a", 7001, service_url_tls=tls_url, listeners=listeners), {U: config()})
    await registry(ident("broker-b", 7101), {T: config()})  # a group without a TLS listener
    assert parse_nameserver_url(f"nameserver+ssl://{server.address}") == parse_nameserver_url(
        f"nameserver://{server.address}"
    )
    assert is_nameserver_url("nameserver+ssl://a:1")
    plain = lookup_service(f"nameserver://{server.address}")
    tls = lookup_service(f"nameserver://{server.address}", use_tls=True)
    tls_listener = lookup_service(f"nameserver://{server.address}", use_tls=True, listener_name="internal")
    try:
        assert await plain.lookup(U) == ("127.0.0.1", 7001)
        assert await tls.lookup(U) == ("127.0.0.1", 7443)
        assert await tls_listener.lookup(U) == ("10.1.2.3", 6651)
        with pytest.raises(LookupError_, match="no pulsar\\+ssl:// URL"):
            await tls.lookup(T)
    finally:
        for service in (plain, tls, tls_listener):
            await service.aclose()
    # a nameserver+ssl:// service URL turns TLS on for the whole client
    client = AsyncClient(f"nameserver+ssl://{server.address}")
    assert client.config.use_tls and client.pool.ssl_context is not None
    await client.close()


async def test_a_down_name_server_is_skipped(server: NameServer, registry) -> None:
    await registry(ident("broker-a", 7001), {U: config()})
    lookups = lookup_service(f"nameserver://127.0.0.1:{free_port()};{server.address}")
    try:
        assert await lookups.lookup(U) == ("127.0.0.1", 7001)
        assert await lookups.lookup(U) == ("127.0.0.1", 7001)  # refetched (a second lookup), same answer
    finally:
        await lookups.aclose()


async def test_no_route_is_retried_until_the_operation_timeout(server: NameServer, registry) -> None:
    lookups = lookup_service(f"nameserver://{server.address}", operation_timeout_seconds=1.0)
    try:
        started = time.monotonic()
        # no route and no live master to ask about a new topic
        with pytest.raises(LookupError_, match="no broker group has a live master"):
            await lookups.get_partitioned_metadata("persistent://public/default/none")
        assert 0.9 <= time.monotonic() - started < 5
        # the route appears while a lookup is retrying: it succeeds
        task = asyncio.ensure_future(lookups.lookup(U))
        await asyncio.sleep(0.2)
        await registry(ident("broker-a", 7001), {U: config()})
        assert await task == ("127.0.0.1", 7001)
    finally:
        await lookups.aclose()


async def test_a_group_without_live_master_is_a_retriable_error(server: NameServer, registry) -> None:
    master = await registry(ident("g", 7001), {U: config()})
    await registry(ident("g", 7011, broker_id=1), {})
    lookups = lookup_service(f"nameserver://{server.address}", operation_timeout_seconds=0.5)
    try:
        await master.aclose()  # the master's connection closes: the name server drops it at once
        with pytest.raises(LookupError_, match=r"broker group g serving .* has no live master"):
            await lookups.lookup(U)
    finally:
        await lookups.aclose()


async def test_no_name_server_answering_is_a_clear_error() -> None:
    lookups = lookup_service(f"nameserver://127.0.0.1:{free_port()}", operation_timeout_seconds=0.5)
    try:
        with pytest.raises(LookupError_, match="no name server answered"):
            await lookups.get_partitioned_metadata(U)
    finally:
        await lookups.aclose()


async def test_routes_are_refreshed_by_the_owned_task(server: NameServer, registry) -> None:
    await registry(ident("broker-a", 7001), {T: config(2, [0, 1])})
    lookups = lookup_service(f"nameserver://{server.address}")
    lookups.refresh_interval_s = 0.05
    try:
        assert await lookups.get_partitioned_metadata(T) == 2
        await registry(ident("broker-a", 7001), {T: config(3, [0, 1, 2])})  # same version: not re-read
        server.routes.broker_live_table.clear()  # forget the data version so the next registration counts
        await registry(ident("broker-a", 7001), {T: config(3, [0, 1, 2])})
        async with asyncio.timeout(5):
            while await lookups.get_partitioned_metadata(T) != 3:
                await asyncio.sleep(0.02)
    finally:
        await lookups.aclose()
    assert [t for t in asyncio.all_tasks() if t.get_name() == "nameserver route refresh"] == []


# ------------------------------------------------------------------ real processes, end to end --


async def _receive_all(consumer: Any, count: int) -> list[bytes]:
    values = []
    for _ in range(count):
        message = await consumer.receive(timeout_millis=15_000)
        values.append(message.data())
        await consumer.acknowledge(message)
    return values


@pytest.mark.slow
@pytest.mark.interop
async def test_produce_and_consume_through_nameserver_url(
    broker_factory: BrokerFactory,
    nameserver_factory: NameServerFactory,  # noqa: F811 - the fixture imported above
) -> None:
    broker_a, broker_b = broker_factory(), broker_factory()
    ns = nameserver_factory()
    a_port, b_port = broker_a.bound_port, broker_b.bound_port
    held = {"a": [0, 2], "b": [1, 3]}
    registrars = {
        name: BrokerRegistrar(
            [ns.address],
            ident(f"broker-{name}", port, service_url=broker.service_url),
            lambda name=name: {T: config(4, held[name])},
            period_s=0.5,
        )
        for name, broker, port in (("a", broker_a, a_port), ("b", broker_b, b_port))
    }
    for registrar in registrars.values():
        await registrar.start()
    client = AsyncClient(f"nameserver://{ns.address}", operation_timeout_seconds=15)
    try:
        consumer = await client.subscribe(T, "s", initial_position=qc.InitialPosition.Earliest)
        producer = await client.create_producer(T)
        sent = [f"m{i}".encode() for i in range(40)]
        ids = [await producer.send(value) for value in sent]
        assert sorted({i.partition for i in ids}) == [0, 1, 2, 3]
        assert sorted(await _receive_all(consumer, 40)) == sorted(sent)
        # the partitions really live where the routes say: partition 1 is on broker b only
        async with AsyncClient(broker_b.service_url, operation_timeout_seconds=15) as direct:
            reader = await direct.create_reader(f"{T}-partition-1", qc.EARLIEST)
            assert (await reader.read_next(timeout_millis=10_000)).data() in sent
            await reader.close()
        assert await client.lookup.get_topics_of_namespace("public/default") in ([T], [T, U], [U, T])

        # group b goes away; group a takes its partitions: the client finds them again on reconnect
        held["a"] = [0, 1, 2, 3]
        registrars["a"].topics_changed()
        await registrars["b"].stop()
        broker_b.stop()
        more = [f"n{i}".encode() for i in range(20)]
        async with asyncio.timeout(60):
            for value in more:
                await producer.send(value)
        assert sorted(await _receive_all(consumer, 20)) == sorted(more)
        assert client.lookup.service_address == client.service_address
    finally:
        await client.close()
        for registrar in registrars.values():
            await registrar.stop()
