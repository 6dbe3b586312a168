"""The name server's requests and responses: typed headers (as ``extFields``) and JSON bodies, built and parsed.

Both sides use this module: the registrar and :class:`~quasar.nameserver.client.NameServerClient` build
requests, the server parses them (strictly: a wrong shape raises :class:`InvalidRequestError`, which the server
answers with SYSTEM_ERROR and the reason). Field names are RocketMQ's (``RegisterBrokerRequestHeader``,
``RegisterBrokerBody``, ``TopicConfigSerializeWrapper``, ``TopicConfig``, ``DataVersion``,
``UnRegisterBrokerRequestHeader``, ``QueryDataVersionRequestHeader``, ``GetRouteInfoRequestHeader``).

REGISTER_BROKER (103)::

    extFields: clusterName, brokerName (the broker group), brokerAddr ("host:port"), brokerId ("0" = master,
               "1".. = slave), haServerAddr, heartbeatTimeoutMillis, compressed ("false"), bodyCrc32 (CRC-32
               of the body & 0x7FFFFFFF, decimal, as RocketMQ ``UtilAll.crc32``; "0" = not checked)
    body:      {"topicConfigSerializeWrapper": {
                    "topicConfigTable": {topic: {"topicName", "readQueueNums", "writeQueueNums", "perm",
                                                 "topicSysFlag", "order", "partitionCount", "partitions"}},
                    "dataVersion": {"timestamp": ms, "counter": n}},
                "filterServerList": [],
                "brokerInfo": {"serviceUrl", "webServiceUrl", "serviceUrlTls", "listeners"}}   (Quasar's)
    response:  extFields masterAddr, haServerAddr (to a slave, when its group has a master)

UNREGISTER_BROKER (104): extFields clusterName, brokerName, brokerAddr, brokerId; no body.

QUERY_DATA_VERSION (322): extFields as UNREGISTER_BROKER, body the broker's DataVersion; the response's
extFields ``changed`` ("true"/"false": the name server holds another version, or none) plus masterAddr and
haServerAddr as for REGISTER_BROKER; its body is the version the name server holds (empty when none). An
unchanged answer counts as a heartbeat (RocketMQ ``DefaultRequestProcessor.queryBrokerTopicConfig``).

GET_ROUTEINFO_BY_TOPIC (105): extFields topic; the body is the TopicRouteData (see :mod:`.routes`), or the
code TOPIC_NOT_EXIST (17). GET_BROKER_CLUSTER_INFO (106): no header; the body is the ClusterInfo.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quasar.protocol.remoting import RemotingCommand, RequestCode, decode_json_object, encode_json

from .errors import InvalidRequestError

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT_MS",
    "MASTER_ID",
    "BrokerIdentity",
    "BrokerInfo",
    "BrokerKey",
    "BrokerRegistration",
    "DataVersion",
    "TopicQueueConfig",
    "body_crc32",
    "cluster_info_request",
    "parse_broker_key",
    "parse_register_broker",
    "parse_topic",
    "query_data_version_request",
    "register_broker_request",
    "route_request",
    "unregister_broker_request",
]

#: Broker id of a group's master (RocketMQ ``MixAll.MASTER_ID``).
MASTER_ID = 0
#: Silence after which a broker is dropped when it asked for no other timeout: 120 s (RocketMQ
#: ``BROKER_CHANNEL_EXPIRED_TIME``).
DEFAULT_HEARTBEAT_TIMEOUT_MS = 120_000
_HEARTBEAT_TIMEOUT_RANGE_MS = (1_000, 600_000)
_INT32_MAX = 2**31 - 1
_MAX_PARTITIONS = 1 << 20


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic configuration (RocketMQ ``DataVersion``): bumped on every topic change.

    Attributes:
        timestamp: wall-clock time of the last change, ms since the epoch.
        counter: number of changes since the broker started.
    """

    timestamp: int
    counter: int

    def next(self, now_ms: int) -> DataVersion:
        """The version after one more change at ``now_ms``."""
        return DataVersion(now_ms, self.counter + 1)

    def to_json(self) -> dict[str, int]:
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_json(cls, value: object) -> DataVersion:
        """Parse ``{"timestamp": int, "counter": int}`` (more keys are ignored).

        Raises:
            InvalidRequestError: not an object, or a field missing or not a non-negative integer.
        """
        if not isinstance(value, dict):
            raise InvalidRequestError(f"dataVersion must be an object, got {type(value).__name__}")
        return cls(_int(value, "timestamp", "dataVersion"), _int(value, "counter", "dataVersion"))


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """The URLs a Quasar broker serves on (Quasar's addition to RocketMQ's registration).

    Attributes:
        service_url: ``pulsar://host:port``.
        web_service_url: ``http://host:port`` (admin REST).
        service_url_tls: ``pulsar+ssl://host:port`` or "".
        listeners: advertised listener name -> {"pulsar": url, "pulsar+ssl": url}.
        ha_server_addr: ``host:port`` of its replication listener, or "".
    """

    service_url: str = ""
    web_service_url: str = ""
    service_url_tls: str = ""
    listeners: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ha_server_addr: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "serviceUrl": self.service_url,
            "webServiceUrl": self.web_service_url,
            "serviceUrlTls": self.service_url_tls,
            "listeners": {name: dict(urls) for name, urls in self.listeners.items()},
            "haServerAddr": self.ha_server_addr,
        }


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """What a broker registers with the name servers.

    Attributes:
        cluster_name: the cluster (RocketMQ ``brokerClusterName``).
        broker_name: the broker group (RocketMQ ``brokerName``).
        broker_id: 0 = master, > 0 = slave.
        broker_addr: ``host:port`` of its Pulsar listener (the key of the name server's live table).
        service_url: ``pulsar://host:port``; web_service_url: ``http://host:port`` (admin).
        ha_server_addr: ``host:port`` of its replication listener, "" when none.
        service_url_tls: ``pulsar+ssl://host:port`` or "".
        listeners: advertised listener name -> {"pulsar": url, "pulsar+ssl": url}.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    service_url: str
    web_service_url: str
    ha_server_addr: str = ""
    service_url_tls: str = ""
    listeners: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("cluster_name", "broker_name", "broker_addr"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str, got {value!r}")
        if isinstance(self.broker_id, bool) or not isinstance(self.broker_id, int) or self.broker_id < 0:
            raise ValueError(f"broker_id must be an int >= 0, got {self.broker_id!r}")
        _check_addr(self.broker_addr, "broker_addr", ValueError)

    @property
    def info(self) -> BrokerInfo:
        """The URLs part of the identity."""
        return BrokerInfo(
            self.service_url, self.web_service_url, self.service_url_tls, self.listeners, self.ha_server_addr
        )

    def key_fields(self) -> dict[str, str]:
        """extFields naming this broker (UNREGISTER_BROKER, QUERY_DATA_VERSION)."""
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "brokerId": str(self.broker_id),
        }


@dataclass(frozen=True, slots=True)
class TopicQueueConfig:
    """One topic of a registration (RocketMQ ``TopicConfig`` plus Quasar's partition placement).

    Attributes:
        read_queue_nums, write_queue_nums: queues (partitions) the group serves; perm: 6 = read + write;
        topic_sys_flag: RocketMQ's system flags; order: ordered topic.
        partition_count: partitions of the partitioned topic, 0 = not partitioned.
        partitions: the partition indices this group holds (sorted, each in 0..partition_count-1).
    """

    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    partition_count: int
    partitions: tuple[int, ...]

    @classmethod
    def from_json(cls, topic: str, value: object) -> TopicQueueConfig:
        """Parse one entry of ``topicConfigTable``.

        Raises:
            InvalidRequestError: a field is missing or has the wrong type or range.
        """
        what = f"topic config of {topic!r}"
        if not isinstance(value, dict):
            raise InvalidRequestError(f"{what} must be an object, got {type(value).__name__}")
        order = value.get("order", False)
        if not isinstance(order, bool):
            raise InvalidRequestError(f"{what}: 'order' must be a boolean")
        count = _int(value, "partitionCount", what, default=0)
        if count > _MAX_PARTITIONS:
            raise InvalidRequestError(f"{what}: partitionCount {count} is above {_MAX_PARTITIONS}")
        raw = value.get("partitions", [])
        if not isinstance(raw, list):
            raise InvalidRequestError(f"{what}: 'partitions' must be a list")
        partitions: set[int] = set()
        for index in raw:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise InvalidRequestError(f"{what}: partition {index!r} is not in 0..partitionCount-1")
            partitions.add(index)
        return cls(
            read_queue_nums=_int(value, "readQueueNums", what),
            write_queue_nums=_int(value, "writeQueueNums", what),
            perm=_int(value, "perm", what, default=6),
            topic_sys_flag=_int(value, "topicSysFlag", what, default=0),
            order=order,
            partition_count=count,
            partitions=tuple(sorted(partitions)),
        )


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """The header fields that name one broker (UNREGISTER_BROKER, QUERY_DATA_VERSION)."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A parsed REGISTER_BROKER request.

    Attributes:
        key: cluster, group, address and id of the broker.
        ha_server_addr: ``host:port`` or "".
        heartbeat_timeout_ms: silence after which the broker is dropped (clamped to 1 s .. 600 s).
        data_version: the version of ``topics``.
        topics: topic (base full name) -> its config.
        info: the broker's URLs.
    """

    key: BrokerKey
    ha_server_addr: str
    heartbeat_timeout_ms: int
    data_version: DataVersion
    topics: Mapping[str, TopicQueueConfig]
    info: BrokerInfo


# ------------------------------------------------------------------------------------------- builders --


def register_broker_request(
    opaque: int,
    identity: BrokerIdentity,
    topic_configs: Mapping[str, Mapping[str, Any]],
    data_version: DataVersion,
    *,
    heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
) -> RemotingCommand:
    """REGISTER_BROKER with the whole topic config table (see the module docstring for the shape).

    Raises:
        TypeError: a topic config holds a value JSON cannot encode.
    """
    table = {topic: {"topicName": topic, **config} for topic, config in topic_configs.items()}
    body = encode_json(
        {
            "topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": data_version.to_json()},
            "filterServerList": [],
            "brokerInfo": identity.info.to_json(),
        }
    )
    ext = {
        **identity.key_fields(),
        "haServerAddr": identity.ha_server_addr,
        "heartbeatTimeoutMillis": str(heartbeat_timeout_ms),
        "compressed": "false",
        "bodyCrc32": str(body_crc32(body)),
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, opaque, ext, body)


def unregister_broker_request(opaque: int, identity: BrokerIdentity) -> RemotingCommand:
    """UNREGISTER_BROKER for ``identity``."""
    return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, opaque, identity.key_fields())


def query_data_version_request(
    opaque: int, identity: BrokerIdentity, version: DataVersion
) -> RemotingCommand:
    """QUERY_DATA_VERSION: does the name server hold ``version`` for ``identity``? (a heartbeat if so)."""
    return RemotingCommand.request(
        RequestCode.QUERY_DATA_VERSION, opaque, identity.key_fields(), encode_json(version.to_json())
    )


def route_request(opaque: int, topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC for ``topic`` (a full name; a partition name resolves to its base topic)."""
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque, {"topic": topic})


def cluster_info_request(opaque: int) -> RemotingCommand:
    """GET_BROKER_CLUSTER_INFO."""
    return RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque)


# -------------------------------------------------------------------------------------------- parsers --


def parse_broker_key(command: RemotingCommand) -> BrokerKey:
    """clusterName, brokerName, brokerAddr, brokerId of a request.

    Raises:
        InvalidRequestError: a field is missing or empty, the address is not ``host:port``, or the id is not
            an integer >= 0.
    """
    ext = command.ext_fields
    cluster, name, addr = (_ext(ext, k) for k in ("clusterName", "brokerName", "brokerAddr"))
    _check_addr(addr, "brokerAddr", InvalidRequestError)
    broker_id = _ext_int(ext, "brokerId")
    return BrokerKey(cluster, name, addr, broker_id)


def parse_register_broker(command: RemotingCommand) -> BrokerRegistration:
    """Parse and check a REGISTER_BROKER request.

    Raises:
        InvalidRequestError: a header field or the body has the wrong shape, the body is compressed (not
            supported) or its CRC-32 does not match ``bodyCrc32``.
        MalformedFrameError: the body is not a JSON object.
    """
    key = parse_broker_key(command)
    ext = command.ext_fields
    if ext.get("compressed", "false") != "false":
        raise InvalidRequestError("compressed registration bodies are not supported")
    crc = ext.get("bodyCrc32", "0")
    if crc not in ("", "0") and crc != str(body_crc32(command.body)):
        raise InvalidRequestError(f"bodyCrc32 {crc} does not match the body")
    ha_server_addr = ext.get("haServerAddr", "")
    if ha_server_addr:
        _check_addr(ha_server_addr, "haServerAddr", InvalidRequestError)
    timeout = DEFAULT_HEARTBEAT_TIMEOUT_MS
    if ext.get("heartbeatTimeoutMillis"):
        low, high = _HEARTBEAT_TIMEOUT_RANGE_MS
        timeout = min(max(_ext_int(ext, "heartbeatTimeoutMillis"), low), high)
    body = decode_json_object(command.body, "REGISTER_BROKER body")
    wrapper = body.get("topicConfigSerializeWrapper")
    if not isinstance(wrapper, dict):
        raise InvalidRequestError("REGISTER_BROKER body has no 'topicConfigSerializeWrapper' object")
    table = wrapper.get("topicConfigTable", {})
    if not isinstance(table, dict):
        raise InvalidRequestError("'topicConfigTable' must be an object")
    topics = {}
    for topic, config in table.items():
        if not topic:
            raise InvalidRequestError("a topic config has an empty topic name")
        topics[topic] = TopicQueueConfig.from_json(topic, config)
    return BrokerRegistration(
        key=key,
        ha_server_addr=ha_server_addr,
        heartbeat_timeout_ms=timeout,
        data_version=DataVersion.from_json(wrapper.get("dataVersion")),
        topics=topics,
        info=_broker_info(body.get("brokerInfo", {}), ha_server_addr),
    )


def parse_topic(command: RemotingCommand) -> str:
    """The ``topic`` ext field of GET_ROUTEINFO_BY_TOPIC. Raises InvalidRequestError when missing or empty."""
    return _ext(command.ext_fields, "topic")


# -------------------------------------------------------------------------------------------- helpers --


def body_crc32(body: bytes) -> int:
    """CRC-32 of a body as RocketMQ's ``UtilAll.crc32`` computes it (the low 31 bits, a non-negative int)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _broker_info(value: object, ha_server_addr: str) -> BrokerInfo:
    if not isinstance(value, dict):
        raise InvalidRequestError("'brokerInfo' must be an object")
    urls = {}
    for key in ("serviceUrl", "webServiceUrl", "serviceUrlTls"):
        url = value.get(key, "")
        if not isinstance(url, str):
            raise InvalidRequestError(f"brokerInfo '{key}' must be a string")
        urls[key] = url
    listeners = value.get("listeners", {})
    if not isinstance(listeners, dict):
        raise InvalidRequestError("brokerInfo 'listeners' must be an object")
    for name, entry in listeners.items():
        if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise InvalidRequestError(f"listener {name!r} must map scheme names to URL strings")
    return BrokerInfo(
        urls["serviceUrl"], urls["webServiceUrl"], urls["serviceUrlTls"], listeners, ha_server_addr
    )


def _int(obj: Mapping[str, Any], key: str, what: str, *, default: int | None = None) -> int:
    value = obj.get(key, default)
    if value is None:
        raise InvalidRequestError(f"{what}: '{key}' is missing")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**63 - 1:
        raise InvalidRequestError(f"{what}: '{key}' must be a non-negative integer, got {value!r}")
    return value


def _ext(ext: Mapping[str, str], key: str) -> str:
    value = ext.get(key)
    if not value:
        raise InvalidRequestError(f"extFields '{key}' is missing or empty")
    return value


def _ext_int(ext: Mapping[str, str], key: str) -> int:
    text = _ext(ext, key)
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > _INT32_MAX:
        raise InvalidRequestError(f"extFields '{key}' must be an integer in 0..2^31-1, got {text!r}")
    return int(text)


def _check_addr(addr: str, name: str, error: type[Exception]) -> None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise error(f"{name} must be 'host:port', got {addr!r}")
