"""The name server's route tables (RocketMQ ``RouteInfoManager``): pure data, no I/O, an injectable clock.

Tables (RocketMQ's names)::

    topicQueueTable   topic (base full name) -> broker name (group) -> QueueData
    brokerAddrTable   broker name -> BrokerData {cluster, brokerName, brokerAddrs: broker id -> addr, infos}
    clusterAddrTable  cluster name -> broker names
    brokerLiveTable   broker addr -> BrokerLiveInfo {last update (clock s), timeout, dataVersion, channel,
                      haServerAddr, cluster, broker name, broker id}

Rules (RocketMQ 4.x/5.x ``RouteInfoManager``):

* A registration refreshes the broker's live entry. Only a master's (id 0) registration writes the group's
  queue data, and only when its data version differs from the one held (or the broker is new): an unchanged
  registration costs a dict lookup. The master's topic table replaces the group's (a topic it dropped goes).
* An address that re-registers under another id (a slave promoted to master) loses its old id; an id taken by
  a new address drops the old address's live entry.
* A broker is removed by UNREGISTER_BROKER, by :meth:`RouteInfoManager.scan_not_active_broker` once silent
  for longer than its heartbeat timeout (120 s by default; the server scans every 10 s), and at once when the
  connection it registered on closes (:meth:`RouteInfoManager.on_channel_destroy`, RocketMQ
  ``BrokerHousekeepingService``). When a group's last broker goes, the group leaves the cluster and its queue
  data goes; a topic with no queue data left disappears.

TopicRouteData (GET_ROUTEINFO_BY_TOPIC, ``GET /routes/...``)::

    {"topic": base full name,
     "queueDatas": [{"brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order",
                     "partitionCount", "partitions": [indices held by that group]}],
     "brokerDatas": [{"cluster", "brokerName", "brokerAddrs": {"0": "h:p", "1": "h:p"},
                      "brokerInfos": {"0": {"serviceUrl", "webServiceUrl", "serviceUrlTls", "listeners",
                                            "haServerAddr"}}}]}

ClusterInfo (GET_BROKER_CLUSTER_INFO, ``GET /brokers``)::

    {"brokerAddrTable": {brokerName: BrokerData as above}, "clusterAddrTable": {cluster: [brokerName, ...]}}

A query for a partition name (``...-partition-3``) that is not registered itself resolves to its base topic.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .messages import MASTER_ID, BrokerInfo, BrokerKey, BrokerRegistration, DataVersion, TopicQueueConfig

__all__ = ["BrokerData", "BrokerLiveInfo", "RegisterBrokerResult", "RouteInfoManager", "base_topic"]

log = logging.getLogger(__name__)

_PARTITION_SUFFIX = re.compile(r"^(.+)-partition-(\d+)$")


def base_topic(topic: str) -> str | None:
    """``persistent://t/ns/x-partition-3`` -> ``persistent://t/ns/x``; None when not a partition name."""
    match = _PARTITION_SUFFIX.match(topic)
    return match.group(1) if match else None


@dataclass(slots=True)
class BrokerData:
    """One broker group (RocketMQ ``BrokerData``): its cluster, name, and address and URLs per broker id."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    infos: dict[int, BrokerInfo] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(i): a for i, a in sorted(self.broker_addrs.items())},
            "brokerInfos": {str(i): info.to_json() for i, info in sorted(self.infos.items())},
        }


@dataclass(slots=True)
class BrokerLiveInfo:
    """A registered broker's liveness (RocketMQ ``BrokerLiveInfo``).

    Attributes:
        last_update: clock time (s) of the last registration or unchanged QUERY_DATA_VERSION.
        heartbeat_timeout_s: silence after which it is dropped.
        data_version: the version of the topic table it registered.
        channel: the connection it last spoke on (any hashable id; None = none).
        ha_server_addr: its replication listener, or "".
        key: cluster, group, address and id.
    """

    last_update: float
    heartbeat_timeout_s: float
    data_version: DataVersion
    channel: Hashable | None
    ha_server_addr: str
    key: BrokerKey


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What REGISTER_BROKER answers (RocketMQ ``RegisterBrokerResult``).

    Attributes:
        master_addr: for a slave, its group's master address ("" when none or for a master).
        ha_server_addr: that master's HA address ("" when none).
        changed: the registration carried another data version than the one held (or the broker was new).
    """

    master_addr: str
    ha_server_addr: str
    changed: bool


def _queue_data_json(broker_name: str, q: TopicQueueConfig) -> dict[str, Any]:
    return {
        "brokerName": broker_name,
        "readQueueNums": q.read_queue_nums,
        "writeQueueNums": q.write_queue_nums,
        "perm": q.perm,
        "topicSysFlag": q.topic_sys_flag,
        "order": q.order,
        "partitionCount": q.partition_count,
        "partitions": list(q.partitions),
    }


class RouteInfoManager:
    """The route tables (module docstring). Not thread-safe: one event loop owns it.

    Args:
        clock: seconds, monotonic; ``time.monotonic`` by default (tests pass a fake).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.topic_queue_table: dict[str, dict[str, TopicQueueConfig]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    # ------------------------------------------------------------------------------------ registration --

    def register_broker(
        self, registration: BrokerRegistration, channel: Hashable | None = None
    ) -> RegisterBrokerResult:
        """Record a REGISTER_BROKER from ``channel`` (the connection it came on, None = unknown).

        Returns:
            The master's address and HA address for a slave, and whether the data version changed.
        """
        key = registration.key
        self.cluster_addr_table.setdefault(key.cluster_name, set()).add(key.broker_name)
        group = self.broker_addr_table.get(key.broker_name)
        first = group is None
        if group is None:
            group = self.broker_addr_table[key.broker_name] = BrokerData(key.cluster_name, key.broker_name)
        elif group.cluster != key.cluster_name:
            self._leave_cluster(group.cluster, key.broker_name)
            group.cluster = key.cluster_name
        for broker_id, addr in list(group.broker_addrs.items()):
            if addr == key.broker_addr and broker_id != key.broker_id:  # e.g. a slave promoted to master
                del group.broker_addrs[broker_id]
                group.infos.pop(broker_id, None)
        old_addr = group.broker_addrs.get(key.broker_id)
        if old_addr is not None and old_addr != key.broker_addr:
            log.info(
                "broker %s/%d moved from %s to %s", key.broker_name, key.broker_id, old_addr, key.broker_addr
            )
            self.broker_live_table.pop(old_addr, None)
        first = first or old_addr is None
        group.broker_addrs[key.broker_id] = key.broker_addr
        group.infos[key.broker_id] = registration.info

        previous = self.broker_live_table.get(key.broker_addr)
        changed = previous is None or previous.data_version != registration.data_version
        if key.broker_id == MASTER_ID and (changed or first):
            self._replace_queue_data(key.broker_name, registration.topics)
        self.broker_live_table[key.broker_addr] = BrokerLiveInfo(
            last_update=self.clock(),
            heartbeat_timeout_s=registration.heartbeat_timeout_ms / 1000,
            data_version=registration.data_version,
            channel=channel,
            ha_server_addr=registration.ha_server_addr,
            key=key,
        )
        if previous is None:
            log.info(
                "new broker registered: %s/%s/%d at %s",
                key.cluster_name,
                key.broker_name,
                key.broker_id,
                key.broker_addr,
            )
        master_addr, ha_addr = self.master_of(key.broker_name) if key.broker_id != MASTER_ID else ("", "")
        return RegisterBrokerResult(master_addr, ha_addr, changed)

    def query_data_version(
        self, key: BrokerKey, version: DataVersion, channel: Hashable | None = None
    ) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION: ``(changed, held version)``. An unchanged answer refreshes the broker's live entry
        (a heartbeat) and its channel; ``changed`` is True when the broker is unknown or at another version."""
        live = self.broker_live_table.get(key.broker_addr)
        if live is None or live.key != key:
            return True, None if live is None else live.data_version
        if live.data_version != version:
            return True, live.data_version
        live.last_update = self.clock()
        live.channel = channel
        return False, live.data_version

    def master_of(self, broker_name: str) -> tuple[str, str]:
        """``(master addr, master HA addr)`` of a group; ``("", "")`` when it has no master."""
        group = self.broker_addr_table.get(broker_name)
        master = group.broker_addrs.get(MASTER_ID) if group is not None else None
        if master is None:
            return "", ""
        live = self.broker_live_table.get(master)
        return master, live.ha_server_addr if live is not None else ""

    # ----------------------------------------------------------------------------------------- removal --

    def unregister_broker(self, key: BrokerKey) -> bool:
        """UNREGISTER_BROKER: remove the broker if it is registered at that address under that id."""
        group = self.broker_addr_table.get(key.broker_name)
        if group is None or group.broker_addrs.get(key.broker_id) != key.broker_addr:
            return False
        self._remove(key.broker_addr, reason="unregistered")
        return True

    def scan_not_active_broker(self) -> list[str]:
        """Remove every broker silent for longer than its heartbeat timeout; returns their addresses
        (RocketMQ ``scanNotActiveBroker``)."""
        now = self.clock()
        expired = [
            a
            for a, live in self.broker_live_table.items()
            if now - live.last_update > live.heartbeat_timeout_s
        ]
        for addr in expired:
            self._remove(addr, reason="silent for longer than its heartbeat timeout")
        return expired

    def on_channel_destroy(self, channel: Hashable) -> list[str]:
        """The connection ``channel`` closed: remove every broker whose live entry is bound to it, at once;
        returns their addresses (RocketMQ ``BrokerHousekeepingService`` -> ``onChannelDestroy``)."""
        gone = [
            a
            for a, live in self.broker_live_table.items()
            if live.channel is not None and live.channel == channel
        ]
        for addr in gone:
            self._remove(addr, reason="its connection closed")
        return gone

    def _remove(self, addr: str, *, reason: str) -> None:
        live = self.broker_live_table.pop(addr, None)
        if live is None:
            return
        key = live.key
        log.warning("broker %s/%d at %s removed: %s", key.broker_name, key.broker_id, addr, reason)
        group = self.broker_addr_table.get(key.broker_name)
        if group is None:
            return
        for broker_id, registered in list(group.broker_addrs.items()):
            if registered == addr:
                del group.broker_addrs[broker_id]
                group.infos.pop(broker_id, None)
        if not group.broker_addrs:
            del self.broker_addr_table[key.broker_name]
            self._leave_cluster(group.cluster, key.broker_name)
            self._replace_queue_data(key.broker_name, {})

    def _leave_cluster(self, cluster: str, broker_name: str) -> None:
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]

    def _replace_queue_data(self, broker_name: str, topics: Mapping[str, TopicQueueConfig]) -> None:
        for topic in [
            t for t, groups in self.topic_queue_table.items() if broker_name in groups and t not in topics
        ]:
            groups = self.topic_queue_table[topic]
            del groups[broker_name]
            if not groups:
                del self.topic_queue_table[topic]
                log.info("topic %s removed: no queues left", topic)
        for topic, config in topics.items():
            self.topic_queue_table.setdefault(topic, {})[broker_name] = config

    # ----------------------------------------------------------------------------------------- queries --

    def resolve_topic(self, topic: str) -> str | None:
        """The registered name ``topic`` is served under: itself, or for an unregistered partition name its
        base topic; None when neither has queues."""
        if topic in self.topic_queue_table:
            return topic
        base = base_topic(topic)
        return base if base is not None and base in self.topic_queue_table else None

    def pickup_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        """The TopicRouteData of ``topic`` (module docstring), or None when no group serves it (RocketMQ
        ``pickupTopicRouteData``)."""
        resolved = self.resolve_topic(topic)
        if resolved is None:
            return None
        groups = self.topic_queue_table[resolved]
        queue_datas = [_queue_data_json(name, groups[name]) for name in sorted(groups)]
        broker_datas = [
            self.broker_addr_table[n].to_json() for n in sorted(groups) if n in self.broker_addr_table
        ]
        if not broker_datas:
            return None
        return {"topic": resolved, "queueDatas": queue_datas, "brokerDatas": broker_datas}

    def all_routes(self) -> dict[str, dict[str, Any]]:
        """TopicRouteData of every topic, by topic."""
        routes = {}
        for topic in sorted(self.topic_queue_table):
            route = self.pickup_topic_route_data(topic)
            if route is not None:
                routes[topic] = route
        return routes

    def get_all_cluster_info(self) -> dict[str, Any]:
        """ClusterInfo (module docstring; RocketMQ ``getAllClusterInfo``)."""
        return {
            "brokerAddrTable": {n: g.to_json() for n, g in sorted(self.broker_addr_table.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
        }

    def live_table_view(self) -> dict[str, dict[str, Any]]:
        """brokerLiveTable for the HTTP view: addr -> {cluster, brokerName, brokerId, haServerAddr, dataVersion,
        heartbeatTimeoutMillis, lastUpdateAgoMillis}."""
        now = self.clock()
        return {
            addr: {
                "cluster": live.key.cluster_name,
                "brokerName": live.key.broker_name,
                "brokerId": live.key.broker_id,
                "haServerAddr": live.ha_server_addr,
                "dataVersion": live.data_version.to_json(),
                "heartbeatTimeoutMillis": round(live.heartbeat_timeout_s * 1000),
                "lastUpdateAgoMillis": max(0, round((now - live.last_update) * 1000)),
            }
            for addr, live in sorted(self.broker_live_table.items())
        }
