"""The schema registry: versions of each topic's schema in the metadata store, and the decisions PRODUCER,
SUBSCRIBE, GET_OR_CREATE_SCHEMA and the admin API take with them (Pulsar ``SchemaRegistryServiceImpl`` and
``AbstractTopic.addSchema``; reference/security.md §4).

Schema id: ``tenant/namespace/topic`` of the partitioned topic's base name (Pulsar ``TopicName.getSchemaName``),
so every partition, and the persistent and non-persistent topic of one name, share one schema. Versions are
0, 1, 2, ... in the metadata store, one path each (values JSON)::

    /schemas/<tenant>/<namespace>/<topic>/<version, 10 digits>
        {"type": "AVRO", "data": base64, "properties": {..}, "timestamp": ms, "deleted": false}

A new version is written create-only, so two brokers (or two requests) adding a version at once cannot both
take the same number: the loser reads the versions again and decides anew. Deleting a schema writes a version
marked deleted (type NONE, no data), as Pulsar does; only the versions after the last deleted one are live:
they are the ones compared and checked, and the only ones ``get`` returns by number. ``delete(force=True)``
removes every version (the numbering starts again at 0). Every method is a coroutine over the async metadata
port; nothing blocks the event loop.

Namespace policies (Pulsar's ``Policies`` field names) over the broker defaults (:class:`SchemaDefaults`):
``schema_compatibility_strategy`` (``UNDEFINED``/unset: the broker's), ``is_allow_auto_update_schema`` (a
producer may add a new compatible version; when false only an identical existing version is accepted) and
``schema_validation_enforced`` (producers without a schema are refused on a topic that has one).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from quasar.broker.schema.compatibility import (
    SchemaCompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    check_compatible,
    validate_schema_data,
)
from quasar.broker.schema.errors import IncompatibleSchemaError
from quasar.metadata import AlreadyExistsError, MetadataStore, decode_json, encode_json, encode_segment
from quasar.protocol import TopicName

__all__ = [
    "IS_ALLOW_AUTO_UPDATE_SCHEMA",
    "SCHEMAS_ROOT",
    "SCHEMA_COMPATIBILITY_STRATEGY",
    "SCHEMA_VALIDATION_ENFORCED",
    "SchemaDefaults",
    "SchemaRegistry",
    "StoredSchema",
    "schema_id",
]

log = logging.getLogger(__name__)

SCHEMAS_ROOT = "/schemas"
SCHEMA_COMPATIBILITY_STRATEGY = "schema_compatibility_strategy"
IS_ALLOW_AUTO_UPDATE_SCHEMA = "is_allow_auto_update_schema"
SCHEMA_VALIDATION_ENFORCED = "schema_validation_enforced"
_PUT_ATTEMPTS = 10


def schema_id(topic: TopicName) -> str:
    """``tenant/namespace/topic`` of ``topic``'s partitioned-topic base name (Pulsar's schema id)."""
    base = TopicName.parse(topic.partitioned_topic_name) if topic.partition_index >= 0 else topic
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


def _id_path(sid: str) -> str:
    tenant, namespace, local = sid.split("/", 2)
    return f"{SCHEMAS_ROOT}/{encode_segment(tenant)}/{encode_segment(namespace)}/{encode_segment(local)}"


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One version of a topic's schema; ``timestamp_ms`` is when it was added (ms since the epoch)."""

    version: int
    info: SchemaInfo
    timestamp_ms: int
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.info.type.name,
            "data": base64.b64encode(self.info.data).decode(),
            "properties": dict(self.info.properties),
            "timestamp": self.timestamp_ms,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, version: int, value: Mapping[str, Any]) -> StoredSchema:
        info = SchemaInfo(
            SchemaType[value["type"]], base64.b64decode(value["data"]), dict(value.get("properties") or {})
        )
        return cls(version, info, int(value["timestamp"]), bool(value.get("deleted", False)))


@dataclass(frozen=True, slots=True)
class SchemaDefaults:
    """Broker.conf ``schemaCompatibilityStrategy`` (FULL), ``isAllowAutoUpdateSchemaEnabled`` (true) and
    ``isSchemaValidationEnforced`` (false): what applies when a namespace does not set its own."""

    compatibility_strategy: SchemaCompatibilityStrategy = SchemaCompatibilityStrategy.FULL
    allow_auto_update: bool = True
    validation_enforced: bool = False


class SchemaRegistry:
    """Schemas of every topic, over ``metadata``; ``namespace_policies(namespace)`` gives the policies dict of
    ``tenant/ns`` (or None). Methods raise IncompatibleSchemaError / InvalidSchemaDataError as documented and
    the metadata port's MetadataStoreError on a storage failure."""

    def __init__(
        self,
        metadata: MetadataStore,
        namespace_policies: Callable[[str], Mapping[str, Any] | None],
        defaults: SchemaDefaults | None = None,
    ) -> None:
        self._metadata = metadata
        self._policies = namespace_policies
        self.defaults = defaults or SchemaDefaults()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # ------------------------------------------------------------------ policies
    def _policy(self, namespace: str, key: str) -> Any:
        return (self._policies(namespace) or {}).get(key)

    def compatibility_strategy(self, namespace: str) -> SchemaCompatibilityStrategy:
        """The strategy in force in ``tenant/ns``: its policy, or the broker's when unset or UNDEFINED."""
        value = self._policy(namespace, SCHEMA_COMPATIBILITY_STRATEGY)
        if value is not None:
            try:
                strategy = SchemaCompatibilityStrategy.parse(value)
            except ValueError:
                log.warning(
                    "namespace %s: ignoring invalid %s %r", namespace, SCHEMA_COMPATIBILITY_STRATEGY, value
                )
            else:
                if strategy != SchemaCompatibilityStrategy.UNDEFINED:
                    return strategy
        return self.defaults.compatibility_strategy

    def allow_auto_update(self, namespace: str) -> bool:
        value = self._policy(namespace, IS_ALLOW_AUTO_UPDATE_SCHEMA)
        return self.defaults.allow_auto_update if value is None else bool(value)

    def validation_enforced(self, namespace: str) -> bool:
        value = self._policy(namespace, SCHEMA_VALIDATION_ENFORCED)
        return self.defaults.validation_enforced if value is None else bool(value)

    # ------------------------------------------------------------------ reading
    async def all_versions(self, sid: str) -> list[StoredSchema]:
        """Every stored version of ``sid``, deleted markers included, oldest first."""
        path = _id_path(sid)
        stored: list[StoredSchema] = []
        for child in await self._metadata.get_children(path):
            if not child.isdigit():
                continue
            result = await self._metadata.get(f"{path}/{child}")
            if result is not None:
                stored.append(StoredSchema.from_json(int(child), decode_json(path, result.value)))
        stored.sort(key=lambda s: s.version)
        return stored

    async def live_versions(self, sid: str) -> list[StoredSchema]:
        """The versions after the last deleted one, oldest first (Pulsar ``trimDeletedSchemaAndGetList``)."""
        return _trim(await self.all_versions(sid))

    async def get(self, sid: str, version: int | None = None) -> StoredSchema | None:
        """Version ``version`` of ``sid`` when it is live, or (``None``) the latest stored version, which may be
        a deleted marker; None when there is none."""
        if version is None:
            versions = await self.all_versions(sid)
            return versions[-1] if versions else None
        return next((s for s in await self.live_versions(sid) if s.version == version), None)

    async def has_schema(self, sid: str) -> bool:
        """Whether ``sid`` has a live schema (its latest version is not a deleted marker)."""
        latest = await self.get(sid)
        return latest is not None and not latest.deleted

    # ------------------------------------------------------------------ writing
    def _lock(self, sid: str) -> asyncio.Lock:
        lock = self._locks.get(sid)
        if lock is None:
            lock = self._locks[sid] = asyncio.Lock()
        return lock

    async def _append(self, sid: str, after: int, stored: dict[str, Any]) -> int:
        """Write version ``after + 1`` create-only; raises AlreadyExistsError when another writer took it."""
        version = after + 1
        await self._metadata.put(f"{_id_path(sid)}/{version:010d}", encode_json(stored), -1)
        return version

    async def put_if_absent(
        self, sid: str, info: SchemaInfo, strategy: SchemaCompatibilityStrategy, *, allow_new: bool = True
    ) -> int:
        """The version of ``info`` in ``sid``: an identical live version (same type and data) if there is one,
        else a new version once ``info`` passed the check against the live versions under ``strategy``
        (Pulsar ``putSchemaIfAbsent``). ``allow_new`` False (auto update disabled): no new version, refused
        with IncompatibleSchemaError "Schema not found and schema auto updating is disabled."."""
        if strategy == SchemaCompatibilityStrategy.UNDEFINED:
            raise ValueError("resolve UNDEFINED to the broker's strategy first")
        async with self._lock(sid):
            for _ in range(_PUT_ATTEMPTS):
                versions = await self.all_versions(sid)
                live = _trim(versions)
                for existing in reversed(live):
                    if existing.info.same_schema(info):
                        return existing.version
                if not allow_new:
                    raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
                validate_schema_data(info)
                check_compatible([s.info for s in live], info, strategy)
                last = versions[-1].version if versions else -1
                record = StoredSchema(last + 1, info, int(time.time() * 1000)).to_json()
                try:
                    version = await self._append(sid, last, record)
                except AlreadyExistsError:
                    continue  # another broker added a version meanwhile: decide again
                log.info("schema %s: version %d (%s) added", sid, version, info.type.name)
                return version
        raise IncompatibleSchemaError(f"schema {sid} changed concurrently too often; try again")

    async def delete(self, sid: str, *, force: bool = False) -> int | None:
        """Delete the schema of ``sid``: a deleted marker as a new version (its number is returned), or with
        ``force`` every stored version (None is returned). Returns None too when there was no live schema."""
        async with self._lock(sid):
            if force:
                await self._metadata.delete_recursive(_id_path(sid))
                return None
            for _ in range(_PUT_ATTEMPTS):
                versions = await self.all_versions(sid)
                if not versions or versions[-1].deleted:
                    return None
                marker = StoredSchema(
                    versions[-1].version + 1, SchemaInfo(SchemaType.NONE, b""), int(time.time() * 1000), True
                )
                try:
                    return await self._append(sid, versions[-1].version, marker.to_json())
                except AlreadyExistsError:
                    continue
        raise IncompatibleSchemaError(f"schema {sid} changed concurrently too often; try again")

    async def check(self, sid: str, info: SchemaInfo, strategy: SchemaCompatibilityStrategy) -> None:
        """Check ``info`` against the live versions of ``sid`` as a new version would be (Pulsar
        ``isCompatible``); raises IncompatibleSchemaError / InvalidSchemaDataError."""
        validate_schema_data(info)
        check_compatible([s.info for s in await self.live_versions(sid)], info, strategy)

    # ------------------------------------------------------------------ what the commands do
    async def add_producer_schema(self, topic: TopicName, info: SchemaInfo | None) -> int | None:
        """The schema version a producer of ``topic`` with ``info`` sends with (None: no schema), as Pulsar's
        ``ServerCnx.tryAddSchema`` + ``AbstractTopic.addSchema``: with a schema, ``put_if_absent`` under the
        namespace's strategy (no new version unless auto update is allowed); without one, refused when the
        topic has a schema and validation is enforced."""
        namespace = topic.namespace_name
        sid = schema_id(topic)
        if info is None:
            if self.validation_enforced(namespace) and await self.has_schema(sid):
                raise IncompatibleSchemaError(
                    "Producers cannot connect or send message without a schema to topics with a schema if "
                    "SchemaValidationEnforced is enabled"
                )
            return None
        return await self.put_if_absent(
            sid, info, self.compatibility_strategy(namespace), allow_new=self.allow_auto_update(namespace)
        )

    async def check_consumer_schema(self, topic: TopicName, info: SchemaInfo, *, idle: bool) -> None:
        """A consumer of ``topic`` subscribing with ``info`` (Pulsar ``addSchemaIfIdleOrCheckCompatible``): on an
        idle topic without a schema (no producer, no consumer, no data) the schema is added as a producer's
        would be; otherwise it must be readable: checked BACKWARD against the latest version under BACKWARD,
        FORWARD, FORWARD_TRANSITIVE and FULL, under its own strategy against every live version otherwise
        (``checkConsumerCompatibility``); a topic in use without a schema refuses it."""
        namespace = topic.namespace_name
        sid = schema_id(topic)
        live = await self.live_versions(sid)
        if not live and idle:
            await self.add_producer_schema(topic, info)
            return
        strategy = self.compatibility_strategy(namespace)
        if strategy == SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
            return
        if not live:
            raise IncompatibleSchemaError("Topic does not have schema to check")
        if strategy in (
            SchemaCompatibilityStrategy.BACKWARD,
            SchemaCompatibilityStrategy.FORWARD,
            SchemaCompatibilityStrategy.FORWARD_TRANSITIVE,
            SchemaCompatibilityStrategy.FULL,
        ):
            check_compatible([live[-1].info], info, SchemaCompatibilityStrategy.BACKWARD)
        else:
            check_compatible([s.info for s in live], info, strategy)


def _trim(versions: list[StoredSchema]) -> list[StoredSchema]:
    for index in range(len(versions) - 1, -1, -1):
        if versions[index].deleted:
            return versions[index + 1 :]
    return versions
