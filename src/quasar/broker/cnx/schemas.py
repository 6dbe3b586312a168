"""Schema commands: GET_SCHEMA and GET_OR_CREATE_SCHEMA (reference/pulsar-protocol.md §6.19-6.20), answered
from the broker's schema registry (``quasar.broker.schema``) in a task the connection owns.

GET_SCHEMA (Pulsar ``ServerCnx.handleGetSchema``): the version asked for (8-byte big-endian long), or the
latest when none is given; an empty version is refused with IncompatibleSchema "Empty schema version". No
schema (never stored, deleted, or a version that is not live) answers TopicNotFound "Topic not found or
no-schema", which the official client treats as "no schema" without retrying. Failures always answer
GET_SCHEMA_RESPONSE, never ERROR (the client would drop the request otherwise).

GET_OR_CREATE_SCHEMA (``handleGetOrCreateSchema``): the topic must exist (TopicNotFound otherwise); the schema
is added as a producer's would be and its version answered; a refused schema answers IncompatibleSchema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quasar.broker.cnx.ports import CommandPort, HandlerTable
from quasar.broker.errors import server_error_of
from quasar.broker.schema.registry import schema_id
from quasar.broker.schema.wire import schema_info_of, schema_of, version_bytes, version_of
from quasar.errors import QuasarError
from quasar.protocol import CommandType, TopicName, commands
from quasar.protocol.enums import ServerError

if TYPE_CHECKING:
    from quasar.protocol.decoder import Frame
    from quasar.protocol.pb import CommandGetOrCreateSchema, CommandGetSchema

__all__ = ["SchemaCommands"]

NO_SCHEMA = "Topic not found or no-schema"


class SchemaCommands:
    """The schema commands of one connection."""

    def __init__(self, cnx: CommandPort) -> None:
        self._cnx = cnx

    def handlers(self) -> HandlerTable:
        """This family's commands: ``CommandType`` -> bound handler, merged into the connection's table."""
        return {
            CommandType.GET_SCHEMA: self.handle_get_schema,
            CommandType.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
        }

    def handle_get_schema(self, frame: Frame) -> None:
        """GET_SCHEMA: the stored schema and its version (module docstring)."""
        self._cnx.spawn(self._get_schema(frame.command.getSchema))

    async def _get_schema(self, cmd: CommandGetSchema) -> None:
        version: int | None = None
        if cmd.HasField("schema_version"):
            try:
                version = version_of(cmd.schema_version)
            except ValueError as exc:
                message = "Empty schema version" if not cmd.schema_version else str(exc)
                self._cnx.write(
                    commands.new_get_schema_error(cmd.request_id, ServerError.IncompatibleSchema, message)
                )
                return
        try:
            sid = schema_id(TopicName.parse(cmd.topic))
            stored = await self._cnx.service.schemas.get(sid, version)
        except QuasarError as exc:
            code, message = server_error_of(exc)
            self._cnx.write(commands.new_get_schema_error(cmd.request_id, code, message))
            return
        if stored is None or stored.deleted:
            self._cnx.write(
                commands.new_get_schema_error(cmd.request_id, ServerError.TopicNotFound, NO_SCHEMA)
            )
            return
        self._cnx.write(
            commands.new_get_schema_response(
                cmd.request_id, schema_of(sid, stored), version_bytes(stored.version)
            )
        )

    def handle_get_or_create_schema(self, frame: Frame) -> None:
        """GET_OR_CREATE_SCHEMA: add (or find) the schema on an existing topic (module docstring)."""
        self._cnx.spawn(self._get_or_create_schema(frame.command.getOrCreateSchema))

    async def _get_or_create_schema(self, cmd: CommandGetOrCreateSchema) -> None:
        service = self._cnx.service
        try:
            topic = TopicName.parse(cmd.topic)
            await service.get_or_create_topic(topic, create=False)
            version = await service.schemas.add_producer_schema(topic, schema_info_of(cmd.schema))
        except QuasarError as exc:
            code, message = server_error_of(exc)
            self._cnx.write(
                commands.new_get_or_create_schema_response(cmd.request_id, error=code, message=message)
            )
            return
        self._cnx.write(commands.new_get_or_create_schema_response(cmd.request_id, version_bytes(version)))
