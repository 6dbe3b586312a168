"""Tenants and namespaces over the admin REST API, beyond create and list (Pulsar ``TenantsBase`` and
``NamespacesBase``).

- ``GET /admin/v2/tenants/{tenant}``: the TenantInfo JSON ``{"adminRoles": [...], "allowedClusters": [...]}``;
  404 "Tenant does not exist".
- ``POST /admin/v2/tenants/{tenant}``, body TenantInfo: replace it (204); 404 for an unknown tenant, 400 for a
  bad body.
- ``DELETE /admin/v2/tenants/{tenant}``: 204; 404 unknown, 409 "The tenant still has active namespaces" while
  it has one. ``?force=true`` answers 405 as Pulsar does with ``forceDeleteTenantAllowed`` off (Quasar
  cannot delete topics, so it never allows it).
- ``GET /admin/v2/namespaces/{tenant}/{ns}``: the namespace's Policies JSON (Pulsar's field names, the stored
  policies over Pulsar's defaults for ``auth_policies``, ``replication_clusters``, ``backlog_quota_map``,
  ``deleted``...); 404 "Namespace does not exist".
- ``DELETE /admin/v2/namespaces/{tenant}/{ns}``: 204; 404 unknown, 409 "Cannot delete non empty namespace"
  while it holds a topic (persistent, non-persistent or partitioned); ``?force=true`` answers 405 (Pulsar's
  ``forceDeleteNamespaceAllowed`` off).
- ``GET /admin/v2/namespaces/{tenant}/{ns}/topics[?mode=PERSISTENT|NON_PERSISTENT|ALL]``: the namespace's
  topics (partitions listed one by one, as Pulsar ``getTopics``); default ``PERSISTENT``.
"""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from quasar.broker.admin.request_params import existing_namespace as _namespace
from quasar.broker.admin.request_params import query_flag
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.admin.validation import parse_json, validate_tenant_info
from quasar.broker.broker_service import BrokerService, TopicExistsError
from quasar.broker.errors import NamespaceNotFoundError
from quasar.broker.system_topics import PendingHalfMessagesError, delete_system_topics, user_topics

__all__ = ["register"]

_NS = "/admin/v2/namespaces/{tenant}/{namespace}"

_POLICY_DEFAULTS: dict[str, Any] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
    "backlog_quota_map": {},
    "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
    "topicDispatchRate": {},
    "subscriptionDispatchRate": {},
    "clusterSubscribeRate": {},
    "latency_stats_sample_rate": {},
    "deleted": False,
    "encryption_required": False,
    "subscription_auth_mode": "None",
    "schema_validation_enforced": False,
    "is_allow_auto_update_schema": True,
    "offload_threshold": -1,
}
"""Pulsar ``Policies`` fields a fresh namespace shows (``replication_clusters`` is this cluster)."""

_MODES = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": ("non-persistent",),
          "ALL": ("persistent", "non-persistent")}  # fmt: skip


def _reason(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _force(request: web.Request) -> bool:
    return query_flag(request, "force")


def _tenant(request: web.Request) -> str:
    tenant = request.match_info["tenant"]
    if not _service(request).tenant_exists(tenant):
        raise NamespaceNotFoundError("Tenant does not exist")
    return tenant


async def get_tenant(request: web.Request) -> web.Response:
    """GET /admin/v2/tenants/{tenant}: TenantInfo (module docstring)."""
    tenant = _tenant(request)
    return web.json_response(validate_tenant_info(_service(request).resources.tenants[tenant]))


async def update_tenant(request: web.Request) -> web.Response:
    """POST /admin/v2/tenants/{tenant}, body TenantInfo: 204 (module docstring)."""
    tenant = _tenant(request)
    info = validate_tenant_info(parse_json(await request.text()))
    await _service(request).resources.update_tenant(tenant, info)
    return web.Response(status=204)


async def delete_tenant(request: web.Request) -> web.Response:
    """DELETE /admin/v2/tenants/{tenant}: 204, 409 while it has namespaces (module docstring)."""
    tenant = _tenant(request)
    if _force(request):
        return _reason(405, "Broker doesn't allow forced deletion of tenants")
    service = _service(request)
    if service.namespaces(tenant):
        raise TopicExistsError("The tenant still has active namespaces")
    await service.resources.delete_tenant(tenant)
    return web.Response(status=204)


async def get_namespace_policies(request: web.Request) -> web.Response:
    """GET /admin/v2/namespaces/{tenant}/{ns}: Pulsar Policies JSON (module docstring)."""
    namespace = _namespace(request)
    service = _service(request)
    policies = copy.deepcopy(_POLICY_DEFAULTS)
    policies["replication_clusters"] = [service.cluster_name]
    policies.update(copy.deepcopy(service.resources.namespaces[namespace]))
    return web.json_response(policies)


def _namespace_topics(
    service: BrokerService, namespace: str, domains: tuple[str, ...], *, include_system: bool = False
) -> list[str]:
    """The namespace's topics in ``domains``; system topics only with ``include_system`` (Pulsar
    ``include_system_topic``, ``broker/system_topics.py``)."""
    topics: list[str] = []
    for domain in domains:
        topics += service.list_topics(namespace, domain)
    return topics if include_system else user_topics(topics)


async def delete_namespace(request: web.Request) -> web.Response:
    """DELETE /admin/v2/namespaces/{tenant}/{ns}: 204, 409 while it has topics (module docstring)."""
    namespace = _namespace(request)
    if _force(request):
        return _reason(405, "Broker doesn't allow forced deletion of namespaces")
    service = _service(request)
    domains = _MODES["ALL"]
    topics = _namespace_topics(service, namespace, domains, include_system=True)
    if user_topics(topics) or any(
        user_topics(service.partitioned_topics(namespace, domain)) for domain in domains
    ):
        raise TopicExistsError("Cannot delete non empty namespace")
    try:  # as Pulsar, the namespace's system topics go with it
        await delete_system_topics(service, namespace, topics)
    except PendingHalfMessagesError as exc:
        raise TopicExistsError(str(exc)) from None
    await service.resources.delete_namespace(namespace)
    return web.Response(status=204)


async def get_namespace_topics(request: web.Request) -> web.Response:
    """GET /admin/v2/namespaces/{tenant}/{ns}/topics[?mode=...]: topic names (module docstring)."""
    namespace = _namespace(request)
    mode = request.query.get("mode", "PERSISTENT").upper()
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r:.50}")
    include_system = query_flag(request, "include_system_topic")
    return web.json_response(
        _namespace_topics(_service(request), namespace, _MODES[mode], include_system=include_system)
    )


def register(app: web.Application) -> None:
    """Add the tenant and namespace routes; call before the ``/admin/v2/{domain}/{tenant}/{namespace}``
    topic-list route, which would otherwise take ``GET /admin/v2/namespaces/{tenant}/{ns}``."""
    app.add_routes(
        [
            web.get("/admin/v2/tenants/{tenant}", get_tenant),
            web.post("/admin/v2/tenants/{tenant}", update_tenant),
            web.delete("/admin/v2/tenants/{tenant}", delete_tenant),
            web.get(_NS, get_namespace_policies),
            web.delete(_NS, delete_namespace),
            web.get(_NS + "/topics", get_namespace_topics),
        ]
    )
