"""RouteInfoManager with a fake clock: registration, data versions, expiry, connection close, slaves and masters,
topics disappearing with their last group; and the request parsers' checks."""

from __future__ import annotations

import pytest

from quasar.nameserver.errors import InvalidRequestError
from quasar.nameserver.messages import (
    BrokerKey,
    DataVersion,
    body_crc32,
    parse_register_broker,
    register_broker_request,
)
from quasar.nameserver.routes import RouteInfoManager, base_topic
from quasar.protocol.remoting import RemotingCommand, RequestCode, encode_json

from ._helpers import identity, registration, topic_config

T = "persistent://public/default/t"
U = "persistent://public/default/u"
V1 = DataVersion(1000, 1)
V2 = DataVersion(2000, 2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def routes(clock: Clock) -> RouteInfoManager:
    return RouteInfoManager(clock=clock)


def key(who) -> BrokerKey:
    return BrokerKey(who.cluster_name, who.broker_name, who.broker_addr, who.broker_id)


# ------------------------------------------------------------------------------------- registration --


def test_master_registration_fills_every_table(routes: RouteInfoManager) -> None:
    a = identity("broker-a")
    result = routes.register_broker(registration(a, {T: topic_config(4, (0, 2))}, V1), channel="c1")
    assert result.changed and result.master_addr == ""
    assert routes.cluster_addr_table == {"c1": {"broker-a"}}
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: a.broker_addr}
    assert set(routes.broker_live_table) == {a.broker_addr}
    route = routes.pickup_topic_route_data(T)
    assert route == {
        "topic": T,
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "perm": 6,
                "topicSysFlag": 0,
                "order": False,
                "partitionCount": 4,
                "partitions": [0, 2],
            }
        ],
        "brokerDatas": [
            {
                "cluster": "c1",
                "brokerName": "broker-a",
                "brokerAddrs": {"0": a.broker_addr},
                "brokerInfos": {
                    "0": {
                        "serviceUrl": a.service_url,
                        "webServiceUrl": a.web_service_url,
                        "serviceUrlTls": "",
                        "listeners": {"internal": {"pulsar": "pulsar://10.0.0.1:10911"}},
                        "haServerAddr": a.ha_server_addr,
                    }
                },
            }
        ],
    }


def test_partition_name_resolves_to_its_base_topic(routes: RouteInfoManager) -> None:
    routes.register_broker(registration(identity(), {T: topic_config(4, (0, 1, 2, 3))}, V1))
    route = routes.pickup_topic_route_data(T + "-partition-3")
    assert route is not None and route["topic"] == T
    assert routes.pickup_topic_route_data(U + "-partition-0") is None
    assert routes.pickup_topic_route_data(U) is None
    assert base_topic(T + "-partition-12") == T and base_topic(T) is None


def test_unchanged_data_version_does_not_rewrite_queue_data(routes: RouteInfoManager, clock: Clock) -> None:
    a = identity()
    routes.register_broker(registration(a, {T: topic_config()}, V1))
    # same version, another table: the name server keeps what it has (the broker must bump the version)
    clock.now += 5
    result = routes.register_broker(registration(a, {U: topic_config()}, V1))
    assert not result.changed
    assert set(routes.topic_queue_table) == {T}
    assert routes.broker_live_table[a.broker_addr].last_update == clock.now
    # a new version replaces the group's table: T goes, U comes
    result = routes.register_broker(registration(a, {U: topic_config()}, V2))
    assert result.changed and set(routes.topic_queue_table) == {U}


def test_query_data_version_is_a_heartbeat_when_unchanged(routes: RouteInfoManager, clock: Clock) -> None:
    a = identity()
    assert routes.query_data_version(key(a), V1, "c") == (True, None)  # unknown broker
    routes.register_broker(registration(a, {T: topic_config()}, V1), channel="c1")
    clock.now += 60
    assert routes.query_data_version(key(a), V2, "c2") == (True, V1)
    assert routes.broker_live_table[a.broker_addr].last_update == 100.0
    assert routes.query_data_version(key(a), V1, "c2") == (False, V1)
    live = routes.broker_live_table[a.broker_addr]
    assert live.last_update == clock.now and live.channel == "c2"


def test_slave_gets_the_master_address_and_ha_address(routes: RouteInfoManager) -> None:
    master, slave = identity("g", 0, 10911), identity("g", 1, 10921)
    result = routes.register_broker(registration(slave, {T: topic_config()}, V1))
    assert (result.master_addr, result.ha_server_addr) == ("", "")  # no master yet
    assert routes.pickup_topic_route_data(T) is None  # a slave's topics are not routes
    routes.register_broker(registration(master, {T: topic_config()}, V1))
    result = routes.register_broker(registration(slave, {T: topic_config()}, V1))
    assert (result.master_addr, result.ha_server_addr) == (master.broker_addr, master.ha_server_addr)
    route = routes.pickup_topic_route_data(T)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": master.broker_addr, "1": slave.broker_addr}
    assert set(route["brokerDatas"][0]["brokerInfos"]) == {"0", "1"}


def test_slave_promoted_at_the_same_address_drops_its_old_id(routes: RouteInfoManager) -> None:
    master, slave = identity("g", 0, 10911), identity("g", 1, 10921)
    routes.register_broker(registration(master, {T: topic_config()}, V1), channel="m")
    routes.register_broker(registration(slave, {}, V1), channel="s")
    routes.on_channel_destroy("m")  # the master dies: its queues stay while the group lives
    assert routes.broker_addr_table["g"].broker_addrs == {1: slave.broker_addr}
    assert routes.pickup_topic_route_data(T) is not None
    promoted = identity("g", 0, 10921)
    routes.register_broker(registration(promoted, {T: topic_config()}, V2), channel="s")
    assert routes.broker_addr_table["g"].broker_addrs == {0: slave.broker_addr}
    assert routes.pickup_topic_route_data(T)["brokerDatas"][0]["brokerAddrs"] == {"0": slave.broker_addr}


def test_new_master_address_for_the_same_id_replaces_the_old_one(routes: RouteInfoManager) -> None:
    old, new = identity("g", 0, 10911), identity("g", 0, 10931)
    routes.register_broker(registration(old, {T: topic_config()}, V1))
    routes.register_broker(registration(new, {T: topic_config()}, V1))
    assert routes.broker_addr_table["g"].broker_addrs == {0: new.broker_addr}
    assert set(routes.broker_live_table) == {new.broker_addr}


def test_two_groups_share_a_partitioned_topic(routes: RouteInfoManager) -> None:
    a, b = identity("broker-a", 0, 10911), identity("broker-b", 0, 10951)
    routes.register_broker(registration(a, {T: topic_config(4, (0, 2))}, V1), channel="a")
    routes.register_broker(registration(b, {T: topic_config(4, (1, 3))}, V1), channel="b")
    route = routes.pickup_topic_route_data(T)
    assert [(q["brokerName"], q["partitions"]) for q in route["queueDatas"]] == [
        ("broker-a", [0, 2]),
        ("broker-b", [1, 3]),
    ]
    assert [d["brokerName"] for d in route["brokerDatas"]] == ["broker-a", "broker-b"]
    routes.on_channel_destroy("a")
    assert [q["brokerName"] for q in routes.pickup_topic_route_data(T)["queueDatas"]] == ["broker-b"]
    routes.on_channel_destroy("b")
    assert routes.pickup_topic_route_data(T) is None
    assert (
        routes.topic_queue_table == {} and routes.broker_addr_table == {} and routes.cluster_addr_table == {}
    )


# ------------------------------------------------------------------------------------------ removal --


def test_expiry_after_120_s_of_silence(routes: RouteInfoManager, clock: Clock) -> None:
    a, b = identity("broker-a", 0, 10911), identity("broker-b", 0, 10951)
    routes.register_broker(registration(a, {T: topic_config()}, V1))
    routes.register_broker(registration(b, {U: topic_config()}, V1))
    clock.now += 100
    assert routes.query_data_version(key(b), V1) == (False, V1)  # b heartbeats, a stays silent
    clock.now += 20
    assert routes.scan_not_active_broker() == []  # exactly 120 s: not yet
    clock.now += 0.5
    assert routes.scan_not_active_broker() == [a.broker_addr]
    assert set(routes.topic_queue_table) == {U}
    assert set(routes.broker_addr_table) == {"broker-b"}
    clock.now += 100
    assert routes.scan_not_active_broker() == [b.broker_addr]
    assert routes.all_routes() == {} and routes.cluster_addr_table == {}


def test_heartbeat_timeout_requested_by_the_broker_is_clamped(routes: RouteInfoManager, clock: Clock) -> None:
    a, b = identity("broker-a", 0, 10911), identity("broker-b", 0, 10951)
    routes.register_broker(registration(a, {}, V1, heartbeat_timeout_ms=5_000))
    routes.register_broker(registration(b, {}, V1, heartbeat_timeout_ms=1))  # clamped to 1 s
    clock.now += 2
    assert routes.scan_not_active_broker() == [b.broker_addr]
    clock.now += 4
    assert routes.scan_not_active_broker() == [a.broker_addr]


def test_connection_close_removes_its_brokers_at_once(routes: RouteInfoManager) -> None:
    a, b = identity("broker-a", 0, 10911), identity("broker-b", 0, 10951)
    routes.register_broker(registration(a, {T: topic_config()}, V1), channel="conn-1")
    routes.register_broker(registration(b, {T: topic_config()}, V1), channel="conn-2")
    assert routes.on_channel_destroy("conn-3") == []
    assert routes.on_channel_destroy("conn-1") == [a.broker_addr]
    assert [d["brokerName"] for d in routes.pickup_topic_route_data(T)["brokerDatas"]] == ["broker-b"]


def test_unregister_needs_the_registered_address(routes: RouteInfoManager) -> None:
    a = identity()
    routes.register_broker(registration(a, {T: topic_config()}, V1))
    stale = BrokerKey("c1", "broker-a", "127.0.0.1:1", 0)
    assert not routes.unregister_broker(stale)
    assert routes.pickup_topic_route_data(T) is not None
    assert routes.unregister_broker(key(a))
    assert routes.pickup_topic_route_data(T) is None and routes.broker_live_table == {}
    assert not routes.unregister_broker(key(a))


def test_cluster_info_and_live_view(routes: RouteInfoManager, clock: Clock) -> None:
    a, s = identity("broker-a", 0, 10911), identity("broker-a", 1, 10921)
    routes.register_broker(registration(a, {T: topic_config()}, V1))
    routes.register_broker(registration(s, {}, V1))
    clock.now += 1.5
    info = routes.get_all_cluster_info()
    assert info["clusterAddrTable"] == {"c1": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": a.broker_addr, "1": s.broker_addr}
    live = routes.live_table_view()
    assert live[a.broker_addr]["lastUpdateAgoMillis"] == 1500
    assert live[s.broker_addr]["brokerId"] == 1 and live[a.broker_addr]["heartbeatTimeoutMillis"] == 120_000


# ------------------------------------------------------------------------------------------ parsing --


def _register_command(**ext_overrides: str | None) -> RemotingCommand:
    command = register_broker_request(1, identity(), {T: topic_config(2, (0, 1))}, V1)
    ext = dict(command.ext_fields)
    for k, v in ext_overrides.items():
        if v is None:
            ext.pop(k, None)
        else:
            ext[k] = v
    return RemotingCommand(code=command.code, opaque=1, ext_fields=ext, body=command.body)


def test_register_request_round_trip() -> None:
    command = register_broker_request(
        1, identity(), {T: topic_config(2, (1, 0))}, V2, heartbeat_timeout_ms=9000
    )
    assert command.code == RequestCode.REGISTER_BROKER
    assert command.ext_fields["bodyCrc32"] == str(body_crc32(command.body))
    parsed = parse_register_broker(command)
    assert parsed.key == key(identity()) and parsed.data_version == V2 and parsed.heartbeat_timeout_ms == 9000
    assert parsed.topics[T].partitions == (0, 1) and parsed.topics[T].partition_count == 2
    assert parsed.info.service_url == "pulsar://127.0.0.1:10911"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"brokerName": None}, "brokerName"),
        ({"brokerAddr": "nohost"}, "host:port"),
        ({"brokerAddr": "h:70000"}, "host:port"),
        ({"brokerId": "-1"}, "brokerId"),
        ({"brokerId": "x"}, "brokerId"),
        ({"compressed": "true"}, "compressed"),
        ({"bodyCrc32": "12"}, "bodyCrc32"),
        ({"heartbeatTimeoutMillis": "soon"}, "heartbeatTimeoutMillis"),
    ],
)
def test_bad_register_headers_are_refused(overrides: dict[str, str | None], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        parse_register_broker(_register_command(**overrides))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "topicConfigSerializeWrapper"),
        (
            {"topicConfigSerializeWrapper": {"topicConfigTable": [], "dataVersion": V1.to_json()}},
            "topicConfigTable",
        ),
        ({"topicConfigSerializeWrapper": {"topicConfigTable": {}}}, "dataVersion"),
        (
            {"topicConfigSerializeWrapper": {"topicConfigTable": {}, "dataVersion": {"timestamp": 1}}},
            "counter",
        ),
        (
            {"topicConfigSerializeWrapper": {"topicConfigTable": {T: 5}, "dataVersion": V1.to_json()}},
            "object",
        ),
        (
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": {T: {"readQueueNums": "1"}},
                    "dataVersion": V1.to_json(),
                }
            },
            "readQueueNums",
        ),
        (
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": {T: {**topic_config(2, (0,)), "partitions": [5]}},
                    "dataVersion": V1.to_json(),
                }
            },
            "partition 5",
        ),
        (
            {
                "topicConfigSerializeWrapper": {"topicConfigTable": {}, "dataVersion": V1.to_json()},
                "brokerInfo": {"serviceUrl": 5},
            },
            "serviceUrl",
        ),
    ],
)
def test_bad_register_bodies_are_refused(body: dict, message: str) -> None:
    command = RemotingCommand(
        code=RequestCode.REGISTER_BROKER,
        ext_fields={**_register_command().ext_fields, "bodyCrc32": "0"},
        body=encode_json(body),
    )
    with pytest.raises(InvalidRequestError, match=message):
        parse_register_broker(command)
