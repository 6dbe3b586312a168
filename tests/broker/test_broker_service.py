"""BrokerService over the metadata port: admin metadata loaded at start and written through, look-ups from
memory, one shared load per topic."""

from __future__ import annotations

import asyncio

import pytest

from quasar.broker.broker_service import BrokerService, TopicExistsError
from quasar.broker.errors import NamespaceNotFoundError, NotAllowedError
from quasar.broker.policies import MESSAGE_TTL
from quasar.broker.resources import namespace_path, partitioned_topic_path, tenant_path, topic_policies_path
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata import BadVersionError, decode_json
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.protocol import TopicName
from quasar.testing.fake_store import FakeMessageStore

CONFIG = ManagedLedgerConfig(cursor_persist_interval_ms=10_000)


class Broker:
    """A BrokerService on a fake message store and the memory metadata backend; ``restart()`` = a new
    process over the same data."""

    def __init__(self, data: MemoryData | None = None, store: FakeMessageStore | None = None) -> None:
        self.data = data or MemoryData()
        self.store = store or FakeMessageStore()
        self.metadata = MemoryMetadataStore(self.data)
        self.factory = ManagedLedgerFactory(self.store, self.metadata, CONFIG)
        self.service = BrokerService(self.factory, self.metadata)

    async def start(self) -> Broker:
        await self.factory.start()
        await self.service.bootstrap()
        return self

    async def stop(self) -> None:
        await self.service.close()
        await self.factory.close()
        await self.metadata.close()

    async def restart(self) -> Broker:
        await self.stop()
        return await Broker(self.data, self.store).start()


@pytest.fixture
async def broker():
    made = await Broker().start()
    yield made
    await made.stop()


async def test_bootstrap_creates_defaults_and_counts_boots(broker: Broker):
    service = broker.service
    assert service.tenants() == ["public", "pulsar"]
    assert service.namespaces("public") == ["public/default"]
    assert service.generate_producer_name() == "standalone-1-1"
    got = await broker.metadata.get(tenant_path("public"))
    assert got is not None and decode_json("/", got.value) == {
        "adminRoles": [],
        "allowedClusters": ["standalone"],
    }
    broker = await broker.restart()
    assert broker.service.generate_producer_name() == "standalone-2-1"
    assert broker.service.tenants() == ["public", "pulsar"]
    await broker.stop()


async def test_admin_metadata_is_written_through_and_reloaded(broker: Broker):
    service = broker.service
    await service.create_tenant("acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    await service.create_namespace("acme/orders", {"a": 1})
    await service.set_namespace_policy("acme/orders", MESSAGE_TTL, 30)
    partitioned = TopicName.parse("persistent://acme/orders/p")
    await service.create_partitioned_topic(partitioned, 3)
    plain = TopicName.parse("persistent://acme/orders/with%odd:chars")
    await service.set_topic_policy(plain, MESSAGE_TTL, 5)
    # every change is one durable path
    for path in (tenant_path("acme"), namespace_path("acme/orders"), partitioned_topic_path(partitioned),
                 topic_policies_path(plain)):  # fmt: skip
        assert await broker.metadata.exists(path), path

    restarted = await broker.restart()
    service = restarted.service
    assert service.tenant_exists("acme") and service.namespaces("acme") == ["acme/orders"]
    assert service.namespace_policy("acme/orders", MESSAGE_TTL) == 30
    assert service.namespace_policy("acme/orders", "a") == 1
    assert service.partitions(partitioned) == 3
    assert service.partitions(partitioned.partition(1)) == 0  # a partition is never partitioned itself
    assert service.partitioned_topics("acme/orders") == ["persistent://acme/orders/p"]
    assert service.list_topics("acme/orders") == [
        f"persistent://acme/orders/p-partition-{i}" for i in range(3)
    ]
    assert service.topic_policy(plain, MESSAGE_TTL) == 5
    assert service.effective_policy(plain, MESSAGE_TTL, 0) == 5

    await service.set_topic_policy(plain, MESSAGE_TTL, None)  # the last topic policy: the path goes
    assert not await restarted.metadata.exists(topic_policies_path(plain))
    assert service.effective_policy(plain, MESSAGE_TTL, 0) == 30
    await restarted.stop()


async def test_admin_errors(broker: Broker):
    service = broker.service
    with pytest.raises(TopicExistsError):
        await service.create_tenant("public", {})
    with pytest.raises(NamespaceNotFoundError):
        await service.create_namespace("nobody/ns", {})
    with pytest.raises(TopicExistsError):
        await service.create_namespace("public/default", {})
    with pytest.raises(NamespaceNotFoundError):
        await service.set_namespace_policy("public/none", MESSAGE_TTL, 1)
    topic = TopicName.parse("persistent://public/default/pt")
    await service.create_partitioned_topic(topic, 2)
    with pytest.raises(TopicExistsError):
        await service.create_partitioned_topic(topic, 2)
    with pytest.raises(NotAllowedError):
        await service.get_or_create_topic(topic)  # clients use the partitions
    with pytest.raises(NamespaceNotFoundError):
        await service.get_or_create_topic(TopicName.parse("persistent://public/none/t"))


async def test_a_write_based_on_stale_metadata_is_refused(broker: Broker):
    other = await Broker(broker.data, broker.store).start()  # a second broker over the same metadata
    await broker.service.set_namespace_policy("public/default", MESSAGE_TTL, 10)
    with pytest.raises(BadVersionError):  # compare-and-set: its copy is older than the stored one
        await other.service.set_namespace_policy("public/default", MESSAGE_TTL, 20)
    assert other.service.namespace_policy("public/default", MESSAGE_TTL) is None  # memory unchanged
    await other.stop()


async def test_concurrent_loads_of_one_topic_share_one_load(broker: Broker):
    service = broker.service
    name = TopicName.parse("persistent://public/default/shared")
    loads = [asyncio.create_task(service.get_or_create_topic(name)) for _ in range(5)]
    topics = await asyncio.gather(*loads)
    assert all(topic is topics[0] for topic in topics)
    assert service.topics[name.full_name] is topics[0]
    assert await service.get_or_create_topic(name) is topics[0]
    assert name.full_name in broker.factory.names()


async def test_a_cancelled_waiter_does_not_abort_the_load(broker: Broker):
    service = broker.service
    name = TopicName.parse("persistent://public/default/cancelled")
    first = asyncio.create_task(service.get_or_create_topic(name))
    second = asyncio.create_task(service.get_or_create_topic(name))
    await asyncio.sleep(0)
    first.cancel()
    topic = await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert service.topics[name.full_name] is topic and not topic.ledger.is_closed


async def test_close_cancels_pending_loads(broker: Broker):
    service = broker.service
    waiter = asyncio.create_task(
        service.get_or_create_topic(TopicName.parse("persistent://public/default/x"))
    )
    await asyncio.sleep(0)
    await service.close()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_namespace_topic_count_counts_partitions_once_and_other_namespaces_not(broker: Broker):
    service = broker.service
    await service.create_namespace("public/quota", {})
    await service.create_partitioned_topic(TopicName.parse("persistent://public/quota/p"), 3)
    for local in ("a", "b", "p-partition-0", "p-partition-1", "p-partition-7", "q-partition-0"):
        await service.get_or_create_topic(TopicName.parse(f"persistent://public/quota/{local}"))
    await service.get_or_create_topic(TopicName.parse("persistent://public/default/elsewhere"))
    await service.get_or_create_topic(TopicName.parse("non-persistent://public/quota/np"))
    # p counts 3; a, b, p-partition-7 (past p's count) and q-partition-0 (no partitioned q) one each; np one
    assert service.count_topics("public/quota") == 3 + 4 + 1
    await service.delete_topic(TopicName.parse("persistent://public/quota/a"))
    await service.delete_topic(TopicName.parse("non-persistent://public/quota/np"))
    assert service.count_topics("public/quota") == 3 + 3


async def test_messages_in_total_keeps_what_disconnected_producers_published(broker: Broker):
    """The load report's count (a rate meter differences it) only grows while a topic stays loaded: it comes
    from the topic's counters, not from the producers connected now (a producer leaving made it drop)."""
    service = broker.service
    first = await service.get_or_create_topic(TopicName.parse("persistent://public/default/in-a"))
    second = await service.get_or_create_topic(TopicName.parse("persistent://public/default/in-b"))
    first.counters.msg_in += 7  # what producers published, all of them gone now
    second.counters.msg_in += 5
    assert not first.producers and not second.producers
    assert service.messages_in_total() == 12
