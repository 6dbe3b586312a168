"""RocketMQ consumer-group policies over the admin REST API (``broker/rocketmq/group_policy.py``).

RocketMQ keeps a ``SubscriptionGroupConfig`` per group (``mqadmin updateSubGroup``); Quasar keeps it per
namespace, as the namespace policy ``rocketmq_subscription_groups``, with RocketMQ's field names:

- ``GET /admin/v2/namespaces/{tenant}/{namespace}/subscriptionGroups``: ``{group: config}`` (``{}`` when none);
- ``GET .../subscriptionGroups/{group}``: the group's config, 404 "Subscription group not found" when unset;
- ``POST .../subscriptionGroups/{group}`` with ``{"consumeMessageOrderly": bool, "retryMaxTimes": int}`` (both
  optional; defaults false and 16; ``retryMaxTimes`` in [0, 1000]): set it, 204; 400 naming a bad field;
- ``DELETE .../subscriptionGroups/{group}``: unset it (the defaults apply again), 204.

Receives read the policy when they start, so a change applies to the next receive; clients learn ``fifo`` from
their next Telemetry settings exchange. 404 for an unknown namespace; group names follow RocketMQ's rule
(``[%|a-zA-Z0-9_-]``, at most 120 characters; 400 otherwise).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from quasar.broker.admin.request_params import existing_namespace, service_of
from quasar.broker.admin.validation import parse_json
from quasar.broker.rocketmq.group_policy import GROUPS_POLICY, parse_group_config

__all__ = ["register"]

_PATH = "/admin/v2/namespaces/{tenant}/{namespace}/subscriptionGroups"
_GROUP = re.compile(r"[%|a-zA-Z0-9_-]{1,120}")


def _groups(request: web.Request, namespace: str) -> dict[str, Any]:
    value = service_of(request).namespace_policy(namespace, GROUPS_POLICY)
    return dict(value) if isinstance(value, dict) else {}


def _group(request: web.Request) -> str:
    group = request.match_info["group"]
    if not _GROUP.fullmatch(group):
        raise ValueError(f"consumer group {group[:130]!r} must match [%|a-zA-Z0-9_-]{{1,120}}")
    return group


async def get_groups(request: web.Request) -> web.Response:
    return web.json_response(_groups(request, existing_namespace(request)))


async def get_group(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    config = _groups(request, namespace).get(_group(request))
    if config is None:
        return web.json_response({"reason": "Subscription group not found"}, status=404)
    return web.json_response(config)


async def post_group(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    group = _group(request)
    config = parse_group_config(parse_json(await request.text()))
    groups = _groups(request, namespace)
    groups[group] = config
    await service_of(request).set_namespace_policy(namespace, GROUPS_POLICY, groups)
    return web.Response(status=204)


async def delete_group(request: web.Request) -> web.Response:
    namespace = existing_namespace(request)
    group = _group(request)
    groups = _groups(request, namespace)
    if groups.pop(group, None) is not None:
        await service_of(request).set_namespace_policy(namespace, GROUPS_POLICY, groups or None)
    return web.Response(status=204)


def register(app: web.Application) -> None:
    """Add the routes (before the ``{domain}`` topic templates, which never match ``namespaces``)."""
    app.add_routes(
        [
            web.get(_PATH, get_groups),
            web.get(_PATH + "/{group}", get_group),
            web.post(_PATH + "/{group}", post_group),
            web.delete(_PATH + "/{group}", delete_group),
        ]
    )
