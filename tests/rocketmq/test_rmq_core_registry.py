"""The client registry (idle expiry, the bound on clients, resources closed with their client) and the
servicer's per-call checks (client id, authentication on => UNAUTHORIZED), in process."""

from __future__ import annotations

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

    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def partitions(self, topic: Any) -> int:
        return 0


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


async def test_every_call_needs_a_client_id_and_authentication_refuses_rocketmq_clients() -> None:
    request = service.QueryRouteRequest(topic=definition.Resource(name="T"))
    servicer = _servicer()
    call = servicer._unary("QueryRoute", servicer._handler("QueryRoute"), service.QueryRouteResponse)
    assert (await call(request, _Context(None))).status.code == Code.CLIENT_ID_REQUIRED
    answer = await call(request, _Context("c1"))
    assert answer.status.code == Code.OK and [q.id for q in answer.message_queues] == [0]
    assert answer.message_queues[0].broker.endpoints.addresses[0].port == 8081

    secured = _servicer(BrokerSecurity(authentication=object(), authorization=None))  # type: ignore[arg-type]
    call = secured._unary("QueryRoute", secured._handler("QueryRoute"), service.QueryRouteResponse)
    refused = await call(request, _Context("c1"))
    assert refused.status.code == Code.UNAUTHORIZED and "authentication" in refused.status.message
    assert "c1" not in secured.context.clients  # refused before anything is kept for it


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
