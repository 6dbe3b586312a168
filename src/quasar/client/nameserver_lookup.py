"""Lookups through name servers: service URLs ``nameserver://host:port;host:port`` (RocketMQ's
``namesrvAddr`` list; commas work too). ``nameserver+ssl://`` (or ``use_tls=True``) reaches the brokers over TLS:
lookups answer each master's ``serviceUrlTls`` (with ``listener_name``: that listener's ``pulsar+ssl`` URL);
the name servers themselves are asked over their plain RocketMQ remoting protocol (they serve no TLS).

:class:`NameServerLookupService` has :class:`~quasar.client.connection_pool.LookupService`'s interface and
answers from the name servers' routes (TopicRouteData, shape in :mod:`quasar.nameserver.routes`) instead of a
broker's LOOKUP:

* Routes are asked for by base topic (GET_ROUTEINFO_BY_TOPIC), from the name server that answered last, the next
  one on failure (:class:`~quasar.client.nameserver_cnx.NameServers`), and cached. An owned task refreshes every
  cached route every ``refresh_interval_s`` (30 s, RocketMQ's ``pollNameServerInterval``); a route a name
  server no longer has is dropped.
* PARTITIONED_METADATA: the route's ``partitionCount`` (0 for a partition name).
* LOOKUP of a topic or partition ``i``: the master (broker id 0) of the broker group whose ``partitions``
  contain ``i`` (for a non-partitioned topic: the group serving it); its ``serviceUrl``, or with
  ``ClientConfig.listener_name`` that listener's ``pulsar`` URL. A cached route answers one lookup per topic;
  the next lookup of the same topic (a reconnect after a failed connection, a retry) asks the name servers
  again, so a failed broker is not asked twice from a stale route.
* GET_TOPICS_OF_NAMESPACE: asked over the binary protocol of any group's live master (from
  GET_BROKER_CLUSTER_INFO).
* A topic no name server has a route for (a new topic): PARTITIONED_METADATA and LOOKUP are asked of a live
  master over the binary protocol (GET_BROKER_CLUSTER_INFO), which places the topic as any Pulsar LOOKUP does,
  so producers and consumers can create topics through ``nameserver://`` as through ``pulsar://``.
* No live master, no group holding the partition, or no name server answering: retried with backoff
  (``initial_backoff_interval_ms`` doubling to ``max_backoff_interval_ms``) until ``operation_timeout_seconds``,
  then :class:`~quasar.client.errors.LookupError_` with the last reason. An unknown listener name fails at once.

"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from quasar.protocol import RemoteProtocolError, TopicName, commands
from quasar.protocol.remoting import RemotingCommand, RequestCode, ResponseCode, decode_json_object

from ._tasks import TaskOwner
from .connection_pool import ConnectionPool, LookupService, parse_service_url
from .errors import BrokerResponseError, ConnectError, ConnectionClosedError, LookupError_
from .nameserver_cnx import NameServers

__all__ = ["NAMESERVER_SCHEME", "NameServerLookupService", "is_nameserver_url", "parse_nameserver_url"]

log = logging.getLogger("quasar.client")

T = TypeVar("T")

#: Scheme of name-server service URLs.
NAMESERVER_SCHEME = "nameserver"
_MASTER_ID = "0"


class _NoRoute(Exception):
    """A retriable lookup failure (no route yet, no live master, ...); its text is the reason."""


class _UnknownTopic(_NoRoute):
    """No name server has a route for the topic: no broker group serves it (yet)."""


def is_nameserver_url(url: object) -> bool:
    """True for a ``nameserver://`` or ``nameserver+ssl://`` URL."""
    return isinstance(url, str) and url.startswith((NAMESERVER_SCHEME + "://", NAMESERVER_SCHEME + "+ssl://"))


def parse_nameserver_url(url: str) -> list[tuple[str, int]]:
    """``nameserver://h:p;h:p[/]`` (or ``,``-separated) -> ``[(host, port), ...]`` in order, duplicates dropped.

    Raises:
        ValueError: not a ``nameserver://`` URL, no address, or an address without a valid port.
    """
    if not is_nameserver_url(url):
        raise ValueError(f"not a nameserver:// URL: {url!r}")
    rest = url.split("://", 1)[1].rstrip("/")
    addresses: dict[tuple[str, int], None] = {}
    for part in rest.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port_text = part.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"name server address must be host:port, got {part!r} in {url!r}")
        addresses[(host.strip("[]"), int(port_text))] = None
    if not addresses:
        raise ValueError(f"nameserver:// URL without an address: {url!r}")
    return list(addresses)


class _Route:
    """A parsed TopicRouteData: partition count, partitions per group, master URLs per group."""

    __slots__ = ("groups", "masters", "partition_count", "served")

    def __init__(self, data: dict[str, Any]) -> None:
        self.groups: dict[str, list[int]] = {}
        self.masters: dict[str, dict[str, Any]] = {}
        self.partition_count = 0
        for queue in data["queueDatas"]:
            self.groups[str(queue["brokerName"])] = [int(i) for i in queue.get("partitions") or []]
            self.partition_count = max(self.partition_count, int(queue.get("partitionCount") or 0))
        for broker in data["brokerDatas"]:
            addrs = broker.get("brokerAddrs") or {}
            infos = broker.get("brokerInfos") or {}
            if _MASTER_ID in addrs:
                info = dict(infos.get(_MASTER_ID) or {})
                info.setdefault("serviceUrl", f"pulsar://{addrs[_MASTER_ID]}")
                self.masters[str(broker["brokerName"])] = info
        #: topic names a lookup was answered for from this route (each gets one answer, then a refresh)
        self.served: set[str] = set()

    def group_of(self, partition: int) -> str | None:
        if partition < 0:
            return min(self.groups) if self.groups else None
        return next((g for g in sorted(self.groups) if partition in self.groups[g]), None)


def _master_url(info: dict[str, Any], listener_name: str | None, group: str, *, tls: bool = False) -> str:
    """The URL of a group's master to connect to: ``serviceUrl`` (``serviceUrlTls`` with ``tls``), or the
    ``pulsar`` (``pulsar+ssl``) URL of advertised listener ``listener_name``."""
    scheme = "pulsar+ssl" if tls else "pulsar"
    if not listener_name:
        url = info.get("serviceUrlTls" if tls else "serviceUrl")
    else:
        listener = (info.get("listeners") or {}).get(listener_name)
        if not isinstance(listener, dict):
            raise LookupError_(f"broker group {group} has no advertised listener named {listener_name!r}")
        url = listener.get(scheme)
    if not isinstance(url, str) or not url:
        raise _NoRoute(f"the master of broker group {group} registered no {scheme}:// URL")
    return url


class NameServerLookupService(LookupService):
    """Lookups answered from name-server routes (module docstring); same interface as :class:`LookupService`.

    Args:
        pool: the client's connection pool (its ``config`` gives timeouts, backoff and ``listener_name``).
        service_url: ``nameserver://h:p;h:p``.
        refresh_interval_s: seconds between route refreshes (30).
        request_timeout_s: bound of one request to one name server, seconds (3).

    Raises:
        ValueError: a malformed URL.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        service_url: str,
        *,
        refresh_interval_s: float = 30.0,
        request_timeout_s: float = 3.0,
    ) -> None:
        addresses = parse_nameserver_url(service_url)
        super().__init__(pool, addresses[0])
        self.refresh_interval_s = refresh_interval_s
        self.nameservers = NameServers(addresses, request_timeout_s=request_timeout_s)
        self._routes: dict[str, _Route] = {}
        self._fetching: dict[str, asyncio.Future[_Route | None]] = {}
        self._tasks = TaskOwner("nameserver lookup")
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------------------- LookupService --

    async def get_partitioned_metadata(self, topic: str) -> int:
        """Partition count of ``topic`` from its route (0 for a partition name or a non-partitioned topic).

        Raises:
            LookupError_: no route within ``operation_timeout_seconds``.
        """
        name = TopicName.parse(topic)
        if name.is_partition:
            return 0
        base = name.partitioned_topic_name

        async def once() -> int:
            try:
                route = self._routes.get(base) or await self._fetch(base)
            except _UnknownTopic:  # a new topic: a broker answers (and creates it on first use)
                return await (await self._broker_lookup()).get_partitioned_metadata(topic)
            return route.partition_count

        return await self._retry(f"partitioned metadata of {topic}", once)

    async def lookup(self, topic: str) -> tuple[str, int]:
        """``(host, port)`` of the master serving ``topic`` (a non-partitioned topic or a partition).

        Raises:
            LookupError_: an unknown listener name or a partitioned topic's base name (at once), or no usable
                route within ``operation_timeout_seconds``.
        """
        name = TopicName.parse(topic)
        base = name.partitioned_topic_name

        async def once() -> tuple[str, int]:
            route = self._routes.get(base)
            if route is None or name.full_name in route.served:
                try:
                    route = await self._fetch(base)
                except _UnknownTopic:  # a new topic: any broker places it (Pulsar LOOKUP, redirects followed)
                    return await (await self._broker_lookup()).lookup(topic)
            route.served.add(name.full_name)
            if route.partition_count > 0 and name.partition_index < 0:
                raise LookupError_(
                    f"{topic} is partitioned ({route.partition_count} partitions): look up a partition"
                )
            group = route.group_of(name.partition_index)
            if group is None:
                raise _NoRoute(f"no broker group registered partition {name.partition_index} of {base}")
            info = route.masters.get(group)
            if info is None:
                raise _NoRoute(f"broker group {group} serving {topic} has no live master")
            config = self.pool.config
            url = _master_url(info, config.listener_name, group, tls=config.use_tls)
            try:
                return parse_service_url(url)
            except ValueError as exc:
                raise LookupError_(f"lookup of {topic} found an unusable URL: {exc}") from None

        return await self._retry(f"lookup of {topic}", once)

    async def get_topics_of_namespace(self, namespace: str) -> list[str]:
        """Persistent topics of ``tenant/namespace`` (partitions folded to base names), asked of any live master.

        Raises:
            LookupError_: no name server or broker answered within ``operation_timeout_seconds``.
            BrokerResponseError: the broker refused (not retryable).
        """

        async def once() -> list[str]:
            address = await self._any_master()
            try:
                cnx = await self.pool.get(address)
                request_id = cnx.next_request_id()
                frame = commands.new_get_topics_of_namespace(request_id, namespace)
                body = await cnx.request(frame, request_id)
            except (ConnectError, ConnectionClosedError, TimeoutError) as exc:
                raise _NoRoute(f"broker {address[0]}:{address[1]}: {exc}") from None
            names: dict[str, None] = {}
            for topic in body.topics:
                names[TopicName.parse(topic).partitioned_topic_name] = None
            return list(names)

        return await self._retry(f"topics of namespace {namespace}", once)

    async def aclose(self) -> None:
        """Stop the refresh task and close the name-server connections."""
        self._closed = True
        await self._tasks.aclose()
        await self.nameservers.aclose()

    # ------------------------------------------------------------------------------------------ routes --

    async def _fetch(self, base: str) -> _Route:
        """The route of ``base`` from the name servers (concurrent callers share one request); cached."""
        pending = self._fetching.get(base)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._fetching[base] = pending
            try:
                route = await self._request_route(base)
            except BaseException as exc:
                pending.set_exception(exc if isinstance(exc, Exception) else _NoRoute("cancelled"))
                pending.exception()  # retrieved: a lone caller's error is not "never retrieved"
                raise
            finally:
                del self._fetching[base]
            pending.set_result(route)
        else:
            route = await asyncio.shield(pending)
        if route is None:
            raise _UnknownTopic(f"the name servers have no route for {base}")
        self._ensure_refresher()
        return route

    async def _request_route(self, base: str) -> _Route | None:
        try:
            response = await self.nameservers.request(
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": base})
            )
        except ConnectError as exc:
            raise _NoRoute(str(exc)) from None
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            self._routes.pop(base, None)
            return None
        if response.code != ResponseCode.SUCCESS:
            raise _NoRoute(f"name server answered code {response.code}: {response.remark}")
        try:
            route = _Route(decode_json_object(response.body, "TopicRouteData"))
        except (RemoteProtocolError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _NoRoute(f"malformed route for {base} from a name server: {exc!r}") from None
        self._routes[base] = route
        return route

    async def _any_master(self) -> tuple[str, int]:
        try:
            response = await self.nameservers.request(
                RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, 0)
            )
            if response.code != ResponseCode.SUCCESS:
                raise _NoRoute(f"name server answered code {response.code}: {response.remark}")
            table = decode_json_object(response.body, "ClusterInfo").get("brokerAddrTable") or {}
            candidates = []
            for group, broker in table.items():
                info = (broker.get("brokerInfos") or {}).get(_MASTER_ID)
                if info is not None:
                    config = self.pool.config
                    candidates.append(
                        _master_url(dict(info), config.listener_name, group, tls=config.use_tls)
                    )
        except ConnectError as exc:
            raise _NoRoute(str(exc)) from None
        except (RemoteProtocolError, TypeError, AttributeError) as exc:
            raise _NoRoute(f"malformed cluster info from a name server: {exc!r}") from None
        if not candidates:
            raise _NoRoute("no broker group has a live master")
        try:
            return parse_service_url(random.choice(candidates))
        except ValueError as exc:
            raise _NoRoute(str(exc)) from None

    async def _broker_lookup(self) -> LookupService:
        """A binary-protocol lookup service on a live master, for topics no group registered yet (RocketMQ's
        producers create such topics through a broker too, with ``autoCreateTopicEnable``)."""
        return LookupService(self.pool, await self._any_master())

    def _ensure_refresher(self) -> None:
        if self._refresher is None and not self._closed:
            self._refresher = self._tasks.spawn(self._refresh_loop(), name="nameserver route refresh")

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            for base in list(self._routes):
                try:
                    await self._request_route(base)
                except _NoRoute as exc:
                    log.info("route refresh of %s failed (the cached route stays): %s", base, exc)

    async def _retry(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        config = self.pool.config
        deadline = time.monotonic() + config.operation_timeout_seconds
        backoff = config.initial_backoff_interval_ms / 1000
        while True:
            try:
                return await operation()
            except _NoRoute as exc:
                reason = str(exc)
            except BrokerResponseError as exc:
                if not exc.retryable:
                    raise
                reason = str(exc)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                raise LookupError_(f"{what} failed after {config.operation_timeout_seconds} s: {reason}")
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, config.max_backoff_interval_ms / 1000)
