"""Cluster membership, placement, lookup and ownership over one shared in-memory metadata service (each
broker its own store session, as brokers sharing etcd). Real processes: tests/cluster/."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from quasar.broker.cluster.member import ClusterMember
from quasar.broker.cluster.model import (
    BrokerInfo,
    LookupKind,
    UnknownListenerError,
    parse_advertised_listeners,
)
from quasar.broker.cluster.placement import choose_groups
from quasar.broker.errors import ServiceNotReadyError
from quasar.broker.resources import BrokerResources
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.protocol import TopicName


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def info(group: str, broker_id: int = 0, **listeners: str) -> BrokerInfo:
    port = {"a": 6650, "b": 6651, "c": 6652}[group[-1]]
    return BrokerInfo(
        cluster="c1",
        group=group,
        broker_id=broker_id,
        service_url=f"pulsar://{group}:{port}",
        web_service_url=f"http://{group}:{port + 1000}",
        listeners={name: {"pulsar": url} for name, url in listeners.items()},
    )


class Cluster:
    """Brokers as ClusterMembers over one MemoryData."""

    def __init__(self) -> None:
        self.data = MemoryData()
        self.members: dict[str, ClusterMember] = {}
        self.stores: dict[str, MemoryMetadataStore] = {}
        self.local: dict[str, set[str]] = {}

    async def add(self, me: BrokerInfo) -> ClusterMember:
        store = MemoryMetadataStore(self.data)
        resources = BrokerResources(store)
        await resources.load()
        local = self.local.setdefault(me.group, set())
        member = ClusterMember(
            store,
            me,
            resources=resources,
            has_local_data=local.__contains__,
            partition_count=resources.partitions,
            messages_in_total=lambda: 0,
            report_interval_s=60,
        )
        await member.start()
        self.members[me.group] = member
        self.stores[me.group] = store
        return member

    async def remove(self, group: str) -> None:
        await self.members.pop(group).stop()
        await self.stores.pop(group).close()

    async def close(self) -> None:
        for group in list(self.members):
            await self.remove(group)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    made = Cluster()
    yield made
    await made.close()


def test_choose_groups_spreads_by_partition_count_then_rate():
    assert sorted(choose_groups(12, ["a", "b", "c"], {}, {})) == ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    assert choose_groups(3, ["a", "b"], {"a": 2}, {}) == ["b", "b", "a"]
    assert choose_groups(1, ["a", "b"], {}, {"a": 50.0, "b": 1.0}) == ["b"]
    with pytest.raises(ValueError):
        choose_groups(1, [], {}, {})


def test_advertised_listeners_parse_and_refuse_bad_entries():
    parsed = parse_advertised_listeners("internal:pulsar://10.0.0.1:6650, external:pulsar://1.2.3.4:16650")
    assert parsed == {"internal": {"pulsar": "pulsar://10.0.0.1:6650"},
                      "external": {"pulsar": "pulsar://1.2.3.4:16650"}}  # fmt: skip
    for bad in ("pulsar://h:1", "x:http://h:1", "x:pulsar://h:1,x:pulsar://h:2", "x:pulsar://"):
        with pytest.raises(ValueError):
            parse_advertised_listeners(bad)


async def test_members_see_each_other_and_a_stopped_one_leaves(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    await cluster.add(info("broker-b"))
    await settle()
    assert a.membership.live_groups() == ["broker-a", "broker-b"]
    assert a.membership.master_of("broker-b") == cluster.members["broker-b"].me
    await cluster.remove("broker-b")
    await settle()
    assert a.membership.live_groups() == ["broker-a"]
    assert a.membership.master_of("broker-b") is None


async def test_a_broker_whose_session_ends_leaves_without_unregistering(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    await cluster.add(info("broker-b"))
    await settle()
    await cluster.stores["broker-b"].close()  # the process died: its ephemeral registration goes with it
    await settle()
    assert a.membership.master_of("broker-b") is None


async def test_lookup_redirects_to_the_group_picked_by_load_which_then_claims_it(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    b = await cluster.add(info("broker-b"))
    await settle()
    await a.placement.claim(TopicName.parse("persistent://public/default/busy"), "broker-a")
    topic = TopicName.parse("persistent://public/default/new")
    first = await a.ownership.lookup(topic, authoritative=False, listener="")
    assert (first.kind, first.service_url, first.authoritative) == (
        LookupKind.REDIRECT, "pulsar://broker-b:6651", True
    )  # fmt: skip
    second = await b.ownership.lookup(topic, authoritative=True, listener="")
    assert (second.kind, second.service_url) == (LookupKind.CONNECT, "pulsar://broker-b:6651")
    await settle()
    # now placed: any broker answers Connect to the owner, and only the owner may serve it
    third = await a.ownership.lookup(topic, authoritative=False, listener="")
    assert (third.kind, third.service_url) == (LookupKind.CONNECT, "pulsar://broker-b:6651")
    with pytest.raises(ServiceNotReadyError, match="broker-b"):
        await a.ownership.ensure_owned(topic)
    await b.ownership.ensure_owned(topic)
    assert a.ownership.owner_web_url(topic) == "http://broker-b:7651"
    assert b.ownership.owner_web_url(topic) is None


async def test_concurrent_claims_agree_on_one_group(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    b = await cluster.add(info("broker-b"))
    topic = TopicName.parse("persistent://public/default/raced")
    owners = await asyncio.gather(a.placement.claim(topic, "broker-a"), b.placement.claim(topic, "broker-b"))
    assert owners[0] == owners[1]


async def test_a_local_topic_from_before_the_cluster_stays_with_its_broker(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    await cluster.add(info("broker-b"))
    await settle()
    cluster.local["broker-a"].update(
        {"persistent://public/default/old-1", "persistent://public/default/old-2"}
    )
    for name in ("old-1", "old-2"):
        answer = await a.ownership.lookup(
            TopicName.parse(f"persistent://public/default/{name}"), authoritative=False, listener=""
        )
        assert (answer.kind, answer.service_url) == (LookupKind.CONNECT, "pulsar://broker-a:6650")


async def test_partitions_are_spread_over_the_groups_and_reported_per_group(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    b = await cluster.add(info("broker-b"))
    c = await cluster.add(info("broker-c"))
    await settle()
    topic = TopicName.parse("persistent://public/default/p12")
    await a.resources.create_partitioned_topic(topic, 12)
    await a.ownership.place_partitions(topic, 12)
    await settle()
    for member in (a, b, c):
        assert member.placement.counts() == {"broker-a": 4, "broker-b": 4, "broker-c": 4}
    held = b.ownership.topic_configs()[topic.full_name]
    assert held["partitionCount"] == 12 and len(held["partitions"]) == 4
    owners = {a.placement.group_of(topic.partition(i)) for i in range(12)}
    assert owners == {"broker-a", "broker-b", "broker-c"}


async def test_a_group_without_a_live_master_is_not_ready(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    await cluster.add(info("broker-b"))
    await settle()
    topic = TopicName.parse("persistent://public/default/on-b")
    await a.placement.claim(topic, "broker-b")
    await cluster.remove("broker-b")
    await settle()
    with pytest.raises(ServiceNotReadyError, match="no live master"):
        await a.ownership.lookup(topic, authoritative=False, listener="")


async def test_lookup_answers_the_listener_asked_for(cluster: Cluster):
    a = await cluster.add(info("broker-a", external="pulsar://203.0.113.7:16650"))
    await settle()
    topic = TopicName.parse("persistent://public/default/l")
    answer = await a.ownership.lookup(topic, authoritative=False, listener="external")
    assert answer.service_url == "pulsar://203.0.113.7:16650"
    with pytest.raises(UnknownListenerError):
        await a.ownership.lookup(topic, authoritative=False, listener="nope")


async def test_admin_changes_made_by_one_broker_reach_the_others(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    b = await cluster.add(info("broker-b"))
    await a.resources.create_tenant("acme", {"adminRoles": [], "allowedClusters": ["c1"]})
    await a.resources.create_namespace("acme/ns", {})
    await a.resources.create_partitioned_topic(TopicName.parse("persistent://acme/ns/t"), 3)
    await settle(50)
    resources = b.resources
    assert "acme" in resources.tenants and "acme/ns" in resources.namespaces
    assert resources.partitions(TopicName.parse("persistent://acme/ns/t")) == 3
    await a.resources.set_namespace_policy("acme/ns", "messageTTL", 60)
    await settle(50)
    assert resources.namespaces["acme/ns"]["messageTTL"] == 60


async def test_brokers_starting_together_each_get_their_own_boot_count():
    """The boot counter (producer names) is shared in a cluster: concurrent starts retry their
    compare-and-set instead of failing."""
    data = MemoryData()
    stores = [MemoryMetadataStore(data) for _ in range(5)]
    try:
        counts = await asyncio.gather(*(BrokerResources(store).next_boot_count() for store in stores))
    finally:
        for store in stores:
            await store.close()
    assert sorted(counts) == [1, 2, 3, 4, 5]


async def test_a_placement_not_yet_notified_is_read_from_the_store_not_redirected_elsewhere(cluster: Cluster):
    a = await cluster.add(info("broker-a"))
    b = await cluster.add(info("broker-b"))
    await cluster.add(info("broker-c"))
    for name, group in (("x", "broker-a"), ("y", "broker-b")):  # broker-c is the least loaded
        await a.placement.claim(TopicName.parse(f"persistent://public/default/{name}"), group)
    await settle()
    topic = TopicName.parse("persistent://public/default/just-placed")
    await b.placement.claim(topic, "broker-b")  # a has not applied the notification yet
    assert a.placement.group_of(topic) is None
    answer = await a.ownership.lookup(topic, authoritative=False, listener="")
    assert (answer.kind, answer.service_url) == (LookupKind.CONNECT, "pulsar://broker-b:6651")
