"""Schema registry errors (Pulsar ``IncompatibleSchemaException`` / ``InvalidSchemaDataException``).

BrokerError
└── IncompatibleSchemaError       IncompatibleSchema (fatal for the official client: pulsar.IncompatibleSchema)
    └── InvalidSchemaDataError    the schema definition itself is invalid (admin: 422)
"""

from __future__ import annotations

from quasar.broker.errors import BrokerError
from quasar.protocol.enums import ServerError

__all__ = ["IncompatibleSchemaError", "InvalidSchemaDataError"]


class IncompatibleSchemaError(BrokerError):
    """A schema is refused by the topic's compatibility strategy or policies (admin: 409)."""

    server_error = ServerError.IncompatibleSchema


class InvalidSchemaDataError(IncompatibleSchemaError):
    """A schema's definition is not valid for its type (an AVRO schema that is not an Avro schema)."""
