"""``GET /metrics`` on the admin port: the broker's own ``CollectorRegistry`` in Prometheus text format.

One registry per broker (never prometheus_client's global one: tests run several brokers in one process)
holding the collectors that read the live state at scrape time, as Pulsar's ``PrometheusMetricsServlet``
does, plus prometheus_client's ``ProcessCollector`` (``process_resident_memory_bytes``,
``process_open_fds``, CPU seconds, start time). The answer is ``text/plain; version=0.0.4``; with
``Accept: application/openmetrics-text`` the OpenMetrics format (prometheus_client's content negotiation).

Authentication: open by default, like Pulsar's ``/metrics``; with ``authenticate_metrics_endpoint`` (Pulsar's
``authenticateMetricsEndpoint``) and authentication on, a request needs valid credentials (any role:
``admin.auth`` lists the route as AUTHENTICATED).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

__all__ = ["METRICS_PATH", "METRICS_REGISTRY", "add_metrics_route", "new_registry"]

METRICS_PATH = "/metrics"

#: The broker's registry, on the admin application.
METRICS_REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)


def new_registry(*collectors: Collector, process: bool = True) -> CollectorRegistry:
    """A fresh registry holding ``collectors`` (and the process collector when ``process``)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    if process:
        ProcessCollector(registry=registry)
    return registry


async def _get_metrics(request: web.Request) -> web.Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(request.app[METRICS_REGISTRY])
    return web.Response(body=body, headers={"Content-Type": content_type})


def add_metrics_route(app: web.Application, registry: CollectorRegistry) -> None:
    """Serve ``registry`` at ``GET /metrics`` on the admin ``app``."""
    app[METRICS_REGISTRY] = registry
    app.router.add_get(METRICS_PATH, _get_metrics)
