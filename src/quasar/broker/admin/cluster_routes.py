"""Admin REST of a cluster: the cluster's brokers, HTTP lookups, and requests about a topic served by another
broker answered with a 307 to it (Pulsar's ``validateTopicOwnership`` redirect).

- ``GET /admin/v2/clusters/{cluster}``: Pulsar ClusterData (``serviceUrl``, ``brokerServiceUrl``) of this
  broker's cluster; 404 for another name.
- ``GET /admin/v2/brokers/{cluster}``: the live brokers as Pulsar lists them, ``["host:webport", ...]``.
- ``GET /admin/v2/brokers``: every live broker with its group, id, role, URLs, listeners and load (Quasar).
- ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}[?listenerName=NAME]``: Pulsar LookupData of the
  owning broker (placing the topic when nobody serves it yet, as a binary LOOKUP does; where that LOOKUP
  would answer Redirect, a 307 to the chosen broker's lookup with ``authoritative=true``, as Pulsar does).

:func:`owner_redirect_middleware` sends a request for one of ``owner_only`` handlers (topic stats,
subscriptions, ...) to the broker that serves the topic: ``307 Temporary Redirect`` with the same path and
query on that broker's admin URL, so clients that follow redirects (``pulsar-admin``, curl -L, httpx with
``follow_redirects``) get the owner's answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from urllib.parse import urlencode

from aiohttp import web

from quasar.broker.admin.request_params import query_flag
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.broker_service import BrokerService
from quasar.broker.cluster.model import LookupKind
from quasar.protocol import TopicName

__all__ = ["owner_redirect_middleware", "register"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.parse(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}")


def owner_redirect_middleware(
    owner_only: Collection[Handler],
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware answering 307 to the owning broker for requests routed to ``owner_only`` handlers about
    a topic another broker serves (503 when its group has no live master, via the errors middleware)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.handler in owner_only and "topic" in request.match_info:
            owner = _service(request).owner_web_url(_topic(request), tls=request.secure)
            if owner is not None:
                raise web.HTTPTemporaryRedirect(owner.rstrip("/") + request.path_qs)
        return await handler(request)

    return middleware


async def get_cluster(request: web.Request) -> web.Response:
    service = _service(request)
    if request.match_info["cluster"] != service.cluster_name:
        return web.json_response({"reason": "Cluster does not exist"}, status=404)
    return web.json_response(  # Pulsar ClusterData (the TLS URLs "" without TLS listeners)
        {
            "serviceUrl": service.web_service_url,
            "serviceUrlTls": service.web_service_url_tls,
            "brokerServiceUrl": service.broker_service_url,
            "brokerServiceUrlTls": service.broker_service_url_tls,
        }
    )


def _live_brokers(service: BrokerService) -> list[dict[str, object]]:
    if service.ownership is None:  # standalone: this broker alone
        return [
            {
                "cluster": service.cluster_name,
                "brokerName": "standalone",
                "brokerId": 0,
                "role": "master",
                "serviceUrl": service.broker_service_url,
                "serviceUrlTls": service.broker_service_url_tls,
                "webServiceUrl": service.web_service_url,
                "webServiceUrlTls": service.web_service_url_tls,
            }
        ]
    return [broker.to_json() for broker in service.ownership.membership.all_brokers()]


async def get_brokers_of_cluster(request: web.Request) -> web.Response:
    """Pulsar ``GET /admin/v2/brokers/{cluster}``: ``["host:webport", ...]``; 404 for another cluster."""
    service = _service(request)
    if request.match_info["cluster"] != service.cluster_name:
        return web.json_response({"reason": "Cluster does not exist"}, status=404)
    return web.json_response(
        sorted(str(b["webServiceUrl"]).split("://", 1)[-1] for b in _live_brokers(service))
    )


async def get_brokers(request: web.Request) -> web.Response:
    """Every live broker of the cluster, as registered (group, id, role, URLs, listeners, load)."""
    return web.json_response(_live_brokers(_service(request)))


async def lookup(request: web.Request) -> web.Response:
    """GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}: Pulsar LookupData JSON of the owning broker."""
    topic = _topic(request)
    listener = request.query.get("listenerName", "")
    answer = await _service(request).lookup(
        topic, authoritative=query_flag(request, "authoritative"), listener=listener
    )
    if answer.kind is LookupKind.REDIRECT:  # Pulsar's HTTP lookup redirects (307) to the broker to ask
        query = {"authoritative": "true", **({"listenerName": listener} if listener else {})}
        web_url = (
            answer.web_service_url_tls
            if request.secure and answer.web_service_url_tls
            else answer.web_service_url
        )
        raise web.HTTPTemporaryRedirect(f"{web_url.rstrip('/')}{request.path}?{urlencode(query)}")
    return web.json_response(
        {
            "brokerUrl": answer.service_url,
            "brokerUrlTls": answer.service_url_tls,
            "httpUrl": answer.web_service_url,
            "httpUrlTls": answer.web_service_url_tls,
            "nativeUrl": answer.service_url,
            "topic": topic.full_name,
        },
        dumps=json.dumps,
    )


def register(app: web.Application) -> None:
    """Add the cluster routes to the admin application."""
    app.add_routes(
        [
            web.get("/admin/v2/clusters/{cluster}", get_cluster),
            web.get("/admin/v2/brokers", get_brokers),
            web.get("/admin/v2/brokers/{cluster}", get_brokers_of_cluster),
            web.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup),
        ]
    )
