"""Permission grants over the admin REST, with Pulsar's admin v2 paths and JSON (reference/security.md §3).

Namespace level (Pulsar ``NamespacesBase``):

- ``GET /admin/v2/namespaces/{tenant}/{ns}/permissions``: ``{role: [actions]}``;
- ``POST .../permissions/{role}`` with a JSON list of actions (``["produce", "consume"]``): grant (replaces
  the role's actions), 204; ``DELETE .../permissions/{role}``: revoke, 204;
- ``GET .../permissions/subscription``: ``{subscription: [roles]}``;
- ``POST .../permissions/subscription/{subscription}`` with a JSON list of roles: only these roles (with
  consume) may use the subscription, 204; ``DELETE .../permissions/{subscription}/{role}``: drop one role, 204.

Topic level (Pulsar ``PersistentTopicsBase``), ``{topic}`` = ``/admin/v2/{domain}/{tenant}/{ns}/{topic}``;
a partition's grants are its partitioned topic's:

- ``GET {topic}/permissions``: the effective ``{role: [actions]}``, the namespace's grants united with the
  topic's;
- ``POST {topic}/permissions/{role}`` (list of actions) / ``DELETE {topic}/permissions/{role}``: 204; revoking
  a role that has no topic-level grant answers 412 "Permissions are not set at the topic level", as Pulsar.

Errors: 400 for a bad body or name, 404 for an unknown namespace. Grants are stored in the namespace policy
``auth_policies`` and take effect at once for new LOOKUP/PRODUCER/SUBSCRIBE commands.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from quasar.broker.admin.request_params import TOPIC_PATH
from quasar.broker.admin.request_params import existing_namespace as _namespace
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.errors import NotAllowedError
from quasar.protocol import TopicName
from quasar.security.authorization import AUTH_POLICIES, parse_actions, updated_auth_policies

__all__ = ["register"]


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    domain = info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise ValueError(f"unknown domain {domain}")
    return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")


def _policies(request: web.Request, namespace: str) -> dict[str, Any]:
    value = _service(request).resources.namespaces.get(namespace, {}).get(AUTH_POLICIES)
    return value if isinstance(value, dict) else {}


async def _json(request: web.Request) -> Any:
    text = await request.text()
    if not text.strip():
        raise ValueError("the request body must be a JSON list")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"request body is not valid JSON: {exc.msg}") from None


async def _update(request: web.Request, namespace: str, **change: Any) -> None:
    await _service(request).resources.update_namespace_policy(
        namespace,
        AUTH_POLICIES,
        lambda current: updated_auth_policies(current if isinstance(current, dict) else None, **change),
    )


# ---------------------------------------------------------------------- namespace level
async def get_namespace_permissions(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return web.json_response(_policies(request, namespace).get("namespace_auth") or {})


async def grant_namespace(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    actions = parse_actions(await _json(request))
    await _update(request, namespace, role=request.match_info["role"], actions=actions)
    return web.Response(status=204)


async def revoke_namespace(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    await _update(request, namespace, role=request.match_info["role"], actions=None)
    return web.Response(status=204)


async def get_subscription_permissions(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return web.json_response(_policies(request, namespace).get("subscription_auth_roles") or {})


async def grant_subscription(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    roles = await _json(request)
    if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
        raise ValueError("the body must be a JSON list of role names")
    await _update(request, namespace, subscription=request.match_info["subscription"], roles=roles)
    return web.Response(status=204)


async def revoke_subscription(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    subscription, role = request.match_info["subscription"], request.match_info["role"]
    current = (_policies(request, namespace).get("subscription_auth_roles") or {}).get(subscription) or []
    remaining = [r for r in current if r != role]
    await _update(request, namespace, subscription=subscription, roles=remaining or None)
    return web.Response(status=204)


# ---------------------------------------------------------------------- topic level
async def get_topic_permissions(request: web.Request) -> web.Response:
    topic = _topic(request)
    policies = _policies(request, _namespace(request))
    merged: dict[str, set[str]] = {}
    for table in (
        policies.get("namespace_auth") or {},
        (policies.get("destination_auth") or {}).get(topic.partitioned_topic_name) or {},
    ):
        for role, actions in table.items():
            merged.setdefault(role, set()).update(actions)
    return web.json_response({role: sorted(actions) for role, actions in merged.items()})


async def grant_topic(request: web.Request) -> web.Response:
    topic = _topic(request)
    namespace = _namespace(request)
    actions = parse_actions(await _json(request))
    await _update(
        request,
        namespace,
        topic=topic.partitioned_topic_name,
        role=request.match_info["role"],
        actions=actions,
    )
    return web.Response(status=204)


async def revoke_topic(request: web.Request) -> web.Response:
    topic = _topic(request)
    namespace = _namespace(request)
    role = request.match_info["role"]
    grants = (_policies(request, namespace).get("destination_auth") or {}).get(
        topic.partitioned_topic_name
    ) or {}
    if role not in grants:
        raise NotAllowedError("Permissions are not set at the topic level")
    await _update(request, namespace, topic=topic.partitioned_topic_name, role=role, actions=None)
    return web.Response(status=204)


def register(app: web.Application) -> None:
    """Add the permission routes (module docstring) to the admin application; call it before the routes
    whose templates could shadow them (``{topic}`` catch-alls)."""
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    topic = TOPIC_PATH + "/permissions"
    app.add_routes(
        [
            web.get(ns, get_namespace_permissions),
            web.get(ns + "/subscription", get_subscription_permissions),
            web.post(ns + "/subscription/{subscription}", grant_subscription),
            web.delete(ns + "/{subscription}/{role}", revoke_subscription),
            web.post(ns + "/{role}", grant_namespace),
            web.delete(ns + "/{role}", revoke_namespace),
            web.get(topic, get_topic_permissions),
            web.post(topic + "/{role}", grant_topic),
            web.delete(topic + "/{role}", revoke_topic),
        ]
    )
