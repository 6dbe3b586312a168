"""What every RocketMQ handler group shares: :class:`RocketMQContext` (the broker service, the settings, the
client registry, this listener's endpoints) and the per-call metadata (:func:`call_metadata`).

Handler groups (``route.RouteActivity``, ``send.SendActivity``, rmqconsume's and rmqpull's) are classes
taking one context, with async methods named like the RPCs: ``async def QueryRoute(self, request, context)``
where ``context`` is the ``grpc.aio.ServicerContext``; they raise ``status.RocketMQError`` for a business
error and return the response message (the servicer fills in an OK status when the handler left none).

Topics: RocketMQ topic ``T`` in namespace ``ns`` (the request's ``Resource.resource_namespace``, else the
``x-mq-namespace`` header) is ``persistent://public/<ns or "default">/T``; its queues are the partitions of
that topic (a non-partitioned topic is one queue, id 0). A topic is known when it exists or when Pulsar's
lookup would auto-create it (its namespace exists: Quasar creates topics on first use, as Pulsar's default
``allowAutoTopicCreation=true`` with ``non-partitioned`` type); else TOPIC_NOT_FOUND.
"""

from __future__ import annotations

import ipaddress
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from quasar.broker.errors import BrokerError
from quasar.broker.rocketmq.auth import RocketMQAuthenticator
from quasar.broker.rocketmq.mapping import DEFAULT_MAX_BODY_SIZE, MappedMessage
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.broker.rocketmq.validation import check_topic
from quasar.errors import QuasarError
from quasar.protocol import InvalidTopicNameError, TopicName
from quasar.security import TlsSettings

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService
    from quasar.broker.rocketmq.clients import ClientRegistry

__all__ = [
    "CallMetadata",
    "RocketMQContext",
    "RocketMQSettings",
    "call_metadata",
    "endpoints_of",
    "is_tls_call",
]

log = logging.getLogger(__name__)

TENANT = "public"
"""RocketMQ namespaces live under this Pulsar tenant."""
DEFAULT_NAMESPACE = "default"


DEFAULT_CONSUMER_MAX_ATTEMPTS = 17
"""RocketMQ's deliveries of a message to a consumer group: ``retryMaxTimes`` 16 + the first one."""


@dataclass(frozen=True, slots=True)
class RocketMQSettings:
    """The listener's settings (BrokerConfig ``rocketmq_*``; defaults are the RocketMQ proxy's).

    - ``max_body_size``: bytes of a message body (4 MiB), pushed to producers as ``publishing.max_body_size``.
    - ``broker_name``: the broker group named in routes (``Broker.name``).
    - ``advertised_host``: the host put in route endpoints ("" = the host the client dialled).
    - ``host_name``: this broker's host in messages' ``store_host`` and the readiness line.
    - ``tls`` / ``tls_port``: the TLS listener's certificate settings and port (None: no TLS listener).
    - ``request_timeout_s``, ``long_polling_timeout_s``, ``receive_batch_size``, ``max_attempts``: pushed in
      the Telemetry settings reply (§4: 3 attempts for producers, 17 = 16 retries + 1 for consumers).
    - ``client_idle_timeout_s``: a client that sent nothing (no heartbeat, no stream) for this long is dropped
      with its producers (RocketMQ's channel expiry: 120 s); a Telemetry stream sending no settings within it
      is closed.
    - ``max_clients``: client ids known at once (TOO_MANY_REQUESTS for a new one past it).
    - ``transaction_check_interval_s``, ``transaction_timeout_s``, ``transaction_check_max``: the transaction
      checker's period, the age a half message must reach before it is checked, and the checks before it is
      given up (broker.conf ``transaction_check_interval`` / ``transaction_time_out`` / ``transaction_check_max``).
    """

    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    broker_name: str = "standalone"
    advertised_host: str = ""
    host_name: str = "127.0.0.1"
    tls: TlsSettings | None = None
    tls_port: int | None = None
    request_timeout_s: int = 3
    long_polling_timeout_s: int = 20
    receive_batch_size: int = 32
    producer_max_attempts: int = 3
    consumer_max_attempts: int = DEFAULT_CONSUMER_MAX_ATTEMPTS
    client_idle_timeout_s: float = 120.0
    max_clients: int = 10_000
    transaction_check_interval_s: float = 30.0
    transaction_timeout_s: float = 6.0
    transaction_check_max: int = 15


@dataclass(frozen=True, slots=True)
class CallMetadata:
    """The ``x-mq-*`` headers of one call: ``client_id`` (required), ``namespace`` ("" = none), ``language``,
    ``client_version``, ``request_id``, and the peer address (``ipv4:1.2.3.4:5678``)."""

    client_id: str
    namespace: str = ""
    language: str = ""
    client_version: str = ""
    request_id: str = ""
    peer: str = ""


_MAX_HEADER = 1024
"""Longest ``x-mq-*`` value kept (longer ones are refused as BAD_REQUEST)."""


_CURRENT_CALL: ContextVar[tuple[Any, CallMetadata] | None] = ContextVar("rocketmq_call", default=None)
"""The metadata of the call the current task serves (grpc.aio runs each call in its own task), so the
servicer's admission check and the handler parse the headers once per call."""


_CURRENT_ROLE: ContextVar[tuple[Any, str | None] | None] = ContextVar("rocketmq_role", default=None)
"""The role of the call the current task serves (see :meth:`RocketMQContext.role`)."""

_MAX_CACHED_NAMES = 100_000
"""Topics whose parsed name and round-robin position are kept at most (all dropped past it)."""


def call_metadata(context: Any) -> CallMetadata:
    """The call's RocketMQ headers (parsed once per call, then kept for the rest of it). Raises RocketMQError
    CLIENT_ID_REQUIRED without ``x-mq-client-id``, BAD_REQUEST for a header longer than 1 KiB."""
    current = _CURRENT_CALL.get()
    if current is not None and current[0] is context:
        return current[1]
    metadata = _parse_call_metadata(context)
    _CURRENT_CALL.set((context, metadata))
    return metadata


def _parse_call_metadata(context: Any) -> CallMetadata:
    headers: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item[0], item[1]
        if key.startswith("x-mq-") and isinstance(value, str):
            if len(value) > _MAX_HEADER:
                raise RocketMQError(Code.BAD_REQUEST, f"header {key} is longer than {_MAX_HEADER} characters")
            headers[key] = value
    client_id = headers.get("x-mq-client-id", "").strip()
    if not client_id:
        raise RocketMQError(Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is required")
    return CallMetadata(
        client_id=client_id,
        namespace=headers.get("x-mq-namespace", ""),
        language=headers.get("x-mq-language", ""),
        client_version=headers.get("x-mq-client-version", ""),
        request_id=headers.get("x-mq-request-id", ""),
        peer=context.peer() or "",
    )


def _endpoints(host: str, port: int) -> Any:
    try:
        address = ipaddress.ip_address(host)
        scheme = definition.AddressScheme.IPv4 if address.version == 4 else definition.AddressScheme.IPv6
    except ValueError:
        scheme = definition.AddressScheme.DOMAIN_NAME
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host, port=port)])


def is_tls_call(context: Any) -> bool:
    """Whether a gRPC call came over the TLS listener."""
    try:
        auth = context.auth_context()
    except Exception:  # noqa: BLE001 - a context without transport details (tests, closed calls)
        return False
    return bool(auth.get("transport_security_type") == [b"ssl"])


def endpoints_of(address: str) -> Any:
    """``Endpoints`` of a ``host:port`` (``[v6]:port`` too) with its scheme. Raises ValueError without a
    port."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not host:port: {address!r}")
    return _endpoints(host.strip("[]"), int(port))


class ConsumerGroups(Protocol):
    """What the route and client-session handlers need to know about RocketMQ consumer groups (the port the
    consumption handlers fill in, ``consume.ConsumeActivity``). A group is the durable subscription of the same
    name on every partition; its policy is per namespace (``group_policy.py``)."""

    def is_fifo_group(self, topic: TopicName, group: str) -> bool:
        """Whether ``group`` consumes ``topic`` orderly (RocketMQ ``consumeMessageOrderly``): pushed as
        ``subscription.fifo``; QueryAssignment then answers one assignment per queue."""
        ...

    def max_delivery_attempts(self, topic: TopicName, group: str) -> int:
        """Deliveries of a message before it goes to ``%DLQ%<group>`` (RocketMQ ``retryMaxTimes`` + 1),
        pushed as the consumer's ``backoff_policy.max_attempts``."""
        ...

    async def register(self, group: str, topic: TopicName, role: str | None) -> None:
        """A consumer of ``group`` declared ``topic`` (its Telemetry settings): create the group's
        subscriptions at the end of every queue this broker serves, as RocketMQ registers a group when its
        consumer starts (so messages sent after the consumer started are not skipped by a first receive that
        comes later). Raises RocketMQError (FORBIDDEN without consume permission for ``role``, TOPIC_NOT_FOUND)."""
        ...


class Transactions(Protocol):
    """The send path's view of the listener's transaction service (``transaction.TransactionService``)."""

    async def prepare(
        self,
        mapped: MappedMessage,
        real_topic: TopicName,
        queue_id: int,
        client_namespace: str,
        message: Any = None,
    ) -> int:
        """Store a half message for ``real_topic`` queue ``queue_id`` (``message``: the request's, for its
        immunity time); returns its half-queue offset. Raises RocketMQError."""
        ...


class NoConsumerGroups:
    """:class:`ConsumerGroups` of a listener without consumption handlers: no FIFO group, RocketMQ's default of
    17 attempts, nothing registered."""

    def is_fifo_group(self, topic: TopicName, group: str) -> bool:
        return False

    def max_delivery_attempts(self, topic: TopicName, group: str) -> int:
        return DEFAULT_CONSUMER_MAX_ATTEMPTS

    async def register(self, group: str, topic: TopicName, role: str | None) -> None:
        return None


@dataclass(slots=True)
class RocketMQContext:
    """Shared by every handler group of one listener: ``service`` (the BrokerService), ``settings``,
    ``clients`` (the registry), ``port`` (the bound gRPC port, set once listening)."""

    service: BrokerService
    settings: RocketMQSettings
    clients: ClientRegistry
    port: int = 0
    tls_port: int = 0
    """The bound TLS port (0 while there is no TLS listener)."""
    consumer_groups: ConsumerGroups = field(default_factory=NoConsumerGroups)
    """The consumer groups' policies and registration (``consume.ConsumeActivity`` installs its own)."""
    transactions: Transactions | None = None
    """The transaction service of this listener (set by ``server.RocketMQListener``)."""
    _round_robin: dict[str, int] = field(default_factory=dict)
    _topic_names: dict[tuple[str, str], TopicName] = field(default_factory=dict)
    authenticator: RocketMQAuthenticator = field(init=False)

    def __post_init__(self) -> None:
        self.authenticator = RocketMQAuthenticator(self.service)

    def transaction_service(self) -> Transactions:
        """The listener's transaction service; RocketMQError NOT_IMPLEMENTED for a context without one (a
        handler group used outside a listener)."""
        if self.transactions is None:
            raise RocketMQError(Code.NOT_IMPLEMENTED, "transactional messages are not served here")
        return self.transactions

    def role(self, context: Any) -> str | None:
        """The role of the call (``auth.RocketMQAuthenticator``: cached per credential); None with
        authentication off. Raises RocketMQError UNAUTHORIZED. Handlers check permissions with it, e.g.
        ``service.security.check_consume(ctx.role(context), topic, group)`` (PermissionDeniedError maps to
        FORBIDDEN through ``status.code_of``). Found once per call (the servicer's admission check), then
        kept for the rest of the call."""
        current = _CURRENT_ROLE.get()
        if current is not None and current[0] is context:
            return current[1]
        role = self.authenticator.role(context)
        _CURRENT_ROLE.set((context, role))
        return role

    # ------------------------------------------------------------------ topics
    def topic_name(self, resource: Any, metadata: CallMetadata) -> TopicName:
        """The Pulsar topic of a RocketMQ ``Resource``. Raises RocketMQError ILLEGAL_TOPIC for a name RocketMQ
        or Pulsar refuses. Names that passed are kept (bounded), so a producer's sends parse its topic once."""
        name = resource.name
        namespace = resource.resource_namespace or metadata.namespace or DEFAULT_NAMESPACE
        key = (namespace, name)
        known = self._topic_names.get(key)
        if known is not None:
            return known
        check_topic(name)
        try:
            topic = TopicName.parse(f"persistent://{TENANT}/{namespace}/{name}")
        except InvalidTopicNameError as exc:
            raise RocketMQError(
                Code.ILLEGAL_TOPIC, f"topic {name!r} in namespace {namespace!r}: {exc}"
            ) from None
        if len(self._topic_names) >= _MAX_CACHED_NAMES:
            self._topic_names.clear()
        self._topic_names[key] = topic
        return topic

    def queue_count(self, topic: TopicName) -> int:
        """Queues of ``topic``: its partitions, or 1 for a non-partitioned topic. Raises RocketMQError
        TOPIC_NOT_FOUND when its namespace does not exist (Pulsar's auto-creation would refuse it too),
        FORBIDDEN for a partition count the broker refuses to serve."""
        service = self.service
        if not service.namespace_exists(topic.namespace_name):
            raise RocketMQError(
                Code.TOPIC_NOT_FOUND,
                f"topic {topic.local_name} not found: namespace {topic.namespace_name} does not exist",
            )
        try:
            partitions = service.partitions(topic)
        except BrokerError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None
        return partitions if partitions > 0 else 1

    def queue_topic(self, topic: TopicName, queue_id: int, queues: int) -> TopicName:
        """The Pulsar topic of queue ``queue_id``: the partition, or the topic itself when it has one queue
        and is not partitioned."""
        if self.service.partitions(topic) > 0:
            return topic.partition(queue_id)
        return topic

    def next_queue(self, topic: TopicName, queues: int) -> int:
        """Round-robin queue choice for a message without a message group (the proxy's default selector)."""
        full_name = topic.full_name
        index = self._round_robin.get(full_name, -1) + 1
        if index >= queues:
            index = 0
        if len(self._round_robin) > _MAX_CACHED_NAMES:  # bounded: one int per topic sent to
            self._round_robin.clear()
        self._round_robin[full_name] = index
        return index

    # ------------------------------------------------------------------ routes
    async def queue_brokers(
        self, topic: TopicName, queues: int, requested: Any = None, *, tls: bool = False
    ) -> list[tuple[int, Any]]:
        """``(queue id, Broker)`` of every queue of ``topic`` that a client can reach. Standalone: every queue,
        on this broker. A cluster member (``service.ownership``): each queue on its broker group's master
        (``Broker.name`` = the group), placing a partition not placed yet as a Pulsar lookup would; a queue
        whose group has no live master or whose master has no RocketMQ endpoint is left out (the proxy lists
        only brokers it can route to)."""
        ownership = self.service.ownership
        if ownership is None:
            endpoints = self.endpoints(requested, tls=tls)
            broker = definition.Broker(name=self.settings.broker_name, id=0, endpoints=endpoints)
            return [(i, broker) for i in range(queues)]
        out = []
        for queue_id in range(queues):
            partition = self.queue_topic(topic, queue_id, queues)
            group = ownership.placement.group_of(partition)
            if group is None:
                try:
                    await ownership.lookup(partition, authoritative=False, listener="")
                except QuasarError as exc:
                    log.debug("RocketMQ route: %s not placed: %s", partition.full_name, exc)
                    continue
                group = ownership.placement.group_of(partition)
            master = ownership.membership.master_of(group) if group is not None else None
            if master is None or not master.rocketmq_address:
                continue
            if master.group == ownership.me.group:
                endpoints = self.endpoints(requested, tls=tls)
            else:
                endpoints = endpoints_of(master.rocketmq_address)
            out.append((queue_id, definition.Broker(name=master.group, id=0, endpoints=endpoints)))
        return out

    def local_queues(self, topic: TopicName, queues: int) -> list[int]:
        """The queues of ``topic`` this broker writes (the request of a send names none): all of them
        standalone; in a cluster those placed on this broker's group, or not placed yet (a send claims
        them for it, as a Pulsar producer's lookup would)."""
        ownership = self.service.ownership
        if ownership is None:
            return list(range(queues))
        mine = ownership.me.group
        return [
            i
            for i in range(queues)
            if ownership.placement.group_of(self.queue_topic(topic, i, queues)) in (mine, None)
        ]

    def endpoints(self, requested: Any = None, *, tls: bool = False) -> Any:
        """This listener's ``Endpoints`` (with a scheme: the py client dials nothing without one): the
        advertised host, else the host the client asked for (the request's endpoints, port replaced by ours, as
        the proxy does), else 127.0.0.1; the TLS port for a call that came over TLS."""
        host = self.settings.advertised_host
        if not host and requested is not None and requested.addresses:
            host = requested.addresses[0].host
        return _endpoints(host or "127.0.0.1", self.tls_port if tls and self.tls_port else self.port)

    def store_host(self) -> str:
        """``host:port`` of this listener, as messages' ``store_host``."""
        return f"{self.settings.host_name}:{self.port}"
