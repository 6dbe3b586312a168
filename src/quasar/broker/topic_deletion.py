"""Deleting a topic (Pulsar ``PersistentTopicsBase.internalDeleteTopic`` -> ``PersistentTopic.delete``, and
``internalDeletePartitionedTopic``).

A deleted persistent topic loses its managed ledger (ledger table, every cursor, the deduplication state kept
in its cursor, the entries: ``ManagedLedgerFactory.delete``), its compacted view, its topic-level policies and,
for a topic that is not a partition, its schema. A topic created later under the same name starts empty: the
store never reuses the deleted queue's offsets (``quasar.storage.queue_deletion``).

- Without ``force`` a topic with a connected producer or consumer is refused (412 "Topic has active
  producers/subscriptions", Pulsar's TopicBusyException); subscriptions without consumers go with the topic.
  With ``force`` every producer and consumer is disconnected first (Pulsar ``deleteForcefully``); a client
  that reconnects creates the topic afresh where auto-creation allows it, as with Pulsar.
- The topic's load slot (the service's one pending load per name) is held by the deletion, so a producer,
  consumer or lookup arriving meanwhile waits for it and then gets ServiceNotReady, which the client retries.
- A partitioned topic is deleted through ``delete_partitioned_topic``: every partition (all checked for
  clients first, so a refusal deletes nothing), then its partitioned metadata, schema and policies. In a
  cluster, a partition served by another broker is refused (412, naming that broker): its data lives there,
  so its ``DELETE`` goes there (the admin API redirects a single topic's ``DELETE`` to its owner).

Errors: ``NamespaceNotFoundError`` / ``TopicNotFoundError`` (404), ``NotAllowedError`` (412: busy, or the base
name of a partitioned topic given to ``delete_topic``), ``ServiceNotReadyError`` (503: another load or deletion
of the name holds the slot), ``ManagedLedgerError`` / ``MetadataStoreError`` from the layers below.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Protocol

from quasar.broker.compaction.view import compacted_ledger_name
from quasar.broker.errors import (
    NamespaceNotFoundError,
    NotAllowedError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from quasar.broker.resources import BrokerResources
from quasar.broker.schema import SchemaRegistry, schema_id
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.protocol import TopicName


class BrokerService(Protocol):
    """What deleting a topic needs of :class:`quasar.broker.broker_service.BrokerService` (which calls it)."""

    topics: dict[str, Any]
    factory: ManagedLedgerFactory
    resources: BrokerResources
    schemas: SchemaRegistry

    def namespace_exists(self, namespace: str) -> bool: ...
    def partitions(self, topic: TopicName) -> int: ...
    def owner_web_url(self, topic: TopicName, *, tls: bool = False) -> str | None: ...


log = logging.getLogger(__name__)

__all__ = ["TopicDeletedError", "delete_partitioned_topic", "delete_topic"]


class TopicDeletedError(ServiceNotReadyError):
    """The topic was deleted while this request waited to load it: retry (binary ServiceNotReady; the retry
    creates the topic afresh where auto-creation allows)."""


def _busy(loaded: Any) -> bool:
    return bool(loaded.producers) or any(s.consumers for s in loaded.subscriptions.values())


def _check_namespace(service: BrokerService, topic: TopicName) -> None:
    if not service.namespace_exists(topic.namespace_name):
        raise NamespaceNotFoundError(f"Namespace {topic.namespace_name} does not exist")


async def _settled(loading: dict[str, asyncio.Task[Any]], name: str) -> None:
    """Wait for a load, unload or deletion of ``name`` in progress; ServiceNotReadyError when another one took
    the slot meanwhile."""
    pending = loading.get(name)
    if pending is not None:
        await asyncio.wait([pending])
        if loading.get(name) is not None:
            raise ServiceNotReadyError(f"Topic {name} is being loaded or deleted; try again")


def _exists(service: BrokerService, topic: TopicName) -> bool:
    name = topic.full_name
    return name in service.topics or (topic.is_persistent and service.factory.exists(name))


async def delete_topic(
    service: BrokerService, loading: dict[str, asyncio.Task[Any]], topic: TopicName, *, force: bool
) -> None:
    """Delete the non-partitioned topic (or single partition) ``topic`` (module docstring); ``loading`` is the
    service's pending loads by name."""
    _check_namespace(service, topic)
    name = topic.full_name
    if service.partitions(topic) > 0:
        raise NotAllowedError(f"{name} is a partitioned topic: delete it with delete-partitioned-topic")
    await _settled(loading, name)
    if not _exists(service, topic):
        raise TopicNotFoundError(f"Topic {name} not found")
    loaded = service.topics.get(name)
    if loaded is not None and not force and _busy(loaded):
        raise NotAllowedError("Topic has active producers/subscriptions")
    await _run_holding_slot(service, loading, topic)


async def delete_partitioned_topic(
    service: BrokerService, loading: dict[str, asyncio.Task[Any]], topic: TopicName, *, force: bool
) -> None:
    """Delete partitioned topic ``topic`` (its base name): its partitions, then its metadata (module
    docstring). TopicNotFoundError (404 "Partitioned topic does not exist") when it is not one."""
    _check_namespace(service, topic)
    count = service.partitions(topic)
    if count <= 0:
        raise TopicNotFoundError("Partitioned topic does not exist")
    partitions = [TopicName.parse(f"{topic.full_name}-partition-{i}") for i in range(count)]
    for partition in partitions:
        owner = service.owner_web_url(partition)
        if owner is not None:  # a cluster: each partition's data is on the broker serving it
            raise NotAllowedError(
                f"{partition.full_name} is served by {owner}: delete the partitions there first"
                f" (DELETE .../{partition.local_name} on that broker), then the partitioned topic"
            )
        await _settled(loading, partition.full_name)
        loaded = service.topics.get(partition.full_name)
        if loaded is not None and not force and _busy(loaded):
            raise NotAllowedError("Topic has active producers/subscriptions")
    for partition in partitions:
        if _exists(service, partition):
            await _run_holding_slot(service, loading, partition)
    await service.resources.delete_partitioned_topic(topic)
    if topic.is_persistent:
        await service.schemas.delete(schema_id(topic), force=True)
    await service.resources.delete_topic_policies(topic)
    log.info("deleted partitioned topic %s (%d partitions)", topic.full_name, count)


async def _run_holding_slot(
    service: BrokerService, loading: dict[str, asyncio.Task[Any]], topic: TopicName
) -> None:
    name = topic.full_name
    if loading.get(name) is not None:
        raise ServiceNotReadyError(f"Topic {name} is being loaded or deleted; try again")
    task = asyncio.create_task(_delete(service, topic), name=f"delete-topic:{name}")
    loading[name] = task
    task.add_done_callback(functools.partial(_release, loading, name))
    try:
        await asyncio.shield(task)  # a cancelled admin request does not stop a deletion half-way
    except TopicDeletedError:
        pass


def _release(loading: dict[str, asyncio.Task[Any]], name: str, task: asyncio.Task[Any]) -> None:
    if loading.get(name) is task:
        del loading[name]
    if not task.cancelled():
        task.exception()  # retrieved: the waiters that care re-raise it


async def _delete(service: BrokerService, topic: TopicName) -> Any:
    """The deletion itself, as the topic's load task: raises TopicDeletedError at the end so the requests
    that waited for the slot retry."""
    name = topic.full_name
    loaded = service.topics.pop(name, None)
    if loaded is not None:
        for producer in list(loaded.producers.values()):
            producer.fence()  # CLOSE_PRODUCER: the client reconnects (and creates the topic afresh)
        for subscription in list(loaded.subscriptions.values()):
            subscription.close_consumers()  # CLOSE_CONSUMER: the client reconnects
        loaded.close()
    if topic.is_persistent:
        await service.factory.delete(compacted_ledger_name(name))
        await service.factory.delete(name)
        if (
            topic.partition_index < 0
            or service.partitions(TopicName.parse(topic.partitioned_topic_name)) == 0
        ):
            await service.schemas.delete(schema_id(topic), force=True)
    await service.resources.delete_topic_policies(topic)
    log.info("deleted topic %s", name)
    raise TopicDeletedError(f"Topic {name} was deleted; try again")
