"""Compaction over the admin REST API (Pulsar ``PersistentTopics.compact`` / ``compactionStatus`` and
``Namespaces.{get,set,delete}CompactionThreshold``).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: start compacting a loaded-or-loadable
  topic; 204 at once, 409 while a compaction of it runs, 404 for an unknown topic, 405 for the base name
  of a partitioned topic or a non-persistent topic (Pulsar compacts partitions one by one).
- ``GET`` the same path: ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ""}``.
- ``GET/PUT/DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold``: the namespace policy in
  bytes (PUT body: a JSON integer >= 0, else 412; GET answers the integer, or 204 when unset).
"""

from __future__ import annotations

import json

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.compaction.service import (
    COMPACTION_THRESHOLD,
    CompactionInProgressError,
    CompactionService,
)
from quasar.broker.errors import NotAllowedError, TopicNotFoundError
from quasar.broker.topic import PersistentTopic
from quasar.protocol import TopicName

__all__ = ["OWNER_ONLY", "register"]

_TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _compaction(request: web.Request) -> CompactionService:
    compaction = request.app[SERVICE_KEY].compaction
    if compaction is None:
        raise web.HTTPServiceUnavailable(
            text=json.dumps({"reason": "compaction is not running on this broker"}),
            content_type="application/json",
        )
    compaction_service: CompactionService = compaction
    return compaction_service


async def _topic(request: web.Request) -> PersistentTopic | web.Response:
    info = request.match_info
    if info["domain"] != "persistent":
        return _reason(405, "Compaction is only supported for persistent topics")
    name = TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
    service = request.app[SERVICE_KEY]
    if service.partitions(name) > 0:
        return _reason(405, "Compaction of a partitioned topic is done partition by partition")
    topic = await service.get_or_create_topic(name, create=False)
    if not isinstance(topic, PersistentTopic):
        raise TopicNotFoundError(f"Topic {name.full_name} is not persistent")
    return topic


async def put_compaction(request: web.Request) -> web.Response:
    """PUT {topic}/compaction: trigger a compaction (module docstring)."""
    topic = await _topic(request)
    if isinstance(topic, web.Response):
        return topic
    try:
        _compaction(request).trigger(topic)
    except CompactionInProgressError as exc:
        return _reason(409, str(exc))
    return web.Response(status=204)


async def get_compaction(request: web.Request) -> web.Response:
    """GET {topic}/compaction: the status of the last compaction on this broker."""
    topic = await _topic(request)
    if isinstance(topic, web.Response):
        return topic
    return web.json_response(_compaction(request).status(topic.name))


def _namespace(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


async def get_threshold(request: web.Request) -> web.Response:
    value = request.app[SERVICE_KEY].namespace_policy(_namespace(request), COMPACTION_THRESHOLD)
    return web.Response(status=204) if value is None else web.json_response(value)


async def put_threshold(request: web.Request) -> web.Response:
    body = json.loads(await request.text() or "null")
    if isinstance(body, bool) or not isinstance(body, int) or body < 0:
        raise NotAllowedError("compactionThreshold must be an integer number of bytes, 0 or more")
    await request.app[SERVICE_KEY].set_namespace_policy(_namespace(request), COMPACTION_THRESHOLD, body)
    return web.Response(status=204)


async def delete_threshold(request: web.Request) -> web.Response:
    await request.app[SERVICE_KEY].set_namespace_policy(_namespace(request), COMPACTION_THRESHOLD, None)
    return web.Response(status=204)


OWNER_ONLY = (put_compaction, get_compaction)
"""Handlers only the topic's owner can answer (the cluster middleware redirects them)."""


def register(app: web.Application) -> None:
    """Add the compaction routes to the admin application."""
    app.add_routes(
        [
            web.put(_TOPIC + "/compaction", put_compaction),
            web.get(_TOPIC + "/compaction", get_compaction),
            web.get(_NAMESPACE + "/compactionThreshold", get_threshold),
            web.put(_NAMESPACE + "/compactionThreshold", put_threshold),
            web.post(_NAMESPACE + "/compactionThreshold", put_threshold),
            web.delete(_NAMESPACE + "/compactionThreshold", delete_threshold),
        ]
    )
