"""BrokerService: tenants and namespaces, partitioned-topic metadata, the topic registry, lookup.

Pulsar's BrokerService + NamespaceService: ``public`` and ``public/default`` exist from the start; topics are
auto-created on first use (allowAutoTopicCreation, non-partitioned); in a cluster ``ownership`` decides which
broker serves a topic (LOOKUP answers Redirect), standalone serves them all. Deletion: ``topic_deletion``.

Tenants, namespaces, policies and partition counts live in :class:`~quasar.broker.resources.BrokerResources`:
loaded once by :meth:`BrokerService.bootstrap`, then read from memory (LOOKUP and PARTITIONED_METADATA are
dictionary look-ups) and written through the async metadata port. Loading a topic is asynchronous
(``await factory.open``); concurrent loads of one topic share one task owned by the service.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quasar.broker import topic_deletion
from quasar.broker.auth import NO_SECURITY, BrokerSecurity
from quasar.broker.cluster.model import INTERNAL_LISTENER_NAME, LookupAnswer, LookupKind, UnknownListenerError
from quasar.broker.cluster.ownership import ClusterOwnership
from quasar.broker.compaction.service import COMPACTION_THRESHOLD, CompactionService
from quasar.broker.compaction.view import load_compacted_view
from quasar.broker.errors import (
    BrokerError,
    ConsumerBusyError,
    NamespaceNotFoundError,
    NotAllowedError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from quasar.broker.inactive_topics import InactiveTopicUnloader
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
    parse_retention,
)
from quasar.broker.resources import BrokerResources
from quasar.broker.schema import SchemaDefaults, SchemaRegistry
from quasar.broker.subscription import SubscriptionOptions
from quasar.broker.topic import PersistentTopic
from quasar.broker.topic_registry import TopicRegistry, count_namespace_topics
from quasar.errors import QuasarError
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.metadata import AlreadyExistsError, MetadataStore, MetadataStoreError
from quasar.protocol import TopicName

log = logging.getLogger(__name__)

DEFAULT_TENANTS = ("public", "pulsar")
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")


def _ttl(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"message TTL must be an integer >= 0, got {value!r:.100}")
    return value


class TopicExistsError(BrokerError):
    """The topic (or partitioned topic) already exists (admin: 409)."""


class BrokerService:
    """Owns every topic of this broker."""

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        metadata: MetadataStore,
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
        max_subscriptions_per_topic: int = 0,
        max_topics_per_namespace: int = 0,
        max_num_partitions_per_partitioned_topic: int = 0,
        schema_defaults: SchemaDefaults | None = None,
    ) -> None:
        self.factory = factory
        self.write_refusal: Callable[[], str | None] = lambda: None
        """Why a new producer is refused now (a SYNC_MASTER without an in-sync slave: replication's
        ``write_refusal``), or None."""
        self.read_only: str | None = None
        """Why publishing and creating topics are refused (a slave serving reads of a masterless group);
        None when they are not."""
        self.resources = BrokerResources(metadata)
        self.schemas = SchemaRegistry(
            metadata, lambda namespace: self.resources.namespaces.get(namespace), schema_defaults
        )
        """Topic schemas (``quasar.broker.schema``), in the admin metadata store."""
        self.cluster_name = cluster_name
        self.broker_service_url = ""  # set once the listener is bound
        self.web_service_url = ""
        self.broker_service_url_tls = ""  # "" while there is no TLS listener
        self.web_service_url_tls = ""
        self.topics: dict[str, PersistentTopic | NonPersistentTopic] = TopicRegistry()
        self._subscription_options = subscription_options or SubscriptionOptions()
        self._dedup_default = deduplication_enabled
        self.defaults = defaults or PolicyDefaults()
        self.max_producers_per_topic = max_producers_per_topic
        self.max_consumers_per_topic = max_consumers_per_topic
        self.max_consumers_per_subscription = max_consumers_per_subscription
        self.max_subscriptions_per_topic = max_subscriptions_per_topic
        self.max_topics_per_namespace = max_topics_per_namespace
        self.max_num_partitions = max_num_partitions_per_partitioned_topic
        self._dedup_entries_interval = deduplication_entries_interval
        self._dedup_max_producers = deduplication_max_producers
        self._boot_id = 0
        self._producer_counter = 0
        self._loading: dict[str, asyncio.Task[PersistentTopic]] = {}  # topic -> its one pending load
        self._policy_refresh: asyncio.Task[None] | None = None
        self.resources.on_policies_changed = self._refresh_policies
        self.security: BrokerSecurity = NO_SECURITY
        """Authentication and authorization (``quasar.broker.auth``); set by the composition root."""
        self.compaction = CompactionService(
            factory, self.topics, lambda namespace: self.namespace_policy(namespace, COMPACTION_THRESHOLD)
        )
        """Topic compaction (``compaction.service``); the composition root sets its broker.conf threshold and
        starts its monitor."""
        self.inactive_topics = InactiveTopicUnloader(
            self.topics, self._loading, lambda: self.factory, self.compaction.running
        )
        """Unloads idle topics (``inactive_topics``); the composition root configures and starts it."""
        self.ownership: ClusterOwnership | None = None
        """Set by the composition root of a cluster member (``quasar broker``); None: standalone, this broker
        serves every topic."""

    def generate_producer_name(self) -> str:
        """A producer name unique on this broker across restarts: ``<cluster>-<boot>-<counter>``, as Pulsar's
        DistributedIdGenerator (e.g. ``standalone-3-17``)."""
        self._producer_counter += 1
        return f"{self.cluster_name}-{self._boot_id}-{self._producer_counter}"

    async def bootstrap(self) -> None:
        """Load the admin metadata, count this boot, and create the default tenants and namespaces when
        missing (Pulsar standalone). Call once before serving; raises the metadata port's errors."""
        resources = self.resources
        await resources.load()
        self._boot_id = await resources.next_boot_count()
        raced = False  # another broker of the cluster created a default one first: read it back
        for tenant in DEFAULT_TENANTS:
            if tenant not in resources.tenants:
                try:
                    await resources.create_tenant(
                        tenant, {"adminRoles": [], "allowedClusters": [self.cluster_name]}
                    )
                except AlreadyExistsError:
                    raced = True
        for namespace in DEFAULT_NAMESPACES:
            if namespace not in resources.namespaces:
                try:
                    await resources.create_namespace(namespace, {})
                except AlreadyExistsError:
                    raced = True
        if raced:
            await resources.load()

    async def close(self) -> None:
        """Cancel the topic loads still pending (their waiters get CancelledError), then close every loaded
        topic (its subscriptions' timers are cancelled; managed ledgers are closed by their factory).
        Idempotent."""
        if self._policy_refresh is not None:
            self._policy_refresh.cancel()
        await self.compaction.close()
        await self.inactive_topics.close()
        pending = list(self._loading.values())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for loaded in list(self.topics.values()):
            loaded.close()

    # ------------------------------------------------------------------ lookup / ownership
    async def lookup(
        self, topic: TopicName, *, authoritative: bool = False, listener: str = ""
    ) -> LookupAnswer:
        """The answer to a LOOKUP of ``topic`` (see ``quasar.broker.cluster.ownership``; standalone: Connect to
        this broker). Raises NamespaceNotFoundError, ServiceNotReadyError, UnknownListenerError or the
        metadata port's MetadataStoreError."""
        self._check_namespace(topic)
        if self.ownership is None:  # Pulsar names the one listener of a broker without advertisedListeners
            if listener and listener != INTERNAL_LISTENER_NAME:  # after internalListenerName: "internal"
                raise UnknownListenerError(
                    f"the broker {self.broker_service_url} does not have a {listener!r} listener"
                )
            return LookupAnswer(
                LookupKind.CONNECT,
                self.broker_service_url,
                self.broker_service_url_tls,
                self.web_service_url,
                authoritative=True,
                web_service_url_tls=self.web_service_url_tls,
            )
        return await self.ownership.lookup(topic, authoritative=authoritative, listener=listener)

    def owner_web_url(self, topic: TopicName, *, tls: bool = False) -> str | None:
        """The admin URL of the broker that serves ``topic`` when it is another broker of the cluster (admin
        requests about it are redirected there), else None. Raises ServiceNotReadyError when its group has no
        live master."""
        return None if self.ownership is None else self.ownership.owner_web_url(topic, tls=tls)

    def messages_in_total(self) -> int:
        """Messages published to the loaded topics since they loaded (for load reports: it only grows while a
        topic stays loaded, whatever its producers do)."""
        return sum(t.counters.msg_in for t in self.topics.values() if isinstance(t, PersistentTopic))

    # ------------------------------------------------------------------ tenants / namespaces
    def tenants(self) -> list[str]:
        return sorted(self.resources.tenants)

    def namespaces(self, tenant: str) -> list[str]:
        prefix = f"{tenant}/"
        return sorted(ns for ns in self.resources.namespaces if ns.startswith(prefix))

    def tenant_exists(self, tenant: str) -> bool:
        return tenant in self.resources.tenants

    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self.resources.namespaces

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        """Create ``tenant``; raises TopicExistsError (admin 409) when it exists."""
        if self.tenant_exists(tenant):
            raise TopicExistsError(f"Tenant {tenant} already exists")
        try:
            await self.resources.create_tenant(tenant, info)
        except AlreadyExistsError:
            raise TopicExistsError(f"Tenant {tenant} already exists") from None

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        """Create ``tenant/ns`` with ``policies``; raises NamespaceNotFoundError (unknown tenant) or
        TopicExistsError (admin 409)."""
        tenant = namespace.split("/", 1)[0]
        if not self.tenant_exists(tenant):
            raise NamespaceNotFoundError(f"Tenant {tenant} does not exist")
        if self.namespace_exists(namespace):
            raise TopicExistsError(f"Namespace {namespace} already exists")
        try:
            await self.resources.create_namespace(namespace, policies)
        except AlreadyExistsError:
            raise TopicExistsError(f"Namespace {namespace} already exists") from None

    def _check_namespace(self, topic: TopicName) -> None:
        if not self.namespace_exists(topic.namespace_name):
            raise NamespaceNotFoundError(f"Namespace {topic.namespace_name} does not exist")

    # ------------------------------------------------------------------ partitioned topics
    def partitions(self, topic: TopicName) -> int:
        """Partition count of ``topic`` (0 = not partitioned). A partition name is never partitioned itself.
        Raises NotAllowedError for a count stored before ``max_num_partitions_per_partitioned_topic`` bounded
        it and past that bound (such a topic cannot be served: its partitions could not even be listed)."""
        if topic.partition_index >= 0:
            return 0
        count = self.resources.partitions(topic)
        if self.max_num_partitions and count > self.max_num_partitions:
            raise NotAllowedError(
                f"{topic.full_name} has {count} partitions, more than max_num_partitions_per_partitioned_topic"
                f" {self.max_num_partitions}"
            )
        return count

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """PUT .../partitions: raises TopicExistsError if it (or a non-partitioned topic of that name) exists."""
        if partitions <= 0:
            raise NotAllowedError(f"Number of partitions should be more than 0, got {partitions}")
        if self.max_num_partitions and partitions > self.max_num_partitions:  # Pulsar: 412, same message
            raise NotAllowedError(
                f"Number of partitions should be less than or equal to {self.max_num_partitions}"
            )
        if topic.partition_index >= 0:
            raise NotAllowedError(f"{topic.full_name} is a partition name and cannot be partitioned")
        self._check_namespace(topic)
        if self.resources.partitions(topic) > 0 or self.factory.exists(topic.full_name):
            raise TopicExistsError(f"Topic {topic.full_name} already exists")
        self.check_topics_quota(topic.namespace_name, partitions)
        try:
            await self.resources.create_partitioned_topic(topic, partitions)
        except AlreadyExistsError:
            raise TopicExistsError(f"Topic {topic.full_name} already exists") from None
        if self.ownership is not None:
            try:
                await self.ownership.place_partitions(topic, partitions)
            except MetadataStoreError as exc:  # each partition is placed at its first lookup instead
                log.warning("partitions of %s not placed at creation: %s", topic.full_name, exc)

    def partitioned_topics(self, namespace: str, domain: str = "persistent") -> list[str]:
        return sorted(self.resources.partitioned_topics(namespace, domain))

    # ------------------------------------------------------------------ topics
    def list_topics(self, namespace: str, domain: str = "persistent") -> list[str]:
        """Every topic of ``namespace``: existing managed ledgers plus the partitions of partitioned topics."""
        prefix = f"{domain}://{namespace}/"
        if domain == "persistent":
            names = set(self.factory.names_with_prefix(prefix))
        else:
            names = {n for n in self.topics if n.startswith(prefix)}
        for partitioned, count in self.resources.partitioned_topics(namespace, domain).items():
            if self.max_num_partitions and count > self.max_num_partitions:
                log.warning("%s: %d partitions stored, past the bound: not listed", partitioned, count)
                continue
            names.update(f"{partitioned}-partition-{i}" for i in range(count))
        if self.ownership is not None:  # the cluster's topics, wherever they are served
            names.update(self.ownership.placement.topics_in(namespace, domain))
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
        if self.ownership is not None:
            await self.ownership.ensure_owned(topic, claim=create)
            loaded = self.topics.get(topic.full_name)  # loaded by another caller meanwhile
            if loaded is not None:
                return loaded
        if not topic.is_persistent:
            if not create:
                raise TopicNotFoundError(f"Topic {topic.full_name} does not exist")
            self.check_topics_quota(topic.namespace_name, 1)
            non_persistent = NonPersistentTopic(
                topic,
                subscription_options=self._subscription_options,
                max_producers=self.max_producers_per_topic,
            )
            self.topics[topic.full_name] = non_persistent
            log.info("loaded non-persistent topic %s", topic.full_name)
            return non_persistent
        name = topic.full_name
        pending = self._loading.get(name)
        if pending is None:
            if not create and not self.factory.exists(name):
                raise TopicNotFoundError(f"Topic {name} does not exist")
            if not self.factory.exists(name):
                if self.read_only is not None:
                    raise ServiceNotReadyError(self.read_only)
                if not self._is_declared_partition(topic):  # those were counted with their partitioned topic
                    self.check_topics_quota(topic.namespace_name, 1)
            pending = asyncio.create_task(self._load_topic(topic), name=f"load-topic:{name}")
            self._loading[name] = pending
            pending.add_done_callback(functools.partial(self._load_done, name))
        # shielded: a waiter that is cancelled (its connection closed) does not abort a load others wait for
        return await asyncio.shield(pending)

    def _load_done(self, name: str, task: asyncio.Task[PersistentTopic]) -> None:
        if self._loading.get(name) is task:
            del self._loading[name]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone

    async def _load_topic(self, topic: TopicName, after: Awaitable[None] | None = None) -> PersistentTopic:
        """Open the managed ledger of ``topic`` (once ``after`` is done) and register the loaded topic (the one
        load task per name)."""
        if after is not None:
            await after
        ledger = await self.factory.open(topic.full_name)
        loaded = PersistentTopic(
            topic,
            ledger,
            subscription_options=self._subscription_options,
            max_producers=self.max_producers_per_topic,
            dedup_entries_interval=self._dedup_entries_interval,
            dedup_max_producers=self._dedup_max_producers,
        )
        self._apply_sync_policies(loaded)
        loaded.compacted_view = await load_compacted_view(self.factory, ledger)
        if self.deduplication_enabled(topic):
            await loaded.dedup.enable()
        self.topics[topic.full_name] = loaded
        log.info("loaded topic %s", topic.full_name)
        return loaded

    async def unload_topic(self, topic: TopicName) -> None:
        """Pulsar ``unloadTopic``: disconnect the loaded ``topic``'s clients (they reconnect), close its ledger and
        load it afresh (requests wait for that). No-op when not loaded; TopicNotFoundError if not persistent."""
        name = topic.full_name
        loaded = self.topics.get(name)
        if not isinstance(loaded, PersistentTopic):
            if loaded is not None or not self.factory.exists(name):
                raise TopicNotFoundError(f"Topic {name} does not exist or is not persistent")
            return
        del self.topics[name]
        loaded.disconnect_clients()
        reload = self._load_topic(topic, after=self.factory.close_ledger(name))
        self._loading[name] = load = asyncio.create_task(reload, name=f"unload-topic:{name}")
        load.add_done_callback(functools.partial(self._load_done, name))
        await asyncio.shield(load)

    async def delete_topic(self, topic: TopicName, *, force: bool = False) -> None:
        """Pulsar ``deleteTopic``: :func:`quasar.broker.topic_deletion.delete_topic` (holds the load slot)."""
        await topic_deletion.delete_topic(self, self._loading, topic, force=force)

    async def delete_partitioned_topic(self, topic: TopicName, *, force: bool = False) -> None:
        """Pulsar ``deletePartitionedTopic``: :func:`quasar.broker.topic_deletion.delete_partitioned_topic`."""
        await topic_deletion.delete_partitioned_topic(self, self._loading, topic, force=force)

    def _is_declared_partition(self, topic: TopicName) -> bool:
        """``topic`` is a partition of a partitioned topic created through the admin API (a ``x-partition-3``
        with no partitioned ``x`` is a topic of its own, counted like any other)."""
        if topic.partition_index < 0:
            return False
        return (
            self.resources.partitions(TopicName.parse(topic.partitioned_topic_name)) > topic.partition_index
        )

    def count_topics(self, namespace: str) -> int:
        """Topics of ``namespace`` as ``max_topics_per_namespace`` counts them (Pulsar: every partition of a
        partitioned topic is one): non-partitioned persistent and loaded non-persistent topics, plus the
        partition count of each partitioned topic."""
        assert isinstance(self.topics, TopicRegistry)
        return count_namespace_topics(
            namespace, self.factory, self.topics, self.resources.partitioned_topics, self.max_num_partitions
        )

    def check_topics_quota(self, namespace: str, adding: int) -> None:
        """Raise NotAllowedError (binary NotAllowed, admin 412) when ``adding`` more topics would pass
        ``max_topics_per_namespace`` (0 = unlimited), with Pulsar's message."""
        limit = self.max_topics_per_namespace
        if limit and self.count_topics(namespace) + adding > limit:
            raise NotAllowedError(f"Exceed maximum number of topics in namespace {namespace} (limit {limit})")

    def check_subscription_limit(self, topic: Any, name: str) -> None:
        """Raise NotAllowedError when subscription ``name`` would be one more than ``max_subscriptions_per_topic``
        (Pulsar ``checkMaxSubscriptionsPerTopicExceed``; readers' subscriptions count too)."""
        limit = self.max_subscriptions_per_topic
        if limit and name not in topic.subscriptions and len(topic.subscriptions) >= limit:
            raise NotAllowedError(
                f"Exceed the maximum number of subscriptions of the topic {topic.name} ({limit})"
            )

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
    def _topic_policies(self, topic: TopicName) -> dict[str, Any]:
        policies = self.resources.topic_policies.get(topic.full_name, {})
        return policies if isinstance(policies, dict) else {}

    def namespace_policy(self, namespace: str, key: str) -> Any:
        """The namespace policy ``key`` (e.g. ``deduplicationEnabled``), None when unset. Raises
        NamespaceNotFoundError."""
        policies = self.resources.namespaces.get(namespace)
        if policies is None:
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
        return policies.get(key) if isinstance(policies, dict) else None  # ill-typed from before: no policy

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
        if not self.namespace_exists(namespace):
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
        await self.resources.set_namespace_policy(namespace, key, value)
        await self._apply_policies(lambda t: t.namespace_name == namespace)

    async def set_topic_policy(self, topic: TopicName, key: str, value: Any) -> None:
        """Set (or with None remove) a topic-level policy (for a partitioned topic: all its partitions) and
        apply it. Raises NamespaceNotFoundError."""
        self._check_namespace(topic)
        await self.resources.set_topic_policy(topic, key, value)
        base = topic.full_name
        await self._apply_policies(
            lambda t: t.full_name == base or (t.partition_index >= 0 and t.partitioned_topic_name == base)
        )

    def _refresh_policies(self) -> None:
        """Another broker changed a policy: apply the effective policies to every loaded topic again (one
        owned task at a time; a change notified while one runs starts another after it)."""
        previous = self._policy_refresh

        async def refresh() -> None:
            if previous is not None and not previous.done():
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await self._apply_policies(lambda _: True)
            except QuasarError:
                log.exception("policies changed elsewhere could not be applied")

        self._policy_refresh = asyncio.get_running_loop().create_task(refresh(), name="apply-remote-policies")

    async def _apply_policies(self, selects: Any) -> None:
        for loaded in list(self.topics.values()):
            if isinstance(loaded, PersistentTopic) and selects(loaded.name):
                self._apply_sync_policies(loaded)
                await loaded.set_deduplication(self.deduplication_enabled(loaded.name))

    def _checked_policy(self, topic: TopicName, key: str, parse: Callable[[Any], Any], default: Any) -> Any:
        """The effective policy ``key`` through ``parse``; a stored value ``parse`` refuses (ill-typed, written
        before policies were checked on write) is logged and ``default`` used, so the topic still loads."""
        value = self.effective_policy(topic, key, None)
        if value is None or value == {}:
            return default
        try:
            return parse(value)
        except (ValueError, TypeError) as exc:
            log.warning("%s: stored policy %s is invalid, using the default: %s", topic.full_name, key, exc)
            return default

    def _apply_sync_policies(self, loaded: PersistentTopic) -> None:
        """Retention, message TTL and backlog quota of ``loaded`` from the effective policies."""
        defaults = self.defaults
        retention = self._checked_policy(loaded.name, RETENTION, parse_retention, {})
        time_min = retention.get("retentionTimeInMinutes", defaults.retention_time_minutes)
        size_mb = retention.get("retentionSizeInMB", defaults.retention_size_mb)
        loaded.ledger.set_retention(
            -1 if time_min < 0 else time_min * 60_000, -1 if size_mb < 0 else size_mb * 1024 * 1024
        )
        loaded.message_ttl_s = self._checked_policy(loaded.name, MESSAGE_TTL, _ttl, defaults.message_ttl_s)
        loaded.backlog_quota = self._checked_policy(
            loaded.name, BACKLOG_QUOTA, BacklogQuota.from_json, defaults.backlog_quota
        )

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
