"""Authentication and authorization of the admin REST API (Pulsar's ``AuthenticationFilter`` and the
``validate*`` checks of its admin resources; reference/security.md §2-3).

With ``authentication_enabled`` every request but ``GET /status.html`` (Pulsar's health page),
``GET /admin/v2/openapi.json`` (the API's description), the dashboard's static files (``/dashboard``,
``/dashboard/``, ``/dashboard/static/{name}``: they hold no data; the page's API calls carry the user's token)
and, unless ``authenticate_metrics_endpoint`` is set (Pulsar's ``authenticateMetricsEndpoint``), ``GET /metrics``
is authenticated from ``Authorization: Bearer <jwt>``, ``Authorization: Basic <base64 user:password>`` or the TLS
client certificate (``quasar.security.authentication``): 401 ``{"reason": ...}`` when that fails. With
``authorization_enabled`` the role must then hold the route's :class:`Requirement` (403 otherwise):

- ``SUPER_USER``: tenants, clusters, brokers, replication, broker stats, and any route not listed below;
- ``TENANT_ADMIN`` (super user or one of the tenant's ``adminRoles``): reading a tenant, namespaces, namespace
  and topic policies, permissions, creating, terminating, unloading (and deleting) topics;
- ``NAMESPACE_LOOKUP``: listing a namespace's topics: produce or consume granted on the namespace;
- ``TOPIC_LOOKUP``: partitions, (partitioned) stats, HTTP lookup: produce or consume on the topic or its
  namespace;
- ``TOPIC_CONSUME``: subscriptions, last message id, message query, creating, deleting, skipping, expiring,
  resetting and peeking a subscription: consume (and the subscription's roles; Pulsar's SUBSCRIBE, SKIP,
  EXPIRE_MESSAGES, RESET_CURSOR and PEEK_MESSAGES topic operations);
- ``AUTHENTICATED``: the cluster list, and ``/metrics`` when it is authenticated.

The requirement of a request is found by its route (method and path template), so every route is covered,
including ones added later (they default to ``SUPER_USER``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from types import MappingProxyType

from aiohttp import web

from quasar.broker.admin.dashboard_routes import DASHBOARD_ROUTES
from quasar.broker.admin.tls import peer_certificate_der
from quasar.broker.auth import BrokerSecurity
from quasar.protocol import TopicName
from quasar.protocol.errors import InvalidTopicNameError
from quasar.security.authentication import AuthenticationError

__all__ = [
    "METRICS_PATH",
    "OPEN_PATHS",
    "OPEN_ROUTES",
    "ROUTE_REQUIREMENTS",
    "Requirement",
    "auth_middleware",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/status.html", "/admin/v2/openapi.json"})
"""Paths always served without authentication (Pulsar's health page; the API's OpenAPI document, which
describes no data)."""

METRICS_PATH = "/metrics"
"""Prometheus metrics: open unless ``authenticate_metrics_endpoint`` (Pulsar's default)."""

OPEN_ROUTES = DASHBOARD_ROUTES
"""Route templates served without authentication: the dashboard's static files (matched by route, so a path
that only starts like one, or is routed elsewhere after normalization, is still authenticated)."""


class Requirement(enum.Enum):
    """What a role needs for a route (module docstring)."""

    AUTHENTICATED = "authenticated"
    SUPER_USER = "super user"
    TENANT_ADMIN = "tenant admin"
    NAMESPACE_LOOKUP = "produce or consume on the namespace"
    TOPIC_LOOKUP = "produce or consume on the topic"
    TOPIC_CONSUME = "consume on the topic"


_NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_SUB = _TOPIC + "/subscription/{subscription}"
_SCHEMAS = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
_R = Requirement

ROUTE_REQUIREMENTS = MappingProxyType(
    {
        ("GET", "/admin/v2/clusters"): _R.AUTHENTICATED,
        ("GET", METRICS_PATH): _R.AUTHENTICATED,
        ("GET", "/admin/v2/namespaces/{tenant}"): _R.TENANT_ADMIN,
        ("PUT", _NS): _R.TENANT_ADMIN,
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}"): _R.NAMESPACE_LOOKUP,
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/partitioned"): _R.NAMESPACE_LOOKUP,
        ("PUT", _TOPIC): _R.TENANT_ADMIN,
        ("PUT", _TOPIC + "/partitions"): _R.TENANT_ADMIN,
        ("GET", _TOPIC + "/partitions"): _R.TOPIC_LOOKUP,
        ("GET", _TOPIC + "/stats"): _R.TOPIC_LOOKUP,
        ("GET", _TOPIC + "/internalStats"): _R.TOPIC_LOOKUP,
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"): _R.TOPIC_LOOKUP,
        ("GET", _TOPIC + "/subscriptions"): _R.TOPIC_CONSUME,
        ("GET", _TOPIC + "/lastMessageId"): _R.TOPIC_CONSUME,
        ("GET", _TOPIC + "/messages"): _R.TOPIC_CONSUME,
        ("DELETE", _TOPIC + "/subscription/{subscription}"): _R.TOPIC_CONSUME,
        ("GET", "/admin/v2/tenants/{tenant}"): _R.TENANT_ADMIN,
        ("GET", _NS): _R.TENANT_ADMIN,
        ("DELETE", _NS): _R.TENANT_ADMIN,
        ("GET", _NS + "/topics"): _R.NAMESPACE_LOOKUP,
        ("PUT", _SUB): _R.TOPIC_CONSUME,
        ("POST", _SUB + "/skip_all"): _R.TOPIC_CONSUME,
        ("POST", _SUB + "/skip/{count}"): _R.TOPIC_CONSUME,
        ("POST", _SUB + "/expireMessages/{seconds}"): _R.TOPIC_CONSUME,
        ("POST", _TOPIC + "/all_subscription/expireMessages/{seconds}"): _R.TOPIC_CONSUME,
        ("POST", _SUB + "/resetcursor/{timestamp}"): _R.TOPIC_CONSUME,
        ("POST", _SUB + "/resetcursor"): _R.TOPIC_CONSUME,
        ("GET", _SUB + "/position/{position}"): _R.TOPIC_CONSUME,
        ("GET", _TOPIC + "/partitioned-stats"): _R.TOPIC_LOOKUP,
        ("PUT", _TOPIC + "/unload"): _R.TENANT_ADMIN,
        ("DELETE", _TOPIC): _R.TENANT_ADMIN,
        ("DELETE", _TOPIC + "/partitions"): _R.TENANT_ADMIN,
        ("POST", _TOPIC + "/terminate"): _R.TENANT_ADMIN,
        ("POST", _TOPIC + "/terminate/partitions"): _R.TENANT_ADMIN,
        ("GET", _SCHEMAS + "/schema"): _R.TOPIC_LOOKUP,
        ("GET", _SCHEMAS + "/schema/{version}"): _R.TOPIC_LOOKUP,
        ("GET", _SCHEMAS + "/schemas"): _R.TOPIC_LOOKUP,
        ("POST", _SCHEMAS + "/schema"): _R.TENANT_ADMIN,
        ("DELETE", _SCHEMAS + "/schema"): _R.TENANT_ADMIN,
        ("POST", _SCHEMAS + "/compatibility"): _R.TENANT_ADMIN,
        **{
            (method, _NS + path): _R.TENANT_ADMIN
            for path in (
                "/schemaCompatibilityStrategy",
                "/isAllowAutoUpdateSchema",
                "/schemaValidationEnforced",
            )
            for method in ("GET", "PUT", "POST")
        },
        ("PUT", _TOPIC + "/compaction"): _R.TENANT_ADMIN,
        ("GET", _TOPIC + "/compaction"): _R.TENANT_ADMIN,
        **{
            (method, _NS + "/compactionThreshold"): _R.TENANT_ADMIN
            for method in ("GET", "PUT", "POST", "DELETE")
        },
        **{
            (method, path): _R.TENANT_ADMIN
            for path in (
                _NS + "/deduplication",
                _NS + "/retention",
                _NS + "/messageTTL",
                _NS + "/backlogQuota",
                _NS + "/backlogQuotaMap",
                _TOPIC + "/deduplicationEnabled",
                _TOPIC + "/retention",
                _TOPIC + "/messageTTL",
                _TOPIC + "/backlogQuota",
                _TOPIC + "/backlogQuotaMap",
                _NS + "/subscriptionGroups",
                _NS + "/subscriptionGroups/{group}",
                _NS + "/permissions",
                _NS + "/permissions/{role}",
                _NS + "/permissions/subscription",
                _NS + "/permissions/subscription/{subscription}",
                _NS + "/permissions/{subscription}/{role}",
                _TOPIC + "/permissions",
                _TOPIC + "/permissions/{role}",
            )
            for method in ("GET", "POST", "DELETE")
        },
    }
)
"""(method, route path template) -> requirement; anything else needs a super user."""


def _reply(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def auth_middleware(
    security: BrokerSecurity, *, authenticate_metrics_endpoint: bool = False
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware authenticating and authorizing every admin request (module docstring); it passes
    everything through when authentication is off, and ``GET /metrics`` unless
    ``authenticate_metrics_endpoint``."""
    open_paths = OPEN_PATHS if authenticate_metrics_endpoint else OPEN_PATHS | {METRICS_PATH}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        authentication = security.authentication
        if authentication is None or request.path in open_paths or _open_route(request):
            return await handler(request)
        try:
            result = authentication.authenticate_http(
                request.headers.get("Authorization"),
                peer_certificate_der(request),
                request.headers.get("X-Pulsar-Auth-Method-Name"),
            )
        except AuthenticationError as exc:
            return _reply(401, f"Authentication required: {exc}")
        denial = _denial(security, request, result.role)
        if denial is not None:
            return _reply(403, denial)
        return await handler(request)

    return middleware


def _open_route(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    return request.method in ("GET", "HEAD") and resource is not None and resource.canonical in OPEN_ROUTES


def _denial(security: BrokerSecurity, request: web.Request, role: str) -> str | None:
    """Why ``role`` may not make ``request``, or None when it may (or authorization is off)."""
    authz = security.authorization
    resource = request.match_info.route.resource
    if authz is None or resource is None:  # no matching route: the router answers 404/405
        return None
    method = "GET" if request.method == "HEAD" else request.method
    need = ROUTE_REQUIREMENTS.get((method, resource.canonical), Requirement.SUPER_USER)
    info = request.match_info
    tenant = info.get("tenant", "")
    namespace = f"{tenant}/{info.get('namespace', '')}"
    topic = _topic_name(info)
    if need is Requirement.AUTHENTICATED or authz.is_super_user(role):
        return None
    if need in (Requirement.TOPIC_LOOKUP, Requirement.TOPIC_CONSUME) and topic is None:
        need = Requirement.TENANT_ADMIN  # a topic name that does not parse: only an admin learns why (400)
    if need is Requirement.TENANT_ADMIN:
        allowed = bool(tenant) and authz.is_tenant_admin(role, tenant)
    elif need is Requirement.NAMESPACE_LOOKUP:
        allowed = authz.can_lookup(role, namespace, None)
    elif need is Requirement.TOPIC_LOOKUP and topic is not None:
        allowed = authz.can_lookup(role, topic.namespace_name, topic.partitioned_topic_name)
    elif need is Requirement.TOPIC_CONSUME and topic is not None:
        subscription = info.get("subscription", "")
        allowed = authz.can_consume(role, topic.namespace_name, topic.partitioned_topic_name, subscription)
    else:  # SUPER_USER, and the super user was let through above
        allowed = False
    if allowed:
        return None
    return f"Role {role} is not authorized: {request.method} {request.path} needs {need.value}"


def _topic_name(info: web.UrlMappingMatchInfo) -> TopicName | None:
    """The topic a route names, or None (no topic in the route, or a bad name: then tenant admin decides)."""
    if "topic" not in info:
        return None
    try:
        domain = info.get("domain", "persistent")  # the schema routes name no domain (persistent topics)
        return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicNameError:
        return None
