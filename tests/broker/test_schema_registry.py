"""SchemaRegistry over the memory metadata backend: version numbering, identity, deletion, the namespace
policies, the consumer rules, and concurrent writers (two brokers over one store)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from quasar.broker.schema import (
    IncompatibleSchemaError,
    InvalidSchemaDataError,
    SchemaCompatibilityStrategy,
    SchemaDefaults,
    SchemaInfo,
    SchemaRegistry,
    SchemaType,
    StoredSchema,
    schema_id,
)
from quasar.broker.schema.registry import (
    IS_ALLOW_AUTO_UPDATE_SCHEMA,
    SCHEMA_COMPATIBILITY_STRATEGY,
    SCHEMA_VALIDATION_ENFORCED,
)
from quasar.broker.schema.wire import schema_info_of, schema_of, version_bytes, version_of
from quasar.metadata.memory import MemoryData, MemoryMetadataStore
from quasar.protocol import TopicName

S = SchemaCompatibilityStrategy
TOPIC = TopicName.parse("persistent://public/default/t")


def avro(*fields: dict[str, Any]) -> SchemaInfo:
    return SchemaInfo(
        SchemaType.AVRO, json.dumps({"type": "record", "name": "R", "fields": list(fields)}).encode()
    )


A = {"name": "a", "type": "string"}
B_DEFAULT = {"name": "b", "type": "int", "default": 0}
B_REQUIRED = {"name": "b", "type": "int"}
C_REQUIRED = {"name": "c", "type": "int"}


def registry(
    policies: dict[str, Any] | None = None, data: MemoryData | None = None, **defaults: Any
) -> SchemaRegistry:
    namespaces = {"public/default": policies if policies is not None else {}}
    return SchemaRegistry(
        MemoryMetadataStore(data or MemoryData()), namespaces.get, SchemaDefaults(**defaults)
    )


def test_schema_id_is_the_partitioned_topic_base_name():
    assert schema_id(TopicName.parse("persistent://t/ns/x-partition-3")) == "t/ns/x"
    assert schema_id(TopicName.parse("non-persistent://t/ns/x")) == "t/ns/x"


async def test_versions_count_up_and_identical_schemas_find_theirs():
    reg = registry()
    sid = schema_id(TOPIC)
    assert await reg.get(sid) is None and not await reg.has_schema(sid)
    assert await reg.add_producer_schema(TOPIC, avro(A)) == 0
    assert await reg.add_producer_schema(TOPIC, avro(A, B_DEFAULT)) == 1
    assert await reg.add_producer_schema(TOPIC, avro(A)) == 0  # an older identical version is reused
    with pytest.raises(IncompatibleSchemaError):
        await reg.add_producer_schema(
            TOPIC, avro(A, B_DEFAULT, C_REQUIRED)
        )  # FULL by default: c has no default
    stored = await reg.get(sid, 1)
    assert stored is not None and stored.info == avro(A, B_DEFAULT) and stored.timestamp_ms > 0
    assert [s.version for s in await reg.live_versions(sid)] == [0, 1]
    assert await reg.add_producer_schema(TOPIC, None) is None


async def test_deletion_marks_a_version_and_force_removes_everything():
    reg = registry()
    sid = schema_id(TOPIC)
    await reg.add_producer_schema(TOPIC, avro(A))
    assert await reg.delete(sid) == 1
    latest = await reg.get(sid)
    assert latest is not None and latest.deleted and latest.info.type == SchemaType.NONE
    assert not await reg.has_schema(sid) and await reg.get(sid, 0) is None
    assert await reg.delete(sid) is None  # nothing live to delete
    # after a deletion anything may start again (nothing live to check against), numbering goes on
    assert await reg.add_producer_schema(TOPIC, SchemaInfo(SchemaType.STRING, b"")) == 2
    assert await reg.delete(sid, force=True) is None
    assert await reg.all_versions(sid) == []
    assert await reg.add_producer_schema(TOPIC, avro(A)) == 0


async def test_namespace_policies_override_the_broker_defaults():
    policies: dict[str, Any] = {}
    reg = registry(policies, compatibility_strategy=S.BACKWARD)
    assert reg.compatibility_strategy("public/default") is S.BACKWARD
    policies[SCHEMA_COMPATIBILITY_STRATEGY] = "UNDEFINED"
    assert reg.compatibility_strategy("public/default") is S.BACKWARD
    policies[SCHEMA_COMPATIBILITY_STRATEGY] = "FORWARD"
    await reg.add_producer_schema(TOPIC, avro(A))
    assert await reg.add_producer_schema(TOPIC, avro(A, B_REQUIRED)) == 1  # FORWARD: old readers skip b
    policies[IS_ALLOW_AUTO_UPDATE_SCHEMA] = False
    with pytest.raises(IncompatibleSchemaError, match="auto updating is disabled"):
        await reg.add_producer_schema(TOPIC, avro(A, B_REQUIRED, C_REQUIRED))
    assert await reg.add_producer_schema(TOPIC, avro(A)) == 0
    await reg.add_producer_schema(TOPIC, None)
    policies[SCHEMA_VALIDATION_ENFORCED] = True
    with pytest.raises(IncompatibleSchemaError, match="SchemaValidationEnforced"):
        await reg.add_producer_schema(TOPIC, None)
    assert await reg.add_producer_schema(TopicName.parse("public/default/other"), None) is None


async def test_consumers_register_on_idle_topics_and_are_checked_as_readers():
    reg = registry()
    sid = schema_id(TOPIC)
    with pytest.raises(IncompatibleSchemaError, match="does not have schema"):
        await reg.check_consumer_schema(TOPIC, avro(A), idle=False)
    await reg.check_consumer_schema(TOPIC, avro(A), idle=True)
    assert [s.version for s in await reg.live_versions(sid)] == [0]
    await reg.check_consumer_schema(TOPIC, avro(A, B_DEFAULT), idle=False)  # reads v0 data; not registered
    with pytest.raises(IncompatibleSchemaError):
        await reg.check_consumer_schema(TOPIC, avro(A, B_REQUIRED), idle=False)
    assert [s.version for s in await reg.live_versions(sid)] == [0]


async def test_always_incompatible_refuses_even_an_identical_consumer_schema_as_pulsar():
    reg = registry({SCHEMA_COMPATIBILITY_STRATEGY: "ALWAYS_INCOMPATIBLE"})
    await reg.add_producer_schema(TOPIC, avro(A))
    assert await reg.add_producer_schema(TOPIC, avro(A)) == 0  # a producer finds the identical version first
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        await reg.check_consumer_schema(TOPIC, avro(A), idle=False)


async def test_invalid_definitions_never_become_versions():
    reg = registry()
    with pytest.raises(InvalidSchemaDataError):
        await reg.add_producer_schema(TOPIC, SchemaInfo(SchemaType.AVRO, b"{broken"))
    with pytest.raises(InvalidSchemaDataError):
        await reg.add_producer_schema(TOPIC, SchemaInfo(SchemaType.JSON, b"\xff"))
    assert await reg.all_versions(schema_id(TOPIC)) == []


async def test_concurrent_writers_on_two_brokers_never_share_a_version():
    data = MemoryData()
    first, second = (
        registry({SCHEMA_COMPATIBILITY_STRATEGY: "ALWAYS_COMPATIBLE"}, data),
        registry({SCHEMA_COMPATIBILITY_STRATEGY: "ALWAYS_COMPATIBLE"}, data),
    )
    schemas = [avro(A, {"name": f"f{i}", "type": "int", "default": i}) for i in range(8)]
    versions = await asyncio.gather(
        *(
            (first if i % 2 else second).add_producer_schema(TOPIC, schema)
            for i, schema in enumerate(schemas + schemas)
        )
    )
    assert versions[:8] == versions[8:]  # each schema has exactly one version, whichever broker asked
    assert sorted(versions[:8]) == list(range(8))
    stored = await first.all_versions(schema_id(TOPIC))
    assert [s.info for s in stored] == [schemas[versions.index(v)] for v in range(8)]


def test_wire_forms():
    assert version_bytes(None) == b"" and version_bytes(3) == b"\x00" * 7 + b"\x03"
    assert version_of(version_bytes(2**40)) == 2**40
    with pytest.raises(ValueError):
        version_of(b"\x01")
    stored = StoredSchema(4, SchemaInfo(SchemaType.JSON, b"{}", {"k": "v"}), 1)
    wire = schema_of("public/default/t", stored)
    assert (wire.name, wire.type, wire.schema_data) == ("public/default/t", 2, b"{}")
    assert schema_info_of(wire) == stored.info
