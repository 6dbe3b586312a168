"""NameServer in-process on free ports, spoken to by NameServerClient, raw sockets and HTTP: every request,
bad input (error responses, closed connections, the server serving the others), no configuration over the
wire, connection close removing brokers at once, the expiry scan, stop cancelling what it owns."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator

import aiohttp
import pytest

from quasar.nameserver import NameServer, NameServerClient, NameServerResponseError
from quasar.nameserver.client import split_address
from quasar.nameserver.errors import NameServerConnectionError
from quasar.nameserver.messages import DataVersion
from quasar.protocol import NEED_DATA
from quasar.protocol.remoting import (
    RemotingCommand,
    RemotingDecoder,
    RequestCode,
    ResponseCode,
    encode_remoting_command,
)

from ._helpers import identity, topic_config

T = "persistent://public/default/t"
V1 = DataVersion(1, 1)


@pytest.fixture
async def server() -> AsyncIterator[NameServer]:
    ns = NameServer(port=0, http_port=0, max_frame_size=64 * 1024)
    await ns.start()
    yield ns
    await ns.stop()


@pytest.fixture
async def client(server: NameServer) -> AsyncIterator[NameServerClient]:
    c = NameServerClient(server.address, timeout_s=5)
    yield c
    await c.aclose()


async def raw_exchange(
    server: NameServer, data: bytes, *, expect: int = 1
) -> tuple[list[RemotingCommand], bool]:
    """Send ``data`` on a new connection; return the responses read and whether the server closed it."""
    host, port = split_address(server.address)
    reader, writer = await asyncio.open_connection(host, port)
    decoder = RemotingDecoder()
    responses: list[RemotingCommand] = []
    closed = False
    try:
        writer.write(data)
        async with asyncio.timeout(5):
            while len(responses) < expect:
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                decoder.receive_data(chunk)
                while (command := decoder.next_command()) is not NEED_DATA:
                    responses.append(command)
    finally:
        writer.close()
    return responses, closed


async def test_register_route_cluster_info_and_unregister(
    server: NameServer, client: NameServerClient
) -> None:
    a = identity("broker-a", 0, 10911)
    assert await client.register_broker(a, {T: topic_config(2, (0, 1))}, V1) == ("", "")
    route = await client.get_route(T)
    assert route is not None and route["queueDatas"][0]["partitions"] == [0, 1]
    assert route["brokerDatas"][0]["brokerInfos"]["0"]["serviceUrl"] == a.service_url
    assert (await client.get_route(T + "-partition-1"))["topic"] == T
    assert await client.get_route("persistent://public/default/none") is None
    info = await client.get_cluster_info()
    assert info["clusterAddrTable"] == {"c1": ["broker-a"]}
    assert await client.query_data_version(a, V1) == (False, "", "")
    assert (await client.query_data_version(a, DataVersion(2, 2)))[0] is True
    await client.unregister_broker(a)
    assert await client.get_route(T) is None


async def test_slave_registration_answers_the_master(server: NameServer, client: NameServerClient) -> None:
    master, slave = identity("g", 0, 10911), identity("g", 1, 10921)
    await client.register_broker(master, {T: topic_config()}, V1)
    async with asyncio.timeout(5):
        other = NameServerClient(server.address)
        try:
            assert await other.register_broker(slave, {}, V1) == (master.broker_addr, master.ha_server_addr)
            assert await other.query_data_version(slave, V1) == (
                False,
                master.broker_addr,
                master.ha_server_addr,
            )
        finally:
            await other.aclose()


async def test_closing_the_connection_removes_its_brokers_at_once(server: NameServer) -> None:
    first = NameServerClient(server.address)
    second = NameServerClient(server.address)
    try:
        await first.register_broker(identity("broker-a", 0, 10911), {T: topic_config()}, V1)
        await second.register_broker(identity("broker-b", 0, 10951), {T: topic_config()}, V1)
        await first.aclose()
        async with asyncio.timeout(5):
            while len(server.routes.broker_live_table) != 1:
                await asyncio.sleep(0.01)
        route = await second.get_route(T)
        assert [d["brokerName"] for d in route["brokerDatas"]] == ["broker-b"]
    finally:
        await first.aclose()
        await second.aclose()


async def test_unknown_codes_and_configuration_requests_are_not_supported(server: NameServer) -> None:
    update_namesrv_config, put_kv_config, heart_beat = 318, 100, RequestCode.HEART_BEAT
    data = b"".join(
        encode_remoting_command(RemotingCommand.request(code, i, {"configStorePath": "/tmp/x"}, b"k=v"))
        for i, code in enumerate((update_namesrv_config, put_kv_config, heart_beat))
    )
    responses, closed = await raw_exchange(server, data, expect=3)
    assert not closed
    assert [r.code for r in responses] == [ResponseCode.REQUEST_CODE_NOT_SUPPORTED] * 3
    assert [r.opaque for r in responses] == [0, 1, 2] and all(r.is_response for r in responses)


async def test_bad_bodies_get_an_error_response_and_the_connection_stays(
    server: NameServer, client: NameServerClient
) -> None:
    requests = [
        RemotingCommand.request(RequestCode.REGISTER_BROKER, 1, identity().key_fields(), b"not json"),
        RemotingCommand.request(RequestCode.REGISTER_BROKER, 2, identity().key_fields(), b'{"a": 1}'),
        RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, 3, identity().key_fields(), b"[]"),
        RemotingCommand.request(RequestCode.UNREGISTER_BROKER, 4, {"brokerName": "x"}),
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 5),
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, 6),
    ]
    data = b"".join(encode_remoting_command(r) for r in requests)
    responses, closed = await raw_exchange(server, data, expect=len(requests))
    assert not closed
    assert [r.code for r in responses] == [ResponseCode.SYSTEM_ERROR] * 5 + [ResponseCode.SUCCESS]
    assert "not valid UTF-8 JSON" in responses[0].remark
    assert "topicConfigSerializeWrapper" in responses[1].remark
    assert "topic" in responses[4].remark
    assert await client.get_cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


async def test_oneway_requests_get_no_response(server: NameServer) -> None:
    data = encode_remoting_command(
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, 1, oneway=True)
    ) + encode_remoting_command(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, 2))
    responses, _ = await raw_exchange(server, data, expect=1)
    assert [r.opaque for r in responses] == [2]


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 64 * 1024 + 1),  # oversized: refused from the length field alone
        struct.pack(">i", -5),
        struct.pack(">iI", 6, 1 << 24) + b"{}",  # ROCKETMQ binary serialization
        struct.pack(">iI", 8, 4) + b"[1,]",  # header not JSON
        struct.pack(">iI", 6, 2) + b"[]",  # header not an object
    ],
)
async def test_malformed_frames_close_that_connection_only(
    server: NameServer, client: NameServerClient, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    await client.register_broker(identity(), {T: topic_config()}, V1)
    responses, closed = await raw_exchange(server, data)
    assert closed and responses == []
    assert "closing the connection from" in caplog.text
    assert (await client.get_route(T)) is not None  # the server still serves the others
    assert server.connection_count == 1


async def test_error_responses_raise_with_code_and_remark(
    server: NameServer, client: NameServerClient
) -> None:
    response = await client.request(RemotingCommand.request(999, 0))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "999" in response.remark
    with pytest.raises(NameServerResponseError) as info:
        await client.get_route("")
    assert info.value.code == ResponseCode.SYSTEM_ERROR and "topic" in info.value.remark


async def test_http_view(server: NameServer, client: NameServerClient) -> None:
    a = identity()
    await client.register_broker(a, {T: topic_config(2, (0, 1))}, V1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server.http_url}/routes") as resp:
            assert resp.status == 200
            assert set(await resp.json()) == {T}
        async with session.get(f"{server.http_url}/routes/persistent/public/default/t-partition-1") as resp:
            assert resp.status == 200
            assert (await resp.json())["topic"] == T
        async with session.get(f"{server.http_url}/routes/persistent/public/default/nope") as resp:
            assert resp.status == 404
            assert "nope" in (await resp.json())["reason"]
        async with session.get(f"{server.http_url}/brokers") as resp:
            body = await resp.json()
            assert body["clusterAddrTable"] == {"c1": ["broker-a"]}
            assert body["brokerLiveTable"][a.broker_addr]["dataVersion"] == {"timestamp": 1, "counter": 1}
        async with session.post(f"{server.http_url}/routes") as resp:
            assert resp.status == 405  # read-only


async def test_scan_task_expires_silent_brokers() -> None:
    server = NameServer(port=0, http_port=None, scan_interval_s=0.05)
    await server.start()
    client = NameServerClient(server.address)
    try:
        await client.register_broker(identity(), {T: topic_config()}, V1, heartbeat_timeout_ms=1000)
        async with asyncio.timeout(5):
            while server.routes.broker_live_table:
                await asyncio.sleep(0.05)
        assert await client.get_route(T) is None
    finally:
        await client.aclose()
        await server.stop()


async def test_stop_closes_connections_and_cancels_the_scan(
    server: NameServer, client: NameServerClient
) -> None:
    await client.get_cluster_info()
    await server.stop()
    assert server.connection_count == 0
    with pytest.raises(NameServerConnectionError):
        await client.get_cluster_info()
    tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("nameserver")]
    assert tasks == []


async def test_client_request_times_out_and_reconnects() -> None:
    # a listener that accepts and never answers
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = NameServerClient(f"127.0.0.1:{port}", timeout_s=0.2)
    try:
        with pytest.raises(TimeoutError):
            await client.get_cluster_info()
    finally:
        await client.aclose()
        listener.close()
        await listener.wait_closed()
    # nothing listens there any more: a clear connection error
    client = NameServerClient(f"127.0.0.1:{port}", timeout_s=1)
    try:
        with pytest.raises(NameServerConnectionError, match="cannot connect"):
            await client.get_cluster_info()
    finally:
        await client.aclose()


def test_json_bodies_are_what_rocketmq_clients_parse() -> None:
    # TopicRouteData keys as RocketMQ's fastjson names them (queueDatas, brokerDatas, brokerAddrs)
    from quasar.nameserver.routes import RouteInfoManager

    from ._helpers import registration

    routes = RouteInfoManager()
    routes.register_broker(registration(identity(), {T: topic_config()}, V1))
    text = json.dumps(routes.pickup_topic_route_data(T))
    assert '"queueDatas"' in text and '"brokerDatas"' in text and '"brokerAddrs": {"0"' in text
