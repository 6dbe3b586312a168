"""BrokerService: tenants and namespaces, partitioned-topic metadata, the topic registry, lookup.

Pulsar's BrokerService + NamespaceService for one standalone broker: every topic is owned here, so LOOKUP
always answers Connect with this broker's own URL; tenant ``public`` and namespace ``public/default`` exist
from the start (as in Pulsar standalone); topics are auto-created on first use (allowAutoTopicCreation,
type non-partitioned). Metadata lives in the embedded metadata store under ``/admin/...`` keys.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from quasar.broker.errors import (
    BrokerError,
    ConsumerBusyError,
    NamespaceNotFoundError,
    NotAllowedError,
    TopicNotFoundError,
)
from quasar.broker.non_persistent import NonPersistentTopic
from quasar.broker.policies import (
    BACKLOG_QUOTA,
    DEDUPLICATION,
    MESSAGE_TTL,
    RETENTION,
    BacklogQuota,
    PolicyDefaults,
    check_backlog_quota,
    expire_messages,
)
from quasar.broker.subscription import SubscriptionOptions
from quasar.broker.topic import PersistentTopic
from quasar.errors import QuasarError
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.protocol import TopicName

log = logging.getLogger(__name__)

TENANTS_PREFIX = "/admin/tenants/"
POLICIES_PREFIX = "/admin/policies/"
PARTITIONED_PREFIX = "/admin/partitioned-topics/"
TOPIC_POLICIES_PREFIX = "/admin/topic-policies/"
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
        subscription_options: SubscriptionOptions | None = None,
        deduplication_enabled: bool = False,
        deduplication_entries_interval: int = 1000,
        deduplication_max_producers: int = 10_000,
        defaults: PolicyDefaults | None = None,
        max_producers_per_topic: int = 0,
        max_consumers_per_topic: int = 0,
        max_consumers_per_subscription: int = 0,
    ) -> None:
        self.factory = factory
        self.metadata = metadata
        self.cluster_name = cluster_name
        self.broker_service_url = ""  # set once the listener is bound
        self.web_service_url = ""
        self.topics: dict[str, PersistentTopic | NonPersistentTopic] = {}
        self._subscription_options = subscription_options or SubscriptionOptions()
        self._dedup_default = deduplication_enabled
        self.defaults = defaults or PolicyDefaults()
        self.max_producers_per_topic = max_producers_per_topic
        self.max_consumers_per_topic = max_consumers_per_topic
        self.max_consumers_per_subscription = max_consumers_per_subscription
        self._dedup_entries_interval = deduplication_entries_interval
        self._dedup_max_producers = deduplication_max_producers
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
        """Create ``tenant/ns`` with ``policies``; raises NamespaceNotFoundError (unknown tenant) or
        TopicExistsError (admin 409)."""
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
        if domain == "persistent":
            names = {n for n in self.factory.names() if n.startswith(prefix)}
        else:
            names = {n for n in self.topics if n.startswith(prefix)}
        for partitioned in self.partitioned_topics(namespace, domain):
            count = self.partitions(TopicName.parse(partitioned))
            names.update(f"{partitioned}-partition-{i}" for i in range(count))
        return sorted(names)

    async def get_or_create_topic(
        self, topic: TopicName, *, create: bool = True
    ) -> PersistentTopic | NonPersistentTopic:
        """The loaded topic ``topic``, opening its managed ledger (auto-creating it) on first use.

        A non-persistent topic lives in memory only (``non_persistent``); it exists while loaded.
        Raises NamespaceNotFoundError for an unknown namespace, TopicNotFoundError when ``create`` is False and
        the topic does not exist, NotAllowedError for the base name of a partitioned topic (clients must use
        its partitions).
        """
        loaded = self.topics.get(topic.full_name)
        if loaded is not None:
            return loaded
        self._check_namespace(topic)
        if self.partitions(topic) > 0:
            raise NotAllowedError(f"{topic.full_name} is a partitioned topic; use its partitions")
        if not topic.is_persistent:
            if not create:
                raise TopicNotFoundError(f"Topic {topic.full_name} does not exist")
            non_persistent = NonPersistentTopic(
                topic,
                subscription_options=self._subscription_options,
                max_producers=self.max_producers_per_topic,
            )
            self.topics[topic.full_name] = non_persistent
            log.info("loaded non-persistent topic %s", topic.full_name)
            return non_persistent
        if not create and topic.full_name not in self.factory.names():
            raise TopicNotFoundError(f"Topic {topic.full_name} does not exist")
        ledger = self.factory.open(topic.full_name)
        loaded = PersistentTopic(
            topic,
            ledger,
            subscription_options=self._subscription_options,
            max_producers=self.max_producers_per_topic,
            dedup_entries_interval=self._dedup_entries_interval,
            dedup_max_producers=self._dedup_max_producers,
        )
        self._apply_sync_policies(loaded)
        if self.deduplication_enabled(topic):
            loaded.dedup.enable()
        self.topics[topic.full_name] = loaded
        log.info("loaded topic %s", topic.full_name)
        return loaded

    def check_consumer_limits(self, topic: Any, subscription: Any) -> None:
        """Raise ConsumerBusyError when ``subscription`` or ``topic`` has reached its consumer limit
        (broker ``maxConsumersPerSubscription`` / ``maxConsumersPerTopic``, 0 = unlimited)."""
        per_subscription = self.max_consumers_per_subscription
        if per_subscription > 0 and len(subscription.consumers) >= per_subscription:
            raise ConsumerBusyError(f"Subscription reached max consumers limit {per_subscription}")
        per_topic = self.max_consumers_per_topic
        if per_topic > 0 and sum(len(s.consumers) for s in topic.subscriptions.values()) >= per_topic:
            raise ConsumerBusyError(f"Topic reached max consumers limit {per_topic}")

    # ------------------------------------------------------------------ policies
    @staticmethod
    def _topic_policies_key(topic: TopicName) -> str:
        return f"{TOPIC_POLICIES_PREFIX}{topic.domain}/{topic.namespace_name}/{topic.local_name}"

    def _topic_policies(self, topic: TopicName) -> dict[str, Any]:
        return dict(self.metadata.get(self._topic_policies_key(topic)) or {})

    def namespace_policy(self, namespace: str, key: str) -> Any:
        """The namespace policy ``key`` (e.g. ``deduplicationEnabled``), None when unset. Raises
        NamespaceNotFoundError."""
        policies = self.metadata.get(POLICIES_PREFIX + namespace)
        if policies is None:
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
        return policies.get(key)

    def topic_policy(self, topic: TopicName, key: str) -> Any:
        """The topic-level policy ``key`` of ``topic`` (a partition inherits its partitioned topic's), None
        when unset."""
        value = self._topic_policies(topic).get(key)
        if value is None and topic.partition_index >= 0:
            value = self._topic_policies(TopicName.parse(topic.partitioned_topic_name)).get(key)
        return value

    def effective_policy(self, topic: TopicName, key: str, default: Any) -> Any:
        """The topic policy, else the namespace policy, else ``default`` (the broker.conf value)."""
        value = self.topic_policy(topic, key)
        if value is None:
            value = self.namespace_policy(topic.namespace_name, key)
        return default if value is None else value

    async def set_namespace_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (or with None remove) a namespace policy and apply it to the namespace's loaded topics. Raises
        NamespaceNotFoundError."""
        policies = self.metadata.get(POLICIES_PREFIX + namespace)
        if policies is None:
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
        policies = dict(policies)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        await self.metadata.aput(POLICIES_PREFIX + namespace, policies)
        await self._apply_policies(lambda t: t.namespace_name == namespace)

    async def set_topic_policy(self, topic: TopicName, key: str, value: Any) -> None:
        """Set (or with None remove) a topic-level policy (for a partitioned topic: all its partitions) and
        apply it. Raises NamespaceNotFoundError."""
        self._check_namespace(topic)
        policies = self._topic_policies(topic)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        storage_key = self._topic_policies_key(topic)
        if policies:
            await self.metadata.aput(storage_key, policies)
        else:
            await self.metadata.adelete(storage_key)
        base = topic.full_name
        await self._apply_policies(
            lambda t: t.full_name == base or (t.partition_index >= 0 and t.partitioned_topic_name == base)
        )

    async def _apply_policies(self, selects: Any) -> None:
        for loaded in list(self.topics.values()):
            if isinstance(loaded, PersistentTopic) and selects(loaded.name):
                self._apply_sync_policies(loaded)
                await loaded.set_deduplication(self.deduplication_enabled(loaded.name))

    def _apply_sync_policies(self, loaded: PersistentTopic) -> None:
        """Retention, message TTL and backlog quota of ``loaded`` from the effective policies."""
        defaults = self.defaults
        retention = self.effective_policy(loaded.name, RETENTION, None) or {}
        time_min = retention.get("retentionTimeInMinutes", defaults.retention_time_minutes)
        size_mb = retention.get("retentionSizeInMB", defaults.retention_size_mb)
        loaded.ledger.set_retention(
            -1 if time_min < 0 else time_min * 60_000, -1 if size_mb < 0 else size_mb * 1024 * 1024
        )
        loaded.message_ttl_s = int(self.effective_policy(loaded.name, MESSAGE_TTL, defaults.message_ttl_s))
        quota = self.effective_policy(loaded.name, BACKLOG_QUOTA, None)
        loaded.backlog_quota = BacklogQuota.from_json(quota) if quota else defaults.backlog_quota

    def run_policy_checks(self, now_ms: int, *, ttl: bool = True, backlog: bool = True) -> None:
        """One round of message expiry (TTL) and backlog-quota checks (plus a deduplication snapshot where
        entries were persisted since the last one) over the loaded persistent topics. Errors are logged per
        topic."""
        for loaded in list(self.topics.values()):
            if not isinstance(loaded, PersistentTopic) or loaded.ledger.is_closed:
                continue
            try:
                if ttl:
                    expire_messages(loaded, now_ms)
                if backlog:
                    check_backlog_quota(loaded, now_ms)
                    # the timed dedup snapshot (Pulsar brokerDeduplicationSnapshotIntervalSeconds)
                    if loaded.dedup.enabled and loaded.dedup.entries_since_snapshot:
                        loaded.dedup.take_snapshot()
            except QuasarError:
                log.exception("%s: policy check failed", loaded.name)

    # deduplication (Pulsar isDeduplicationEnabled / setDeduplicationStatus)
    def namespace_deduplication(self, namespace: str) -> bool | None:
        value = self.namespace_policy(namespace, DEDUPLICATION)
        return None if value is None else bool(value)

    def topic_deduplication(self, topic: TopicName) -> bool | None:
        value = self.topic_policy(topic, DEDUPLICATION)
        return None if value is None else bool(value)

    def deduplication_enabled(self, topic: TopicName) -> bool:
        """Effective deduplication of ``topic``: the topic policy, else the namespace policy, else the broker
        default."""
        return bool(self.effective_policy(topic, DEDUPLICATION, self._dedup_default))

    async def set_namespace_deduplication(self, namespace: str, enabled: bool | None) -> None:
        await self.set_namespace_policy(namespace, DEDUPLICATION, enabled)

    async def set_topic_deduplication(self, topic: TopicName, enabled: bool | None) -> None:
        await self.set_topic_policy(topic, DEDUPLICATION, enabled)
