"""Limits checked before allocation (issue 16): connection admission, the handshake timeout, the pending-publish
back-pressure of ServerCnx, and the admin body checks (JSON depth, typed tenant info and policies)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from quasar.broker.admin.validation import (
    MAX_JSON_DEPTH,
    json_depth,
    parse_json,
    validate_namespace_policies,
    validate_tenant_info,
)
from quasar.broker.config import BrokerConfig
from quasar.broker.connection_limits import ConnectionController, RateLimitedLog
from quasar.broker.server_cnx import ServerCnx
from quasar.protocol import CommandType, requests
from tests.broker.test_server_cnx import FakeService, FakeTransport


class PeerTransport(FakeTransport):
    def __init__(self, ip: str = "10.0.0.1") -> None:
        super().__init__()
        self.ip = ip
        self.paused = False
        self.pauses = 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.ip, 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False


def test_connection_controller_counts_total_and_per_ip():
    controller = ConnectionController(max_connections=3, max_connections_per_ip=2)
    assert controller.try_open("a") is None and controller.try_open("a") is None
    refusal = controller.try_open("a")
    assert refusal is not None and "broker_max_connections_per_ip" in refusal
    assert controller.try_open("b") is None
    refusal = controller.try_open("c")
    assert refusal is not None and "broker_max_connections " in refusal.replace(")", " ")
    controller.closed("a")
    assert controller.connections_of("a") == 1 and controller.total == 2
    assert controller.try_open("c") is None
    controller.closed("a")
    assert controller.connections_of("a") == 0


def test_connection_controller_zero_is_unlimited_and_negative_refused():
    controller = ConnectionController(0, 0)
    for _ in range(10_000):
        assert controller.try_open("a") is None
    with pytest.raises(ValueError):
        ConnectionController(-1, 0)


def test_rate_limited_log_counts_what_it_suppressed(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.limits"), interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.limits"):
        for i in range(100):
            limited.warning("refused %d", i)
        now[0] = 10.5
        limited.warning("refused %d", 100)
    assert [r.getMessage() for r in caplog.records] == [
        "refused 0",
        "refused 100 (99 more like it in the last 10 s)",
    ]


async def test_connection_past_the_limit_is_closed_before_anything_is_read():
    controller = ConnectionController(max_connections=0, max_connections_per_ip=1)
    connections: set[ServerCnx] = set()
    first, second = PeerTransport(), PeerTransport()
    cnx1 = ServerCnx(FakeService(), BrokerConfig(), connections, controller)  # type: ignore[arg-type]
    cnx1.connection_made(first)  # type: ignore[arg-type]
    cnx2 = ServerCnx(FakeService(), BrokerConfig(), connections, controller)  # type: ignore[arg-type]
    cnx2.connection_made(second)  # type: ignore[arg-type]
    assert second.closed and not first.closed
    cnx2.data_received(requests.new_connect("late"))  # ignored: nothing is parsed on a refused connection
    assert second.out == b""
    cnx2.connection_lost(None)
    assert controller.connections_of("10.0.0.1") == 1  # the refused one was never counted
    cnx1.connection_lost(None)
    assert controller.connections_of("10.0.0.1") == 0
    third = PeerTransport()
    cnx3 = ServerCnx(FakeService(), BrokerConfig(), connections, controller)  # type: ignore[arg-type]
    cnx3.connection_made(third)  # type: ignore[arg-type]
    assert not third.closed
    cnx3.connection_lost(None)


async def test_no_connect_within_the_keep_alive_interval_closes_the_connection():
    cnx = ServerCnx(FakeService(), BrokerConfig(keep_alive_interval_s=0.02), set())  # type: ignore[arg-type]
    transport = PeerTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    for _ in range(100):  # bounded: 100 x 10 ms
        if transport.closed:
            break
        await asyncio.sleep(0.01)
    assert transport.closed
    cnx.connection_lost(None)


async def test_connected_connection_is_not_closed_by_the_handshake_timeout():
    cnx = ServerCnx(FakeService(), BrokerConfig(keep_alive_interval_s=0.02), set())  # type: ignore[arg-type]
    transport = PeerTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(requests.new_connect("c"))
    await asyncio.sleep(0.03)  # one interval: a PING, not a close
    assert not transport.closed
    assert CommandType.PING in [f.type for f in transport.frames()]
    cnx.connection_lost(None)


async def test_pending_publishes_pause_reading_and_resume_at_half():
    config = BrokerConfig(max_pending_publish_requests_per_connection=10)
    cnx = ServerCnx(FakeService(), config, set())  # type: ignore[arg-type]
    transport = PeerTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    for _ in range(9):
        cnx.publish_started()
    assert not transport.paused
    cnx.publish_started()
    assert transport.paused and transport.pauses == 1
    cnx.publish_started()  # a SEND already buffered in the same read: still counted, not paused twice
    assert transport.pauses == 1
    for _ in range(5):
        cnx.publish_completed()
    assert transport.paused  # 6 pending > 5
    cnx.publish_completed()
    assert not transport.paused  # 5 pending: half of the limit
    cnx.connection_lost(None)


def test_parse_json_bounds_nesting():
    assert parse_json("") is None
    assert parse_json('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    assert json_depth([[[]]]) == 3
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_depth(parse_json(ok)) == MAX_JSON_DEPTH
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json("[" * 100_000 + "]" * 100_000)  # the C decoder's RecursionError, as a 400
    with pytest.raises(ValueError, match="nested deeper"):
        parse_json('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_json("{nope")


@pytest.mark.parametrize(
    "body",
    [
        [],
        "x",
        {"retention_policies": "forever"},
        {"retention_policies": {"retentionTimeInMinutes": "10"}},
        {"message_ttl_in_seconds": -1},
        {"message_ttl_in_seconds": "60"},
        {"message_ttl_in_seconds": True},
        {"deduplicationEnabled": "yes"},
        {"backlog_quota": {"limitSize": 1.5}},
        {"backlog_quota": {"policy": "drop_everything"}},
    ],
)
def test_ill_typed_namespace_policies_are_refused(body):
    with pytest.raises(ValueError):
        validate_namespace_policies(body)


def test_valid_namespace_policies_are_normalised():
    policies = validate_namespace_policies(
        {
            "deduplicationEnabled": True,
            "retention_policies": {"retentionTimeInMinutes": 60},
            "message_ttl_in_seconds": 30,
            "backlog_quota": {"limitSize": 100},
            "unknown": {"kept": [1]},
            "message_ttl_in_seconds_unset": None,
        }
    )
    assert policies == {
        "deduplicationEnabled": True,
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 0},
        "message_ttl_in_seconds": 30,
        "backlog_quota": {"limitSize": 100, "limitTime": -1, "policy": "producer_request_hold"},
        "unknown": {"kept": [1]},
    }
    assert validate_namespace_policies(None) == {}


def test_tenant_info_is_typed():
    assert validate_tenant_info(None) == {"adminRoles": [], "allowedClusters": []}
    assert validate_tenant_info({"adminRoles": ["r"]}) == {"adminRoles": ["r"], "allowedClusters": []}
    for bad in ([], {"adminRoles": "r"}, {"allowedClusters": [1]}, {"adminRoles": [["nested"]]}):
        with pytest.raises(ValueError):
            validate_tenant_info(bad)
    json.dumps(validate_tenant_info({"adminRoles": ["a"], "allowedClusters": ["standalone"]}))


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "x" * 256])
def test_cluster_name_is_a_pulsar_named_entity(name):
    with pytest.raises(ValueError, match="cluster_name"):
        BrokerConfig(cluster_name=name)


@pytest.mark.parametrize(
    "setting",
    ["broker_max_connections", "broker_max_connections_per_ip", "max_subscriptions_per_topic",
     "max_topics_per_namespace", "max_num_partitions_per_partitioned_topic"],
)  # fmt: skip
def test_limit_settings_refuse_negative_values(setting):
    with pytest.raises(ValueError, match=setting):
        BrokerConfig(**{setting: -1})
    BrokerConfig(**{setting: 0})  # 0 = unlimited, as Pulsar


@pytest.mark.parametrize("setting", ["max_pending_publish_requests_per_connection", "http_max_request_size"])
def test_size_limits_must_be_positive(setting):
    with pytest.raises(ValueError, match=setting):
        BrokerConfig(**{setting: 0})
