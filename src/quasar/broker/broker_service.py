"""BrokerService: tenants and namespaces, partitioned-topic metadata, the topic registry, lookup.

Pulsar's BrokerService + NamespaceService for one standalone broker: every topic is owned here, so LOOKUP
always answers Connect with this broker's own URL; tenant ``public`` and namespace ``public/default`` exist
from the start (as in Pulsar standalone); topics are auto-created on first use (allowAutoTopicCreation,
type non-partitioned). Metadata lives in the embedded metadata store under ``/admin/...`` keys.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from quasar.broker.errors import BrokerError, NamespaceNotFoundError, NotAllowedError, TopicNotFoundError
from quasar.broker.topic import PersistentTopic
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.protocol import TopicName

log = logging.getLogger(__name__)

TENANTS_PREFIX = "/admin/tenants/"
POLICIES_PREFIX = "/admin/policies/"
PARTITIONED_PREFIX = "/admin/partitioned-topics/"
BOOT_COUNT_KEY = "/broker/boot-count"

DEFAULT_TENANTS = ("public", "pulsar")
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")


class MetadataStoreLike(Protocol):
    """The part of quasar.storage.metadata.MetadataStore the broker uses (passed in at start-up)."""

    def get(self, key: str) -> Any: ...

    def list(self, prefix: str) -> dict[str, Any]: ...

    async def aput(self, key: str, value: Any) -> None: ...

    async def adelete(self, key: str) -> None: ...

    def put(self, key: str, value: Any) -> None: ...


class TopicExistsError(BrokerError):
    """The topic (or partitioned topic) already exists (admin: 409)."""


class BrokerService:
    """Owns every topic of this broker."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        metadata: MetadataStoreLike,
        *,
        cluster_name: str = "standalone",
        max_read_batch_size: int = 100,
    ) -> None:
        self.factory = factory
        self.metadata = metadata
        self.cluster_name = cluster_name
        self.broker_service_url = ""  # set once the listener is bound
        self.web_service_url = ""
        self.topics: dict[str, PersistentTopic] = {}
        self._max_read_batch_size = max_read_batch_size
        self._boot_id = 0
        self._producer_counter = 0

    def generate_producer_name(self) -> str:
        """A producer name unique on this broker across restarts: ``<cluster>-<boot>-<counter>``, as Pulsar's
        DistributedIdGenerator (e.g. ``standalone-3-17``)."""
        self._producer_counter += 1
        return f"{self.cluster_name}-{self._boot_id}-{self._producer_counter}"

    def bootstrap(self) -> None:
        """Create the default tenants and namespaces if missing (blocking; call before serving)."""
        boot = int(self.metadata.get(BOOT_COUNT_KEY) or 0) + 1
        self.metadata.put(BOOT_COUNT_KEY, boot)
        self._boot_id = boot
        for tenant in DEFAULT_TENANTS:
            if self.metadata.get(TENANTS_PREFIX + tenant) is None:
                self.metadata.put(
                    TENANTS_PREFIX + tenant, {"adminRoles": [], "allowedClusters": [self.cluster_name]}
                )
        for namespace in DEFAULT_NAMESPACES:
            if self.metadata.get(POLICIES_PREFIX + namespace) is None:
                self.metadata.put(POLICIES_PREFIX + namespace, {})

    # ------------------------------------------------------------------ tenants / namespaces
    def tenants(self) -> list[str]:
        return sorted(k[len(TENANTS_PREFIX) :] for k in self.metadata.list(TENANTS_PREFIX))

    def namespaces(self, tenant: str) -> list[str]:
        prefix = f"{POLICIES_PREFIX}{tenant}/"
        return sorted(k[len(POLICIES_PREFIX) :] for k in self.metadata.list(prefix))

    def tenant_exists(self, tenant: str) -> bool:
        return self.metadata.get(TENANTS_PREFIX + tenant) is not None

    def namespace_exists(self, namespace: str) -> bool:
        return self.metadata.get(POLICIES_PREFIX + namespace) is not None

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        if self.tenant_exists(tenant):
            raise TopicExistsError(f"Tenant {tenant} already exists")
        await self.metadata.aput(TENANTS_PREFIX + tenant, info)

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        tenant = namespace.split("/", 1)[0]
        if not self.tenant_exists(tenant):
            raise NamespaceNotFoundError(f"Tenant {tenant} does not exist")
        if self.namespace_exists(namespace):
            raise TopicExistsError(f"Namespace {namespace} already exists")
        await self.metadata.aput(POLICIES_PREFIX + namespace, policies)

    def _check_namespace(self, topic: TopicName) -> None:
        if not self.namespace_exists(topic.namespace_name):
            raise NamespaceNotFoundError(f"Namespace {topic.namespace_name} does not exist")

    # ------------------------------------------------------------------ partitioned topics
    @staticmethod
    def _partitioned_key(topic: TopicName) -> str:
        return f"{PARTITIONED_PREFIX}{topic.domain}/{topic.namespace_name}/{topic.local_name}"

    def partitions(self, topic: TopicName) -> int:
        """Partition count of ``topic`` (0 = not partitioned). A partition name is never partitioned itself."""
        if topic.partition_index >= 0:
            return 0
        value = self.metadata.get(self._partitioned_key(topic))
        return int(value["partitions"]) if value else 0

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """PUT .../partitions: raises TopicExistsError if it (or a non-partitioned topic of that name) exists."""
        if partitions <= 0:
            raise NotAllowedError(f"Number of partitions should be more than 0, got {partitions}")
        if topic.partition_index >= 0:
            raise NotAllowedError(f"{topic.full_name} is a partition name and cannot be partitioned")
        self._check_namespace(topic)
        if self.partitions(topic) > 0 or topic.full_name in self.factory.names():
            raise TopicExistsError(f"Topic {topic.full_name} already exists")
        await self.metadata.aput(self._partitioned_key(topic), {"partitions": partitions})

    def partitioned_topics(self, namespace: str, domain: str = "persistent") -> list[str]:
        prefix = f"{PARTITIONED_PREFIX}{domain}/{namespace}/"
        return sorted(f"{domain}://{namespace}/{k[len(prefix) :]}" for k in self.metadata.list(prefix))

    # ------------------------------------------------------------------ topics
    def list_topics(self, namespace: str, domain: str = "persistent") -> list[str]:
        """Every topic of ``namespace``: existing managed ledgers plus the partitions of partitioned topics."""
        prefix = f"{domain}://{namespace}/"
        names = {n for n in self.factory.names() if n.startswith(prefix)}
        for partitioned in self.partitioned_topics(namespace, domain):
            count = self.partitions(TopicName.parse(partitioned))
            names.update(f"{partitioned}-partition-{i}" for i in range(count))
        return sorted(names)

    def get_or_create_topic(self, topic: TopicName, *, create: bool = True) -> PersistentTopic:
        """The loaded topic ``topic``, opening its managed ledger (auto-creating it) on first use.

        Raises NamespaceNotFoundError for an unknown namespace, TopicNotFoundError when ``create`` is False and
        the topic does not exist, NotAllowedError for non-persistent topics (not supported yet) and for the
        base name of a partitioned topic (clients must use its partitions).
        """
        loaded = self.topics.get(topic.full_name)
        if loaded is not None:
            return loaded
        if not topic.is_persistent:
            raise NotAllowedError(f"non-persistent topics are not supported yet: {topic.full_name}")
        self._check_namespace(topic)
        if self.partitions(topic) > 0:
            raise NotAllowedError(f"{topic.full_name} is a partitioned topic; use its partitions")
        if not create and topic.full_name not in self.factory.names():
            raise TopicNotFoundError(f"Topic {topic.full_name} does not exist")
        ledger = self.factory.open(topic.full_name)
        loaded = PersistentTopic(topic, ledger, max_read_batch_size=self._max_read_batch_size)
        self.topics[topic.full_name] = loaded
        log.info("loaded topic %s", topic.full_name)
        return loaded
