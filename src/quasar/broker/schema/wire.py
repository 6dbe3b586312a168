"""Schemas and schema versions in their Pulsar wire form (PulsarApi.proto ``Schema``; a schema version is an
8-byte big-endian signed long, Pulsar's ``LongSchemaVersion``)."""

from __future__ import annotations

from quasar.broker.schema.compatibility import SchemaInfo, SchemaType
from quasar.broker.schema.errors import InvalidSchemaDataError
from quasar.broker.schema.registry import StoredSchema
from quasar.protocol.pb import KeyValue, Schema

__all__ = ["schema_info_of", "schema_of", "topic_in_use", "version_bytes", "version_of"]


def version_bytes(version: int | None) -> bytes:
    """``version`` as the wire's 8 bytes; None (no schema) as empty bytes."""
    return b"" if version is None else version.to_bytes(8, "big", signed=True)


def version_of(data: bytes) -> int:
    """The version in a wire schema version; raises ValueError unless ``data`` is 8 bytes."""
    if len(data) != 8:
        raise ValueError(f"a schema version is 8 bytes, got {len(data)}")
    return int.from_bytes(data, "big", signed=True)


def schema_info_of(schema: Schema) -> SchemaInfo:
    """The SchemaInfo of a CommandProducer/CommandSubscribe ``schema``; InvalidSchemaDataError for a type this
    broker does not know."""
    try:
        kind = SchemaType(int(schema.type))
    except ValueError:
        raise InvalidSchemaDataError(f"unknown schema type {int(schema.type)}") from None
    return SchemaInfo(kind, bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties})


def schema_of(name: str, stored: StoredSchema) -> Schema:
    """The wire ``Schema`` of a stored version, named ``name`` (the schema id, as Pulsar's
    ``SchemaInfoUtil.newSchemaInfo``)."""
    return Schema(
        name=name,
        schema_data=stored.info.data,
        type=int(stored.info.type),  # type: ignore[arg-type]
        properties=[KeyValue(key=k, value=v) for k, v in sorted(stored.info.properties.items())],
    )


def topic_in_use(topic: object) -> bool:
    """Whether a loaded topic has producers, consumers or stored data: a consumer's schema is then checked
    rather than registered (Pulsar ``addSchemaIfIdleOrCheckCompatible``)."""
    if getattr(topic, "producers", None):
        return True
    subscriptions = getattr(topic, "subscriptions", None) or {}
    if any(getattr(s, "consumers", None) for s in subscriptions.values()):
        return True
    ledger = getattr(topic, "ledger", None)
    return ledger is not None and ledger.total_size > 0
