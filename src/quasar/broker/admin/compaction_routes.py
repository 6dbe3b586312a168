"""Compaction over the admin REST API (Pulsar ``PersistentTopics.compact`` / ``compactionStatus`` and
``Namespaces.{get,set,delete}CompactionThreshold``).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: start compacting the topic (every
  partition of a partitioned topic); 204 at once, 409 while a compaction of it runs, 404 for an unknown
  topic, 405 for a non-persistent topic.
- ``GET`` the same path: ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ""}`` (per topic or
  partition: 405 for the base name of a partitioned topic).
- ``GET/PUT/DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold``: the namespace policy in
  bytes (PUT body: a JSON integer >= 0, else 412; GET answers the integer, or 204 when unset).
"""

from __future__ import annotations

import json

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.admin.request_params import TOPIC_PATH
from quasar.broker.compaction.service import (
    COMPACTION_THRESHOLD,
    CompactionInProgressError,
    CompactionService,
)
from quasar.broker.errors import NotAllowedError, TopicNotFoundError
from quasar.broker.topic import PersistentTopic
from quasar.protocol import TopicName

__all__ = ["OWNER_ONLY", "register"]

_TOPIC = TOPIC_PATH
_NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _compaction(request: web.Request) -> CompactionService:
    return request.app[SERVICE_KEY].compaction


def _name(request: web.Request) -> TopicName | web.Response:
    info = request.match_info
    if info["domain"] != "persistent":
        return _reason(405, "Compaction is only supported for persistent topics")
    return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")


async def _load(request: web.Request, name: TopicName) -> PersistentTopic:
    topic = await request.app[SERVICE_KEY].get_or_create_topic(name, create=False)
    if not isinstance(topic, PersistentTopic):
        raise TopicNotFoundError(f"Topic {name.full_name} is not persistent")
    return topic


async def put_compaction(request: web.Request) -> web.Response:
    """PUT {topic}/compaction: trigger a compaction; of every partition for a partitioned topic (Pulsar
    ``internalTriggerCompaction``), 409 before starting any when one of them is running."""
    name = _name(request)
    if isinstance(name, web.Response):
        return name
    partitions = request.app[SERVICE_KEY].partitions(name)
    names = [TopicName.parse(f"{name.full_name}-partition-{i}") for i in range(partitions)] or [name]
    topics = [await _load(request, n) for n in names]
    compaction = _compaction(request)
    try:
        for topic in topics:
            if compaction.running(topic.name):
                raise CompactionInProgressError(f"Compaction already in progress on {topic.name.full_name}")
        for topic in topics:
            compaction.trigger(topic)
    except CompactionInProgressError as exc:
        return _reason(409, str(exc))
    return web.Response(status=204)


async def get_compaction(request: web.Request) -> web.Response:
    """GET {topic}/compaction: the status of the last compaction on this broker (of one topic or partition:
    405 for the base name of a partitioned topic)."""
    name = _name(request)
    if isinstance(name, web.Response):
        return name
    if request.app[SERVICE_KEY].partitions(name) > 0:
        return _reason(405, "The compaction status is kept per partition")
    topic = await _load(request, name)
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
