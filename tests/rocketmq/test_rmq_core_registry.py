"""The client registry (idle expiry, the bound on clients, resources closed with their client) and the
servicer's per-call checks (client id, authentication on => UNAUTHORIZED), in process."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pytest

from quasar.broker.auth import NO_SECURITY, BrokerSecurity
from quasar.broker.rocketmq.clients import ClientRegistry, TelemetrySession
from quasar.broker.rocketmq.context import RocketMQContext, RocketMQSettings
from quasar.broker.rocketmq.server import HANDLER_GROUPS, Servicer
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition, service


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Resource:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_idle_clients_expire_with_their_resources_unless_streaming() -> None:
    clock = _Clock()
    registry = ClientRegistry(idle_timeout_s=120, clock=clock)
    idle, streaming = registry.touch("idle"), registry.touch("streaming")
    resource = _Resource()
    idle.resources["producer:x"] = resource
    streaming.telemetry = TelemetrySession(context=None)
    clock.now += 119
    assert registry.expire() == 0
    clock.now += 2
    assert registry.expire() == 1
    assert "idle" not in registry and "streaming" in registry and resource.closed == 1
    streaming.telemetry.closed = True  # the stream ended without cleanup: the sweep takes it
    assert registry.expire() == 1 and len(registry) == 0


def test_registry_is_bounded() -> None:
    clock = _Clock()
    registry = ClientRegistry(idle_timeout_s=10, max_clients=2, clock=clock)
    registry.touch("a")
    registry.touch("b")
    with pytest.raises(RocketMQError) as info:
        registry.touch("c")
    assert info.value.code == Code.TOO_MANY_REQUESTS
    registry.touch("a")  # known clients still get in
    clock.now += 11
    registry.touch("c")  # the idle ones made room
    assert "c" in registry and len(registry) <= 2


async def test_stop_drops_every_client() -> None:
    registry = ClientRegistry()
    resource = _Resource()
    registry.touch("a").resources["r"] = resource
    registry.start()
    await registry.stop()
    assert len(registry) == 0 and resource.closed == 1


@dataclass
class _Service:
    security: BrokerSecurity = NO_SECURITY
    namespaces: set[str] = field(default_factory=lambda: {"public/default"})
    ownership: Any = None

    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def partitions(self, topic: Any) -> int:
        return 0

    def topic_policy(self, topic: Any, key: str) -> Any:
        return None  # no topic properties: every message type is accepted (rmqtx)


class _Context:
    def __init__(self, client_id: str | None) -> None:
        self._metadata = [("x-mq-client-id", client_id)] if client_id is not None else []

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


def _servicer(security: BrokerSecurity = NO_SECURITY) -> Servicer:
    context = RocketMQContext(_Service(security), RocketMQSettings(), ClientRegistry())  # type: ignore[arg-type]
    context.port = 8081
    return Servicer(context, HANDLER_GROUPS)


async def test_every_call_needs_a_client_id() -> None:
    request = service.QueryRouteRequest(topic=definition.Resource(name="T"))
    servicer = _servicer()
    call = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    assert (await call(request, _Context(None))).status.code == Code.CLIENT_ID_REQUIRED
    answer = await call(request, _Context("c1"))
    assert answer.status.code == Code.OK and [q.id for q in answer.message_queues] == [0]
    assert answer.message_queues[0].broker.endpoints.addresses[0].port == 8081


class _Policies:
    """Role ``alice`` may produce in ``public/default``; ``admin`` is a super user."""

    def tenant_admin_roles(self, tenant: str) -> list[str]:
        return []

    def auth_policies(self, namespace: str) -> dict[str, Any]:
        return {"namespace_auth": {"alice": ["produce"]}} if namespace == "public/default" else {}


def _signed(client_id: str, token: str) -> _Context:
    context = _Context(client_id)
    signature = "MQv2-HMAC-SHA1 Credential={}, SignedHeaders=x-mq-date-time, Signature=0a1b"
    context._metadata.append(("authorization", signature.format(token)))
    return context


async def test_rocketmq_clients_authenticate_with_a_token_as_access_key() -> None:
    from quasar.security.authentication import AuthenticationService
    from quasar.security.authorization import AuthorizationService
    from quasar.security.providers import TokenProvider
    from quasar.security.tokens import create_secret_key, create_token

    key = create_secret_key()
    provider = TokenProvider(secret_key="data:;base64," + base64.b64encode(key).decode())
    security = BrokerSecurity(AuthenticationService([provider]), AuthorizationService({"admin"}, _Policies()))
    servicer = _servicer(security)
    route = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    request = service.QueryRouteRequest(topic=definition.Resource(name="T"))

    refused = await route(request, _Context("c1"))  # no credentials, no anonymous role
    assert refused.status.code == Code.UNAUTHORIZED
    assert "c1" not in servicer.context.clients  # refused before anything is kept for it
    forged = await route(request, _signed("c1", create_token("alice", secret_key=create_secret_key())))
    assert forged.status.code == Code.UNAUTHORIZED
    ok = await route(request, _signed("c1", create_token("alice", secret_key=key)))
    assert ok.status.code == Code.OK and [q.id for q in ok.message_queues] == [0]
    expired = await route(request, _signed("c1", create_token("alice", secret_key=key, expiry_s=-10)))
    assert expired.status.code == Code.UNAUTHORIZED
    bob = await route(request, _signed("c2", create_token("bob", secret_key=key)))
    assert bob.status.code == Code.FORBIDDEN  # authenticated, but no permission on the namespace

    send = servicer._unary("SendMessage", servicer._handler("SendMessage"), service.SendMessageResponse)
    message = definition.Message(topic=definition.Resource(name="T"), body=b"x")
    message.system_properties.message_id = "0102FC0000000142960B18A1FE00000001"
    denied = await send(
        service.SendMessageRequest(messages=[message]), _signed("c2", create_token("bob", secret_key=key))
    )
    assert denied.status.code == Code.FORBIDDEN and "bob" in denied.status.message

    basic_only = BrokerSecurity(AuthenticationService([_BasicStub()]), None)
    servicer = _servicer(basic_only)
    route = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    answer = await route(request, _signed("c3", "bob"))
    assert answer.status.code == Code.UNAUTHORIZED and "token as access key" in answer.status.message


class _BasicStub:
    method_name = "basic"

    def authenticate(self, credentials: Any) -> Any:
        raise AssertionError("basic credentials cannot come from a RocketMQ client")


async def test_the_anonymous_role_applies_without_credentials() -> None:
    from quasar.security.authentication import AuthenticationService

    servicer = _servicer(BrokerSecurity(AuthenticationService([], anonymous_user_role="guest"), None))
    route = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    answer = await route(service.QueryRouteRequest(topic=definition.Resource(name="T")), _Context("c1"))
    assert answer.status.code == Code.OK
    assert servicer.context.role(_Context("c1")) == "guest"


async def test_a_handler_crash_is_an_internal_error_status() -> None:
    class Broken:
        def __init__(self, context: RocketMQContext) -> None:
            pass

        async def QueryRoute(self, request: Any, context: Any) -> Any:
            raise KeyError("boom")

    context = RocketMQContext(_Service(), RocketMQSettings(), ClientRegistry())  # type: ignore[arg-type]
    servicer = Servicer(context, (Broken,))
    call = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    answer = await call(service.QueryRouteRequest(), _Context("c1"))
    assert answer.status.code == Code.INTERNAL_SERVER_ERROR
    assert servicer._handler("SendMessage") is None  # a group only serves the RPCs it has


# ---------------------------------------------------------------------------------------------- cluster routes
class _Placement:
    def __init__(self, groups: dict[str, str]) -> None:
        self.groups = groups

    def group_of(self, topic: Any) -> str | None:
        return self.groups.get(topic.full_name)


class _Membership:
    def __init__(self, masters: dict[str, Any]) -> None:
        self.masters = masters

    def master_of(self, group: str) -> Any:
        return self.masters.get(group)


class _Ownership:
    """Partition i of the topic is on group-a for even i, group-b for odd i; partition 3 is placed on
    group-a at its first lookup; group-c has no RocketMQ endpoint."""

    def __init__(self, me: Any, masters: dict[str, Any], groups: dict[str, str]) -> None:
        self.me = me
        self.membership = _Membership(masters)
        self.placement = _Placement(groups)
        self.lookups: list[str] = []

    async def lookup(self, topic: Any, *, authoritative: bool, listener: str) -> None:
        self.lookups.append(topic.full_name)
        self.placement.groups[topic.full_name] = "group-a"


@dataclass
class _ClusterService(_Service):
    def partitions(self, topic: Any) -> int:
        return 0 if topic.partition_index >= 0 else 5


def _info(group: str, rocketmq: str) -> Any:
    from quasar.broker.cluster.model import BrokerInfo

    return BrokerInfo("c", group, 0, "pulsar://h:1", "http://h:2", rocketmq_address=rocketmq)


async def test_cluster_routes_name_each_queue_s_group_master() -> None:
    base = "persistent://public/default/T-partition-"
    groups = {f"{base}0": "group-a", f"{base}1": "group-b", f"{base}2": "group-a", f"{base}4": "group-c"}
    a, b, c = (
        _info("group-a", "10.0.0.1:8081"),
        _info("group-b", "broker-b.example:9081"),
        _info("group-c", ""),
    )
    ownership = _Ownership(a, {"group-a": a, "group-b": b, "group-c": c}, groups)
    context = RocketMQContext(
        _ClusterService(ownership=ownership),  # type: ignore[arg-type]
        RocketMQSettings(broker_name="group-a"),
        ClientRegistry(),
    )
    context.port = 8081
    servicer = Servicer(context, HANDLER_GROUPS)
    route = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    requested = definition.Endpoints(
        scheme=definition.AddressScheme.IPv4, addresses=[definition.Address(host="10.0.0.1", port=8081)]
    )
    answer = await route(
        service.QueryRouteRequest(topic=definition.Resource(name="T"), endpoints=requested), _Context("c1")
    )
    assert answer.status.code == Code.OK
    queues = {q.id: q.broker for q in answer.message_queues}
    assert sorted(queues) == [0, 1, 2, 3]  # queue 4's group has no RocketMQ endpoint: left out
    assert {i: queues[i].name for i in queues} == {0: "group-a", 1: "group-b", 2: "group-a", 3: "group-a"}
    assert ownership.lookups == [f"{base}3"]  # an unplaced partition is placed as a lookup would
    remote = queues[1].endpoints
    assert remote.scheme == definition.AddressScheme.DOMAIN_NAME
    assert [(x.host, x.port) for x in remote.addresses] == [("broker-b.example", 9081)]
    assert all(q.id == 0 for q in queues.values())  # every broker named is a master
    assert context.local_queues(context.topic_name(definition.Resource(name="T"), _metadata()), 5) == [
        0,
        2,
        3,
    ]
    assign = servicer._unary(
        "QueryAssignment", servicer._handler("QueryAssignment"), service.QueryAssignmentResponse
    )
    assignment = await assign(
        service.QueryAssignmentRequest(
            topic=definition.Resource(name="T"), group=definition.Resource(name="g")
        ),
        _Context("c1"),
    )
    assert sorted((x.message_queue.broker.name, x.message_queue.id) for x in assignment.assignments) == [
        ("group-a", -1),
        ("group-b", -1),
    ]


def _metadata() -> Any:
    from quasar.broker.rocketmq.context import CallMetadata

    return CallMetadata(client_id="c1")


def test_the_body_limit_follows_a_smaller_pulsar_limit() -> None:
    """RocketMQ's 4 MiB by default, capped at ``max_message_size`` (a broker configured for small messages
    still starts); an explicit limit above ``max_message_size`` is refused."""
    from quasar.broker.config import BrokerConfig

    assert BrokerConfig().rocketmq_body_limit() == 4 * 1024 * 1024
    assert BrokerConfig(max_message_size=10_000).rocketmq_body_limit() == 10_000
    assert BrokerConfig(max_message_size=10_000, rocketmq_max_message_size=5_000).rocketmq_body_limit() == 5_000
    with pytest.raises(ValueError, match="rocketmq_max_message_size"):
        BrokerConfig(max_message_size=10_000, rocketmq_max_message_size=20_000)
