"""What the brokers of a cluster tell each other through the metadata store, and what a lookup answers.

Metadata paths (one store per cluster; every name is one percent-encoded segment; values are JSON)::

    /cluster/brokers/<broker group>/<broker id>           BrokerInfo, ephemeral (gone when the broker's
                                                           session ends: Pulsar /loadbalance/brokers/<id>)
    /cluster/placement/<domain>/<tenant>/<ns>/<topic>     {"group": G, "placedAtMs": t}: the broker group
                                                           whose commit log holds the topic (partition)

A broker group is RocketMQ's broker name: one master and its slaves, one commit log. Without replication the
master is broker id 0; with replication (``quasar.replication``) it is whichever broker the group elected, and
each registration carries its role and the master epoch it serves under.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quasar.broker.errors import BrokerError, ServiceNotReadyError
from quasar.protocol.enums import ServerError

__all__ = [
    "BROKERS_ROOT",
    "INTERNAL_LISTENER_NAME",
    "PLACEMENT_ROOT",
    "BrokerInfo",
    "LookupAnswer",
    "LookupKind",
    "UnknownListenerError",
    "parse_advertised_listeners",
]

BROKERS_ROOT = "/cluster/brokers"
PLACEMENT_ROOT = "/cluster/placement"

_SCHEMES = ("pulsar", "pulsar+ssl")


INTERNAL_LISTENER_NAME = "internal"
"""The listener name of a broker configured without advertised listeners (Pulsar's ``internalListenerName``
default): a client that names it reaches that broker's own URLs."""


class UnknownListenerError(BrokerError):
    """A LOOKUP named an advertised listener the owning broker does not have (Pulsar: "the broker do not have
    <name> listener"); not retriable."""

    server_error = ServerError.ServiceNotReady


def parse_advertised_listeners(text: str) -> dict[str, dict[str, str]]:
    """Pulsar's ``advertisedListeners`` (``name:pulsar://host:port,name:pulsar+ssl://host:port,other:...``) as
    listener name -> {scheme: URL}; ``""`` -> ``{}``. Raises ValueError for an entry without a name, a
    scheme other than ``pulsar``/``pulsar+ssl``, or one scheme given twice for a name (Pulsar's
    MultipleListenerValidator)."""
    listeners: dict[str, dict[str, str]] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        scheme = url.split("://", 1)[0]
        if not sep or not name or "://" not in url or scheme not in _SCHEMES or not url.split("://", 1)[1]:
            raise ValueError(
                f"advertised listener {entry!r} is not name:pulsar://host:port or name:pulsar+ssl://host:port"
            )
        urls = listeners.setdefault(name, {})
        if scheme in urls:
            raise ValueError(f"advertised listener {name!r} has two {scheme}:// URLs")
        urls[scheme] = url
    return listeners


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One live broker of the cluster, as it registers itself (and as name servers and lookups report it).

    ``group`` is the broker group (RocketMQ broker name), ``broker_id`` 0 the group's master and > 0 a slave.
    URLs: ``service_url`` ``pulsar://host:port``, ``web_service_url`` ``http://host:port`` (admin),
    ``service_url_tls`` ``pulsar+ssl://host:port`` and ``web_service_url_tls`` ``https://host:port`` (empty
    when that TLS listener is off), ``listeners`` advertised listener name -> {scheme: URL}.
    ``partitions`` and ``msg_rate_in`` (messages/s over the last report interval) are its load report.
    """

    cluster: str
    group: str
    broker_id: int
    service_url: str
    web_service_url: str
    service_url_tls: str = ""
    listeners: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    start_time_ms: int = 0
    partitions: int = 0
    msg_rate_in: float = 0.0
    role: str = ""
    """``"master"`` or ``"slave"`` (RocketMQ's roles); "" = by broker id (0 is the master), the fixed roles
    of a group without replication. With replication the role follows the group's elected leader."""
    epoch: int = 0
    """The group's master epoch this broker serves under (replication; 0 without)."""
    ha_address: str = ""
    """``host:port`` of this broker's HA listener (a master's slaves connect there); "" without replication."""
    slave_read: bool = False
    """A slave serving reads while its group has no master and none can be elected (RocketMQ's slave read):
    lookups send consumers and readers here; publishing is refused."""
    web_service_url_tls: str = ""
    """The HTTPS admin URL (``https://host:port``), "" without an HTTPS listener."""
    rocketmq_address: str = ""
    """``host:port`` of its RocketMQ gRPC endpoint (``quasar.broker.rocketmq``), "" when it has none: RocketMQ
    routes name each queue's group master there."""

    def __post_init__(self) -> None:
        if not self.role:
            object.__setattr__(self, "role", "master" if self.broker_id == 0 else "slave")
        if self.role not in ("master", "slave"):
            raise ValueError(f"broker role {self.role!r} is not master or slave")

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    @property
    def web_address(self) -> str:
        """``host:port`` of the admin listener (Pulsar's broker id in ``/admin/v2/brokers/{cluster}``)."""
        return self.web_service_url.split("://", 1)[-1]

    def urls_for(self, listener: str) -> tuple[str, str]:
        """(``pulsar://`` URL, ``pulsar+ssl://`` URL or "") a client asking with advertised listener name
        ``listener`` ("" = the default) must use; raises :class:`UnknownListenerError`."""
        if not listener:
            return self.service_url, self.service_url_tls
        urls = self.listeners.get(listener)
        if urls is None:
            raise UnknownListenerError(f"the broker {self.service_url} does not have a {listener!r} listener")
        return urls.get("pulsar", ""), urls.get("pulsar+ssl", "")

    def to_json(self) -> dict[str, Any]:
        """The JSON stored at ``/cluster/brokers/<group>/<id>``."""
        return {
            "cluster": self.cluster,
            "brokerName": self.group,
            "brokerId": self.broker_id,
            "role": self.role,
            "serviceUrl": self.service_url,
            "serviceUrlTls": self.service_url_tls,
            "webServiceUrl": self.web_service_url,
            "listeners": {name: dict(urls) for name, urls in self.listeners.items()},
            "startTimeMs": self.start_time_ms,
            "partitions": self.partitions,
            "msgRateIn": self.msg_rate_in,
            "epoch": self.epoch,
            "haAddress": self.ha_address,
            "slaveRead": self.slave_read,
            "webServiceUrlTls": self.web_service_url_tls,
            "rocketmqAddress": self.rocketmq_address,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BrokerInfo:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on a malformed value."""
        return cls(
            cluster=str(value["cluster"]),
            group=str(value["brokerName"]),
            broker_id=int(value["brokerId"]),
            service_url=str(value["serviceUrl"]),
            web_service_url=str(value["webServiceUrl"]),
            service_url_tls=str(value.get("serviceUrlTls", "")),
            listeners={
                str(k): {str(s): str(u) for s, u in v.items()} for k, v in value.get("listeners", {}).items()
            },
            start_time_ms=int(value.get("startTimeMs", 0)),
            partitions=int(value.get("partitions", 0)),
            msg_rate_in=float(value.get("msgRateIn", 0.0)),
            role=str(value.get("role", "")),
            epoch=int(value.get("epoch", 0)),
            ha_address=str(value.get("haAddress", "")),
            slave_read=bool(value.get("slaveRead", False)),
            web_service_url_tls=str(value.get("webServiceUrlTls", "")),
            rocketmq_address=str(value.get("rocketmqAddress", "")),
        )


class LookupKind(enum.Enum):
    """``CommandLookupTopicResponse.LookupType`` of a successful answer."""

    CONNECT = "connect"
    REDIRECT = "redirect"


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    """A successful LOOKUP: connect to (or, REDIRECT, look up again at) ``service_url`` / ``service_url_tls``;
    ``web_service_url`` / ``web_service_url_tls`` are the same broker's admin URLs (HTTP lookups; the TLS
    one "" without an HTTPS listener)."""

    kind: LookupKind
    service_url: str
    service_url_tls: str
    web_service_url: str
    authoritative: bool
    web_service_url_tls: str = ""


def no_master(group: str) -> ServiceNotReadyError:
    """The retriable error of a lookup for a topic whose broker group has no live master now."""
    return ServiceNotReadyError(f"broker group {group} has no live master")
