"""ClusterOwnership: which broker serves a topic, the answer to a LOOKUP, and the checks that keep a broker
from serving a topic placed on another group.

Pulsar's lookup rules (reference/cluster.md §6, ``TopicLookupBase`` / ``NamespaceService``) over RocketMQ's
fixed placement:

- a topic placed on a group: ``Connect`` to that group's live master, on the listener the client named,
  whichever broker was asked (Pulsar answers Connect with the owner's URL when the owner is known);
- a topic not placed yet: this broker picks a group by load (:func:`choose_groups`); its own group -> it
  records the placement and answers Connect; another group -> ``Redirect`` to that group's master with
  ``authoritative`` set, and a broker asked authoritatively places the topic on itself (Pulsar's redirect
  to the broker the load manager picked, which then takes ownership). An authoritative lookup is never
  redirected again, which breaks redirect loops;
- the owning group without a live master: ``Connect`` to a slave of the group serving reads (RocketMQ's slave
  read, while no slave can be elected), else ServiceNotReady (retriable: the client retries until its
  operation timeout; replication elects a slave meanwhile).

A broker asked to serve (PRODUCER, SUBSCRIBE, admin) a topic placed on another group refuses with
ServiceNotReady, so the client looks the topic up again (Pulsar: "namespace bundle not served by this
instance"); a topic nobody placed yet is claimed by the broker that serves it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from quasar.broker.cluster.membership import ClusterMembership
from quasar.broker.cluster.model import BrokerInfo, LookupAnswer, LookupKind, no_master
from quasar.broker.cluster.placement import PlacementTable, choose_groups
from quasar.broker.errors import ServiceNotReadyError
from quasar.protocol import TopicName
from quasar.protocol.errors import InvalidTopicNameError

log = logging.getLogger(__name__)

__all__ = ["ClusterOwnership"]


class ClusterOwnership:
    """Lookup and ownership for one broker of a cluster (see the module docstring).

    ``has_local_data(name)`` says whether this broker's store already holds a managed ledger of that name
    (such a topic, never placed because it predates the cluster, is claimed by this broker's group);
    ``partition_count(topic)`` is the partitioned-topic metadata (0: not partitioned).
    """

    def __init__(
        self,
        membership: ClusterMembership,
        placement: PlacementTable,
        *,
        has_local_data: Callable[[str], bool],
        partition_count: Callable[[TopicName], int],
    ) -> None:
        self.membership = membership
        self.placement = placement
        self._has_local_data = has_local_data
        self._partition_count = partition_count

    @property
    def me(self) -> BrokerInfo:
        """This broker's registration as last written (with its latest load report)."""
        return self.membership.me

    # ------------------------------------------------------------------ lookup
    async def lookup(self, topic: TopicName, *, authoritative: bool, listener: str) -> LookupAnswer:
        """The LOOKUP answer for ``topic``; raises ServiceNotReadyError (no live master for its group),
        UnknownListenerError, or the port's MetadataStoreError (placing it failed)."""
        group = self.placement.group_of(topic)
        if group is None:  # not placed, or placed by another broker a moment ago: ask the store
            group = await self.placement.read(topic)
        if group is None:
            if authoritative or self._has_local_data(topic.full_name):
                group = await self.placement.claim(topic, self.me.group)
            else:
                target = self._pick_group()
                if target != self.me.group:
                    master = self.membership.master_of(target)
                    if master is not None:
                        return self._answer(master, listener, LookupKind.REDIRECT, authoritative=True)
                group = await self.placement.claim(topic, self.me.group)
        master = self.membership.master_of(group) or self.membership.slave_reader_of(group)
        if master is None:
            raise no_master(group)
        return self._answer(master, listener, LookupKind.CONNECT, authoritative=authoritative)

    def _pick_group(self) -> str:
        groups = self.membership.live_groups()
        if not groups:  # e.g. every group is between two masters (a failover): the client retries
            raise ServiceNotReadyError("no broker group has a live master to place the topic on")
        rates = {b.group: b.msg_rate_in for b in self.membership.all_brokers() if b.is_master}
        return choose_groups(1, groups, self.placement.counts(), rates)[0]

    @staticmethod
    def _answer(master: BrokerInfo, listener: str, kind: LookupKind, *, authoritative: bool) -> LookupAnswer:
        url, url_tls = master.urls_for(listener)
        return LookupAnswer(
            kind,
            url,
            url_tls,
            master.web_service_url,
            authoritative,
            web_service_url_tls=master.web_service_url_tls,
        )

    # ------------------------------------------------------------------ serving
    async def ensure_owned(self, topic: TopicName, *, claim: bool = True) -> None:
        """Return when this broker (its group's master) may serve ``topic``; a topic not placed yet is
        claimed for this group when ``claim``. Raises ServiceNotReadyError otherwise."""
        group = self.placement.group_of(topic)
        if group is None and claim and not self.me.is_master and self.me.slave_read:
            raise no_master(self.me.group)  # a slave serving reads creates nothing
        if group is None and claim:
            group = await self.placement.claim(topic, self.me.group)
        if group is not None and group != self.me.group:
            raise ServiceNotReadyError(
                f"Topic {topic.full_name} is served by broker group {group}, not by this broker"
                f" ({self.me.group}); look it up again"
            )
        if not self.me.is_master and not self.me.slave_read:
            raise ServiceNotReadyError(
                f"this broker is a slave of group {self.me.group}; topics are served by its master: look it up again"
            )

    def owner_web_url(self, topic: TopicName, *, tls: bool = False) -> str | None:
        """The admin URL of the broker serving ``topic`` when that is another broker (admin requests are
        answered with a 307 to it, as Pulsar does); None when it is this one or the topic is not placed.
        ``tls``: its ``https://`` URL when it has one (a request that came over HTTPS)."""
        group = self.placement.group_of(topic)
        if group is None or group == self.me.group:
            return None
        master = self.membership.master_of(group)
        if master is None:
            raise no_master(group)
        return master.web_service_url_tls if tls and master.web_service_url_tls else master.web_service_url

    async def place_partitions(self, topic: TopicName, partitions: int) -> None:
        """Place the ``partitions`` partitions of a new partitioned topic over the live groups, least loaded
        first (one transaction). Raises the port's MetadataStoreError."""
        groups = self.membership.live_groups() or [self.me.group]
        rates = {b.group: b.msg_rate_in for b in self.membership.all_brokers() if b.is_master}
        picks = choose_groups(partitions, groups, self.placement.counts(), rates)
        await self.placement.place_all([topic.partition(i) for i in range(partitions)], picks)

    # ------------------------------------------------------------------ name-server registration
    def topic_configs(self) -> dict[str, dict[str, Any]]:
        """This group's topics as RocketMQ's topic config table for name-server registration: base topic full
        name -> {"readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order", "partitionCount",
        "partitions"} (``partitions``: the indices held here; a non-partitioned topic has count 0 and
        ``[]``)."""
        held: dict[str, list[int]] = {}
        for name in self.placement.topics_of(self.me.group):
            try:
                topic = TopicName.parse(name)
            except InvalidTopicNameError as exc:  # placed before names were checked (e.g. ".."): unserved
                log.warning("not registering topic placed under a name now refused: %s", exc)
                continue
            if topic.partition_index >= 0:
                held.setdefault(topic.partitioned_topic_name, []).append(topic.partition_index)
            else:
                held.setdefault(name, [])
        configs = {}
        for base, indices in held.items():
            count = self._partition_count(TopicName.parse(base)) if indices else 0
            queues = max(1, len(indices))
            configs[base] = {
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicSysFlag": 0,
                "order": False,
                "partitionCount": count,
                "partitions": sorted(indices),
            }
        return configs
