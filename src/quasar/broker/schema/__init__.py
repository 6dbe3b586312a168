"""Pulsar's schema registry: versioned schemas per topic in the metadata store (:mod:`.registry`), the
compatibility strategies checked with Avro's resolution rules (:mod:`.compatibility`), and their wire form
(:mod:`.wire`). The admin REST routes are :mod:`quasar.broker.admin.schema_routes`."""

from quasar.broker.schema.compatibility import SchemaCompatibilityStrategy, SchemaInfo, SchemaType
from quasar.broker.schema.errors import IncompatibleSchemaError, InvalidSchemaDataError
from quasar.broker.schema.registry import SchemaDefaults, SchemaRegistry, StoredSchema, schema_id

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaDataError",
    "SchemaCompatibilityStrategy",
    "SchemaDefaults",
    "SchemaInfo",
    "SchemaRegistry",
    "SchemaType",
    "StoredSchema",
    "schema_id",
]
