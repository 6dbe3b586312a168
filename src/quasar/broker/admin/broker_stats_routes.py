"""What this broker holds in memory now: Pulsar's ``/admin/v2/broker-stats`` paths for loaded topics.

``GET /admin/v2/broker-stats/topics`` (Pulsar ``BrokerStats.getTopics2``): the stats of every LOADED topic,
nested as Pulsar nests them, namespace -> bundle -> domain -> topic -> TopicStats (the same JSON as
``GET .../{topic}/stats``; one bundle ``0x00000000_0xffffffff`` per namespace, as Quasar does not split
namespaces into bundles)::

    {"public/default": {"0x00000000_0xffffffff": {"persistent": {"persistent://public/default/t": {...}}}}}

``GET /admin/v2/broker-stats/load-report`` (Pulsar ``BrokerStats.getLoadReport``, a subset of its
``LocalBrokerData`` JSON, plus the idle-topic unloads)::

    {"pulsarServiceUrl": str, "webServiceUrl": str,
     "numTopics": int,        # topics loaded in memory (persistent and non-persistent), as Pulsar counts them
     "numProducers": int, "numConsumers": int,   # connected to the loaded topics
     "inactiveTopicsUnloaded": int}              # Quasar: topics unloaded as idle since the broker started

``GET /admin/v2/broker-stats/rocketmq`` (Quasar's own): the RocketMQ endpoint's clients, Telemetry streams,
broker-side producers and waiting long polls (``RocketMQListener.stats``).

A topic that exists but is not loaded (never used since the start, or unloaded as idle by
``quasar.broker.inactive_topics``) is not in ``numTopics``; the topic listing
(``GET /admin/v2/persistent/{tenant}/{namespace}``) still names it. Super-user only, as in Pulsar.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.admin.request_params import service_of

__all__ = ["register"]


FULL_BUNDLE = "0x00000000_0xffffffff"
"""The one bundle range a namespace has here."""


async def get_topics(request: web.Request) -> web.Response:
    """GET /admin/v2/broker-stats/topics (module docstring)."""
    tree: dict[str, dict[str, dict[str, dict[str, object]]]] = {}
    for name, topic in list(request.app[SERVICE_KEY].topics.items()):
        domain, _, local = name.partition("://")
        namespace = local.rsplit("/", 1)[0]
        tree.setdefault(namespace, {}).setdefault(FULL_BUNDLE, {}).setdefault(domain, {})[name] = (
            topic.stats()
        )
    return web.json_response(tree)


async def get_load_report(request: web.Request) -> web.Response:
    """GET /admin/v2/broker-stats/load-report (module docstring)."""
    service = service_of(request)
    topics = list(service.topics.values())
    return web.json_response(
        {
            "pulsarServiceUrl": service.broker_service_url,
            "webServiceUrl": service.web_service_url,
            "numTopics": len(topics),
            "numProducers": sum(len(topic.producers) for topic in topics),
            "numConsumers": sum(
                len(subscription.consumers)
                for topic in topics
                for subscription in topic.subscriptions.values()
            ),
            "inactiveTopicsUnloaded": service.inactive_topics.unloaded_total,
        }
    )


ROCKETMQ_STATS: web.AppKey[Callable[[], dict[str, int]]] = web.AppKey("rocketmq_stats")
"""The RocketMQ endpoint's ``stats()`` (set by the broker app when the endpoint is on)."""


async def get_rocketmq(request: web.Request) -> web.Response:
    """GET /admin/v2/broker-stats/rocketmq (Quasar's own): what the RocketMQ endpoint holds now, as
    ``{"clients", "telemetryStreams", "producers", "receivesWaiting", "pullsWaiting"}`` (ints); 404 when the
    endpoint is off."""
    stats = request.app.get(ROCKETMQ_STATS)
    if stats is None:
        raise web.HTTPNotFound(
            text=json.dumps({"reason": "the RocketMQ endpoint is off"}), content_type="application/json"
        )
    return web.json_response(stats())


def register(app: web.Application) -> None:
    """Add the broker-stats routes to the admin ``app``."""
    app.router.add_get("/admin/v2/broker-stats/load-report", get_load_report)
    app.router.add_get("/admin/v2/broker-stats/topics", get_topics)
    app.router.add_get("/admin/v2/broker-stats/rocketmq", get_rocketmq)
