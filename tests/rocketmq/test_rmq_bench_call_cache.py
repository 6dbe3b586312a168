"""The per-call and per-topic caches of the send path (rmqbench): a call's headers are parsed once and never
seen by another call, even one served later in the same task; topic names are kept per (namespace, topic) and
a refused name is refused every time. In process, with fake gRPC contexts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quasar.broker.rocketmq.clients import ClientRegistry
from quasar.broker.rocketmq.context import RocketMQContext, RocketMQSettings, call_metadata
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from tests.rocketmq.test_rmq_core_registry import _Service


class _CountingContext:
    def __init__(self, client_id: str, namespace: str = "") -> None:
        self._metadata = [("x-mq-client-id", client_id), ("x-mq-namespace", namespace)]
        self.parsed = 0

    def invocation_metadata(self) -> list[tuple[str, str]]:
        self.parsed += 1
        return self._metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


async def test_headers_are_parsed_once_per_call_and_never_shared_between_calls() -> None:
    first, second = _CountingContext("c1", "ns1"), _CountingContext("c2")
    assert call_metadata(first).client_id == "c1"
    assert call_metadata(first).namespace == "ns1" and first.parsed == 1  # the handler reuses the admission's
    metadata = call_metadata(second)  # another call served later by the same task
    assert (metadata.client_id, metadata.namespace, second.parsed) == ("c2", "", 1)
    assert call_metadata(first).client_id == "c1"  # back to the first: its own headers again

    async def serve(context: _CountingContext) -> str:
        await asyncio.sleep(0)
        return call_metadata(context).client_id

    calls = [_CountingContext(f"task-{i}") for i in range(5)]
    assert await asyncio.gather(*(serve(c) for c in calls)) == [f"task-{i}" for i in range(5)]


def test_missing_client_id_is_refused_on_every_call() -> None:
    context = _CountingContext("")
    for _ in range(2):
        with pytest.raises(RocketMQError) as refused:
            call_metadata(context)
        assert refused.value.code == Code.CLIENT_ID_REQUIRED
    assert context.parsed == 2


def test_topic_names_are_kept_per_namespace_and_bad_names_refused_each_time() -> None:
    context = RocketMQContext(_Service(), RocketMQSettings(), ClientRegistry())  # type: ignore[arg-type]
    metadata = call_metadata(_CountingContext("c1", "header-ns"))
    plain = context.topic_name(definition.Resource(name="T"), metadata)
    named = context.topic_name(definition.Resource(name="T", resource_namespace="ns2"), metadata)
    assert plain.full_name == "persistent://public/header-ns/T"
    assert named.full_name == "persistent://public/ns2/T"
    assert context.topic_name(definition.Resource(name="T"), metadata) is plain
    for _ in range(2):
        with pytest.raises(RocketMQError) as refused:
            context.topic_name(definition.Resource(name="rmq_sys_T"), metadata)
        assert refused.value.code == Code.ILLEGAL_TOPIC


def test_the_role_is_found_once_per_call(monkeypatch: Any) -> None:
    context = RocketMQContext(_Service(), RocketMQSettings(), ClientRegistry())  # type: ignore[arg-type]
    seen: list[object] = []
    monkeypatch.setattr(context.authenticator, "role", lambda call: seen.append(call) or f"role-{len(seen)}")
    first, second = _CountingContext("c1"), _CountingContext("c2")
    assert context.role(first) == context.role(first) == "role-1"
    assert context.role(second) == "role-2"
    assert seen == [first, second]
