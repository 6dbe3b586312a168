"""Schema registry over the admin REST API (Pulsar ``SchemasResource`` and the namespace schema policies).

Topic schemas, ``/admin/v2/schemas/{tenant}/{namespace}/{topic}`` (a partition names its partitioned topic's
schema; 404 when the namespace does not exist):

- ``GET .../schema``: the latest version, ``{"version", "type", "timestamp", "data", "properties"}`` (Pulsar
  ``GetSchemaResponse``: ``type`` a SchemaType name, ``timestamp`` ms, ``data`` the definition as text, for
  AVRO/JSON the schema JSON; data that is not UTF-8 is given base64-encoded). 404 "Schema not found" when there
  is none, "Schema is deleted" when the latest version is a deletion.
- ``GET .../schema/{version}``: that live version; 404 otherwise (400 for a version that is not a number).
- ``GET .../schemas``: ``{"getSchemaResponses": [...]}``, every live version oldest first.
- ``POST .../schema`` with Pulsar's ``PostSchemaPayload`` ``{"type", "schema", "properties"}``: adds the schema
  (or finds the identical live version) under the namespace's compatibility strategy, answers
  ``{"version": n}``; 409 when incompatible, 422 when the definition is invalid for its type, 400 for a bad
  payload. Auto update (a producer's privilege) does not apply to uploads, as in Pulsar.
- ``DELETE .../schema[?force=true]``: marks the schema deleted (a new version; ``{"version": n}``), or with
  ``force`` removes every version (``{"version": null}``); 404 when there is no schema.
- ``POST .../compatibility`` with a ``PostSchemaPayload``: ``{"isCompatibility": bool,
  "schemaCompatibilityStrategy": name}`` (Pulsar ``IsCompatibilityResponse``); 422 for an invalid definition.

Namespace policies, ``/admin/v2/namespaces/{tenant}/{namespace}/...``:

- ``schemaCompatibilityStrategy``: ``PUT`` a JSON string (``"BACKWARD"``; ``"UNDEFINED"`` = the broker's
  ``schema_compatibility_strategy``); ``GET`` the strategy in force there.
- ``isAllowAutoUpdateSchema`` / ``schemaValidationEnforced``: ``POST`` ``true``/``false``; ``GET`` the value in
  force (the namespace's, else the broker's).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

from quasar.broker.admin.request_params import existing_namespace as _namespace
from quasar.broker.admin.request_params import query_flag
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.schema import (
    IncompatibleSchemaError,
    InvalidSchemaDataError,
    SchemaCompatibilityStrategy,
    SchemaInfo,
    SchemaType,
    StoredSchema,
    schema_id,
)
from quasar.broker.schema.registry import (
    IS_ALLOW_AUTO_UPDATE_SCHEMA,
    SCHEMA_COMPATIBILITY_STRATEGY,
    SCHEMA_VALIDATION_ENFORCED,
)
from quasar.protocol import TopicName

__all__ = ["register"]

_SCHEMAS = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
_NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _topic(request: web.Request) -> tuple[TopicName, str]:
    info = request.match_info
    topic = TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
    _namespace(request)
    return topic, schema_id(topic)


async def _body(request: web.Request) -> Any:
    text = await request.text()
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"request body is not valid JSON: {exc.msg}") from None


def _payload(body: Any) -> SchemaInfo:
    """A ``PostSchemaPayload`` as a SchemaInfo; ValueError for a bad one."""
    if not isinstance(body, dict):
        raise ValueError('expected a schema payload {"type", "schema", "properties"}')
    kind = SchemaType.from_name(body.get("type"))
    schema = body.get("schema") or ""
    properties = body.get("properties") or {}
    if not isinstance(schema, str):
        raise ValueError("schema must be a string (the schema definition)")
    if not isinstance(properties, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise ValueError("properties must be an object of strings")
    return SchemaInfo(kind, schema.encode(), dict(properties))


def _data_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(data).decode()


def _response(stored: StoredSchema) -> dict[str, Any]:
    return {
        "version": stored.version,
        "type": stored.info.type.name,
        "timestamp": stored.timestamp_ms,
        "data": _data_text(stored.info.data),
        "properties": dict(stored.info.properties),
    }


async def get_schema(request: web.Request) -> web.Response:
    """GET .../schema[/{version}] (module docstring)."""
    _, sid = _topic(request)
    version: int | None = None
    if "version" in request.match_info:
        try:
            version = int(request.match_info["version"])
        except ValueError:
            raise ValueError(
                f"schema version must be a number, got {request.match_info['version']!r}"
            ) from None
    stored = await _service(request).schemas.get(sid, version)
    if stored is None:
        return _reason(404, "Schema not found")
    if stored.deleted:
        return _reason(404, "Schema is deleted")
    return web.json_response(_response(stored))


async def get_all_schemas(request: web.Request) -> web.Response:
    """GET .../schemas: every live version."""
    _, sid = _topic(request)
    versions = await _service(request).schemas.live_versions(sid)
    return web.json_response({"getSchemaResponses": [_response(s) for s in versions]})


async def post_schema(request: web.Request) -> web.Response:
    """POST .../schema: upload a schema (module docstring)."""
    topic, sid = _topic(request)
    info = _payload(await _body(request))
    registry = _service(request).schemas
    try:
        version = await registry.put_if_absent(
            sid, info, registry.compatibility_strategy(topic.namespace_name)
        )
    except InvalidSchemaDataError as exc:
        return _reason(422, str(exc))
    except IncompatibleSchemaError as exc:
        return _reason(409, str(exc))
    return web.json_response({"version": version})


async def delete_schema(request: web.Request) -> web.Response:
    """DELETE .../schema[?force=true] (module docstring)."""
    _, sid = _topic(request)
    force = query_flag(request, "force")
    registry = _service(request).schemas
    if not await registry.has_schema(sid) and not (force and await registry.all_versions(sid)):
        return _reason(404, "Schema not found")
    return web.json_response({"version": await registry.delete(sid, force=force)})


async def post_compatibility(request: web.Request) -> web.Response:
    """POST .../compatibility: would the schema be accepted (module docstring)."""
    topic, sid = _topic(request)
    info = _payload(await _body(request))
    registry = _service(request).schemas
    strategy = registry.compatibility_strategy(topic.namespace_name)
    try:
        await registry.check(sid, info, strategy)
        compatible = True
    except InvalidSchemaDataError as exc:
        return _reason(422, str(exc))
    except IncompatibleSchemaError:
        compatible = False
    return web.json_response({"isCompatibility": compatible, "schemaCompatibilityStrategy": strategy.name})


async def get_strategy(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return web.json_response(_service(request).schemas.compatibility_strategy(namespace).name)


async def put_strategy(request: web.Request) -> web.Response:
    """PUT .../schemaCompatibilityStrategy with a JSON string: 204; 400 for an unknown strategy."""
    namespace = _namespace(request)
    strategy = SchemaCompatibilityStrategy.parse(await _body(request))
    await _service(request).set_namespace_policy(namespace, SCHEMA_COMPATIBILITY_STRATEGY, strategy.name)
    return web.Response(status=204)


def _flag_routes(path: str, key: str) -> list[web.RouteDef]:
    """GET/POST of the boolean namespace policy ``key`` at ``path``."""

    async def get_flag(request: web.Request) -> web.Response:
        namespace = _namespace(request)
        registry = _service(request).schemas
        value = (
            registry.allow_auto_update(namespace)
            if key == IS_ALLOW_AUTO_UPDATE_SCHEMA
            else registry.validation_enforced(namespace)
        )
        return web.json_response(value)

    async def post_flag(request: web.Request) -> web.Response:
        namespace = _namespace(request)
        value = await _body(request)
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false as the request body, got {value!r}")
        await _service(request).set_namespace_policy(namespace, key, value)
        return web.Response(status=204)

    return [web.get(_NAMESPACE + path, get_flag), web.post(_NAMESPACE + path, post_flag)]


def register(app: web.Application) -> None:
    """Add the schema routes to the admin ``app`` (its error middleware maps 400/404/503)."""
    app.add_routes(
        [
            web.get(_SCHEMAS + "/schema", get_schema),
            web.get(_SCHEMAS + "/schema/{version}", get_schema),
            web.get(_SCHEMAS + "/schemas", get_all_schemas),
            web.post(_SCHEMAS + "/schema", post_schema),
            web.delete(_SCHEMAS + "/schema", delete_schema),
            web.post(_SCHEMAS + "/compatibility", post_compatibility),
            web.get(_NAMESPACE + "/schemaCompatibilityStrategy", get_strategy),
            web.put(_NAMESPACE + "/schemaCompatibilityStrategy", put_strategy),
            *_flag_routes("/isAllowAutoUpdateSchema", IS_ALLOW_AUTO_UPDATE_SCHEMA),
            *_flag_routes("/schemaValidationEnforced", SCHEMA_VALIDATION_ENFORCED),
        ]
    )
