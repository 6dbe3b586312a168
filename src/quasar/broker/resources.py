"""BrokerResources: the broker's admin metadata (tenants, namespace policies, partitioned topics, topic
policies) held in memory and written through to the metadata store (Pulsar ``PulsarResources``:
``TenantResources``, ``NamespaceResources``, ``NamespaceResources.PartitionedTopicResources``,
``TopicPoliciesService``).

Everything is loaded once by :meth:`BrokerResources.load` before the broker serves; after that every read is
a dictionary look-up (LOOKUP, PARTITIONED_METADATA and policy checks never wait for storage), and every
change is one awaited metadata write, applied to memory only once it is durable. Writes use the version
last seen (compare-and-set), so a concurrent writer elsewhere makes the write fail with
``BadVersionError`` instead of being lost.

Paths (every name is ONE segment through ``encode_segment``; values are JSON)::

    /admin/tenants/<tenant>                                      TenantInfo {"adminRoles", "allowedClusters"}
    /admin/policies/<tenant>/<namespace>                         namespace policies (dict)
    /admin/partitioned-topics/<domain>/<tenant>/<namespace>/<topic>   {"partitions": n}
    /admin/topic-policies/<domain>/<tenant>/<namespace>/<topic>       topic policies (dict)
    /broker/boot-count                                           int, +1 per start (producer names)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from quasar.broker.metadata_tree import PathFollower, join_path, read_tree, split_path
from quasar.metadata import (
    AlreadyExistsError,
    BadVersionError,
    GetResult,
    MetadataStore,
    decode_json,
    encode_json,
    encode_segment,
)
from quasar.protocol import TopicName
from quasar.protocol.topic_name import PARTITION_SUFFIX

__all__ = [
    "BOOT_COUNT_PATH",
    "PARTITIONED_ROOT",
    "POLICIES_ROOT",
    "TENANTS_ROOT",
    "TOPIC_POLICIES_ROOT",
    "BrokerResources",
    "declared_partition",
    "namespace_path",
    "partitioned_topic_path",
    "tenant_path",
    "topic_policies_path",
]

TENANTS_ROOT = "/admin/tenants"
POLICIES_ROOT = "/admin/policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"
BOOT_COUNT_PATH = "/broker/boot-count"
_BOOT_COUNT_ATTEMPTS = 20


def tenant_path(tenant: str) -> str:
    """Metadata path of tenant ``tenant``'s info (TenantInfo JSON)."""
    return f"{TENANTS_ROOT}/{encode_segment(tenant)}"


def namespace_path(namespace: str) -> str:
    """``namespace`` is ``tenant/ns``."""
    tenant, _, local = namespace.partition("/")
    return f"{POLICIES_ROOT}/{encode_segment(tenant)}/{encode_segment(local)}"


def _topic_path(root: str, topic: TopicName) -> str:
    return join_path(root, topic.domain, topic.tenant, topic.namespace, topic.local_name)


def partitioned_topic_path(topic: TopicName) -> str:
    """Metadata path of ``topic``'s partitioned-topic metadata (``{"partitions": n}``), one segment per name
    part: ``/admin/partitioned-topics/<domain>/<tenant>/<ns>/<topic>``."""
    return _topic_path(PARTITIONED_ROOT, topic)


def topic_policies_path(topic: TopicName) -> str:
    """Metadata path of ``topic``'s topic-level policies (JSON object), laid out like
    :func:`partitioned_topic_path`."""
    return _topic_path(TOPIC_POLICIES_ROOT, topic)


def declared_partition(name: str, partitioned: dict[str, int]) -> bool:
    """``name`` is ``<base>-partition-<i>`` with ``base`` a partitioned topic of more than ``i`` partitions."""
    cut = name.rfind(PARTITION_SUFFIX)
    index = name[cut + len(PARTITION_SUFFIX) :]
    return cut > 0 and index.isascii() and index.isdigit() and int(index) < partitioned.get(name[:cut], 0)


def _updated(policies: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    changed = dict(policies)
    if value is None:
        changed.pop(key, None)
    else:
        changed[key] = value
    return changed


def _set(table: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = dict(value) if isinstance(value, dict) else value


class BrokerResources:
    """The admin metadata of one broker, in memory, written through ``metadata`` (see the module docstring).

    Read methods are synchronous look-ups; write methods are coroutines that raise the metadata port's
    errors (``AlreadyExistsError`` when a create races another, ``BadVersionError`` when a stored value
    changed elsewhere, ``MetadataStoreError`` on a storage failure) and leave memory unchanged then.
    """

    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self.tenants: dict[str, dict[str, Any]] = {}
        """Tenant -> TenantInfo."""
        self.namespaces: dict[str, dict[str, Any]] = {}
        """``tenant/ns`` -> policies."""
        self.partitioned: dict[str, dict[str, int]] = {}
        """``domain://tenant/ns`` -> {partitioned topic full name -> partition count}."""
        self.topic_policies: dict[str, dict[str, Any]] = {}
        """Topic full name -> topic-level policies (only topics that have some)."""
        self._versions: dict[str, int] = {}  # path -> version last read or written
        self._lock = asyncio.Lock()
        self._followers: list[PathFollower] = []
        self.on_policies_changed: Callable[[], None] | None = None
        """Called after a namespace or topic policy changed through another store (another broker)."""

    # -- loading ---------------------------------------------------------------------------------------------

    async def _tree(self, root: str, depth: int) -> dict[tuple[str, ...], Any]:
        """Every JSON value exactly ``depth`` levels below ``root``, keyed by the decoded segments."""
        tree: dict[tuple[str, ...], Any] = {}
        for names, result in (await read_tree(self._metadata, root, depth)).items():
            path = join_path(root, *names)
            tree[names] = decode_json(path, result.value)
            self._versions[path] = result.stat.version
        return tree

    async def load(self) -> None:
        """Read every tenant, namespace, partitioned topic and topic policy (replacing what is in memory)."""
        self._versions.clear()
        self.tenants = {tenant: dict(info) for (tenant,), info in (await self._tree(TENANTS_ROOT, 1)).items()}
        self.namespaces = {
            f"{tenant}/{ns}": dict(policies)
            for (tenant, ns), policies in (await self._tree(POLICIES_ROOT, 2)).items()
        }
        self.partitioned = {}
        for (domain, tenant, ns, local), value in (await self._tree(PARTITIONED_ROOT, 4)).items():
            namespace = f"{domain}://{tenant}/{ns}"
            self.partitioned.setdefault(namespace, {})[f"{namespace}/{local}"] = int(value["partitions"])
        self.topic_policies = {
            f"{domain}://{tenant}/{ns}/{local}": dict(policies)
            for (domain, tenant, ns, local), policies in (await self._tree(TOPIC_POLICIES_ROOT, 4)).items()
        }

    # -- following other brokers' changes (a shared store: etcd) ----------------------------------------------

    def follow(self) -> None:
        """Apply changes made through other stores (other brokers of the cluster) as they are notified: each
        changed tenant, namespace, partitioned topic or topic policy path is re-read and replaces (or removes)
        its entry in memory. Call once after :meth:`load`; :meth:`stop_following` ends it."""
        self._followers = [
            PathFollower(self._metadata, "/admin", self._apply_change, resync=self.load),
        ]
        for follower in self._followers:
            follower.start()

    async def stop_following(self) -> None:
        """Stop applying remote changes (the broker is closing)."""
        for follower in self._followers:
            await follower.stop()

    def resync(self) -> None:
        """Reload everything (after the store's session was re-established: changes may have been missed)."""
        for follower in self._followers:
            follower.request_resync()

    def _apply_change(self, path: str, result: GetResult | None) -> None:
        value = None if result is None else decode_json(path, result.value)
        if result is None:
            self._versions.pop(path, None)
        else:
            self._versions[path] = result.stat.version
        if (names := split_path(TENANTS_ROOT, path)) is not None and len(names) == 1:
            _set(self.tenants, names[0], value)
        elif (names := split_path(POLICIES_ROOT, path)) is not None and len(names) == 2:
            _set(self.namespaces, f"{names[0]}/{names[1]}", value)
            self._policies_changed()
        elif (names := split_path(PARTITIONED_ROOT, path)) is not None and len(names) == 4:
            domain, tenant, ns, local = names
            namespace = f"{domain}://{tenant}/{ns}"
            partitions = None if value is None else int(value["partitions"])
            _set(self.partitioned.setdefault(namespace, {}), f"{namespace}/{local}", partitions)
        elif (names := split_path(TOPIC_POLICIES_ROOT, path)) is not None and len(names) == 4:
            domain, tenant, ns, local = names
            _set(self.topic_policies, f"{domain}://{tenant}/{ns}/{local}", value)
            self._policies_changed()

    def _policies_changed(self) -> None:
        if self.on_policies_changed is not None:
            self.on_policies_changed()

    async def next_boot_count(self) -> int:
        """Increment and return the boot counter (1 at the first start). In a cluster the brokers share it
        (unique producer names across the cluster, as Pulsar's DistributedIdGenerator), so a
        compare-and-set that loses to a broker starting at the same moment reads the counter again and
        retries (at most ``_BOOT_COUNT_ATTEMPTS`` times)."""
        for _ in range(_BOOT_COUNT_ATTEMPTS - 1):
            try:
                return await self._increment_boot_count()
            except (AlreadyExistsError, BadVersionError):
                await asyncio.sleep(random.uniform(0.0, 0.05))
        return await self._increment_boot_count()

    async def _increment_boot_count(self) -> int:
        stored = await self._metadata.get(BOOT_COUNT_PATH)
        boot = 1 if stored is None else int(decode_json(BOOT_COUNT_PATH, stored.value)) + 1
        await self._metadata.put(
            BOOT_COUNT_PATH, encode_json(boot), -1 if stored is None else stored.stat.version
        )
        return boot

    # -- writing through -------------------------------------------------------------------------------------

    async def _write(self, path: str, value: Any, *, create: bool = False) -> None:
        expected = -1 if create else self._versions.get(path, -1)
        stat = await self._metadata.put(path, encode_json(value), expected)
        self._versions[path] = stat.version

    async def _remove(self, path: str) -> None:
        version = self._versions.pop(path, None)
        if version is not None:
            await self._metadata.delete(path, version)

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        """Create ``tenant`` (``AlreadyExistsError`` when it exists in the store)."""
        await self._write(tenant_path(tenant), info, create=True)
        self.tenants[tenant] = dict(info)

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        """Create ``tenant/ns`` (``AlreadyExistsError`` when it exists in the store)."""
        await self._write(namespace_path(namespace), policies, create=True)
        self.namespaces[namespace] = dict(policies)

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        """Replace the TenantInfo of the existing ``tenant`` (``BadVersionError`` when it changed elsewhere)."""
        await self._write(tenant_path(tenant), info)
        self.tenants[tenant] = dict(info)

    async def delete_tenant(self, tenant: str) -> None:
        """Remove ``tenant`` (the caller checked that it has no namespace)."""
        path = tenant_path(tenant)
        await self._metadata.delete(path, self._versions.get(path))
        self._versions.pop(path, None)
        self.tenants.pop(tenant, None)

    async def delete_namespace(self, namespace: str) -> None:
        """Remove ``tenant/ns`` and its policies (the caller checked that it has no topic)."""
        path = namespace_path(namespace)
        await self._metadata.delete(path, self._versions.get(path))
        self._versions.pop(path, None)
        self.namespaces.pop(namespace, None)

    async def set_namespace_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (``value`` None: remove) policy ``key`` of the existing namespace ``namespace``."""
        async with self._lock:  # read-modify-write: one at a time
            policies = _updated(self.namespaces[namespace], key, value)
            await self._write(namespace_path(namespace), policies)
            self.namespaces[namespace] = policies

    async def update_namespace_policy(self, namespace: str, key: str, update: Callable[[Any], Any]) -> Any:
        """Replace policy ``key`` of ``namespace`` by ``update(current value or None)`` (None: remove it), as
        one read-modify-write under the lock (concurrent grants do not lose each other); returns the new value.
        Raises KeyError for an unknown namespace."""
        async with self._lock:
            value = update(self.namespaces[namespace].get(key))
            policies = _updated(self.namespaces[namespace], key, value)
            await self._write(namespace_path(namespace), policies)
            self.namespaces[namespace] = policies
            return value

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        """Record ``topic`` with ``partitions`` partitions (create-only: raises ``AlreadyExistsError`` when the
        path exists, other ``MetadataStoreError`` on failure; memory changes only after the durable write)."""
        await self._write(partitioned_topic_path(topic), {"partitions": partitions}, create=True)
        namespace = f"{topic.domain}://{topic.namespace_name}"
        self.partitioned.setdefault(namespace, {})[topic.full_name] = partitions

    async def delete_partitioned_topic(self, topic: TopicName) -> None:
        """Remove ``topic``'s partitioned-topic metadata (the caller deleted its partitions first)."""
        path = partitioned_topic_path(topic)
        self._versions.pop(path, None)
        await self._metadata.delete_recursive(path)  # whoever wrote it last (another broker of the cluster)
        self.partitioned.get(f"{topic.domain}://{topic.namespace_name}", {}).pop(topic.full_name, None)

    async def delete_topic_policies(self, topic: TopicName) -> None:
        """Remove every topic-level policy of ``topic`` (a deleted topic)."""
        async with self._lock:
            path = topic_policies_path(topic)
            self._versions.pop(path, None)
            await self._metadata.delete_recursive(path)
            self.topic_policies.pop(topic.full_name, None)

    async def set_topic_policy(self, topic: TopicName, key: str, value: Any) -> None:
        """Set (``value`` None: remove) topic-level policy ``key`` of ``topic``; the path is deleted when no
        policy is left."""
        async with self._lock:
            path = topic_policies_path(topic)
            policies = _updated(self.topic_policies.get(topic.full_name, {}), key, value)
            if policies:
                await self._write(path, policies)
                self.topic_policies[topic.full_name] = policies
            else:
                await self._remove(path)
                self.topic_policies.pop(topic.full_name, None)

    # -- look-ups --------------------------------------------------------------------------------------------

    def partitions(self, topic: TopicName) -> int:
        """Partition count of ``topic`` (0: not a partitioned topic)."""
        return self.partitioned.get(f"{topic.domain}://{topic.namespace_name}", {}).get(topic.full_name, 0)

    def partitioned_topics(self, namespace: str, domain: str) -> dict[str, int]:
        """The partitioned topics of ``tenant/ns`` in ``domain``, full name -> partition count."""
        return dict(self.partitioned.get(f"{domain}://{namespace}", {}))
