"""The name server's read-only HTTP view of its route tables (aiohttp; JSON; nothing can be changed here).

Paths::

    GET /routes                                        {topic: TopicRouteData} for every topic
    GET /routes/{domain}/{tenant}/{namespace}/{topic}  the TopicRouteData of ``domain://tenant/namespace/topic``
                                                       (a partition name resolves to its base topic);
                                                       404 {"reason": ...} when no group serves it
    GET /brokers                                       ClusterInfo plus the live table:
                                                       {"clusterAddrTable", "brokerAddrTable", "brokerLiveTable":
                                                        {addr: {cluster, brokerName, brokerId, haServerAddr,
                                                                dataVersion, heartbeatTimeoutMillis,
                                                                lastUpdateAgoMillis}}}

TopicRouteData and ClusterInfo are the shapes of :mod:`quasar.nameserver.routes`, the same bytes the remoting
protocol returns.
"""

from __future__ import annotations

from aiohttp import web

from .routes import RouteInfoManager

__all__ = ["ROUTES_KEY", "build_http_app"]

#: The app key under which the view finds its :class:`RouteInfoManager`.
ROUTES_KEY = web.AppKey("routes", RouteInfoManager)


def _routes(request: web.Request) -> RouteInfoManager:
    return request.app[ROUTES_KEY]


async def _all_routes(request: web.Request) -> web.Response:
    return web.json_response(_routes(request).all_routes())


async def _topic_route(request: web.Request) -> web.Response:
    info = request.match_info
    topic = f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}"
    route = _routes(request).pickup_topic_route_data(topic)
    if route is None:
        return web.json_response(
            {"reason": f"No topic route info in name server for the topic: {topic}"}, status=404
        )
    return web.json_response(route)


async def _brokers(request: web.Request) -> web.Response:
    routes = _routes(request)
    return web.json_response({**routes.get_all_cluster_info(), "brokerLiveTable": routes.live_table_view()})


def build_http_app(routes: RouteInfoManager) -> web.Application:
    """The aiohttp application of the view over ``routes``."""
    app = web.Application()
    app[ROUTES_KEY] = routes
    app.router.add_get("/routes", _all_routes)
    app.router.add_get("/routes/{domain}/{tenant}/{namespace}/{topic}", _topic_route)
    app.router.add_get("/brokers", _brokers)
    return app
