"""Topic properties over the admin REST API (Pulsar ``PersistentTopics.updateProperties`` /
``getProperties`` / ``removeProperties``), ``quasar.broker.topic_properties`` for what they hold.

- ``PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/properties``: body a JSON object of strings, merged
  into the topic's properties (204). ``{"message.type": "TRANSACTION"}`` sets the RocketMQ message type the
  topic accepts; an unknown type, a non-string value or more than 64 properties answer 400.
- ``GET .../{topic}/properties``: the map (``{}`` when none).
- ``DELETE .../{topic}/properties?key=K``: remove property ``K`` (204; 400 without ``key``).

A partitioned topic's properties apply to its partitions. 404 for an unknown namespace.
"""

from __future__ import annotations

from aiohttp import web

from quasar.broker.admin.request_params import TOPIC_PATH, existing_namespace, service_of
from quasar.broker.admin.validation import parse_json
from quasar.broker.topic_properties import TOPIC_PROPERTIES, merge_properties, parse_properties
from quasar.protocol import TopicName

__all__ = ["register"]


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    existing_namespace(request)
    return TopicName.parse(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}")


async def put_properties(request: web.Request) -> web.Response:
    """PUT {topic}/properties: merge the body's properties (module docstring)."""
    topic = _topic(request)
    update = parse_properties(parse_json(await request.text()))
    service = service_of(request)
    merged = merge_properties(service.topic_policy(topic, TOPIC_PROPERTIES), update)
    await service.set_topic_policy(topic, TOPIC_PROPERTIES, merged)
    return web.Response(status=204)


async def get_properties(request: web.Request) -> web.Response:
    """GET {topic}/properties: the topic's properties."""
    topic = _topic(request)
    current = service_of(request).topic_policy(topic, TOPIC_PROPERTIES)
    return web.json_response(current if isinstance(current, dict) else {})


async def delete_property(request: web.Request) -> web.Response:
    """DELETE {topic}/properties?key=K: remove one property."""
    topic = _topic(request)
    key = request.query.get("key", "")
    if not key:
        raise ValueError("give the property to remove as ?key=")
    service = service_of(request)
    current = service.topic_policy(topic, TOPIC_PROPERTIES)
    merged = merge_properties(current, {})
    if merged.pop(key, None) is not None:
        await service.set_topic_policy(topic, TOPIC_PROPERTIES, merged or None)
    return web.Response(status=204)


def register(app: web.Application) -> None:
    """Add the routes (before the ``{topic}`` catch-alls)."""
    path = TOPIC_PATH + "/properties"
    app.add_routes(
        [web.put(path, put_properties), web.get(path, get_properties), web.delete(path, delete_property)]
    )
