"""Admin request bodies checked before anything is stored: JSON with a nesting bound, tenant info and
namespace policies by type.

Pulsar's admin API maps bodies onto typed Java classes (``TenantInfo``, ``Policies``) with Jackson, so an
ill-typed field is refused with 400 before it reaches the metadata store; Quasar stores plain JSON, so it
checks the same fields here. Unknown policy keys are kept as they are (Pulsar's mapper ignores unknown
properties); the request size is bounded by ``http_max_request_size`` before the body is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from quasar.broker.policies import (
    BACKLOG_QUOTA,
    DEDUPLICATION,
    INT32_MAX,
    MESSAGE_TTL,
    RETENTION,
    BacklogQuota,
    parse_retention,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "json_depth",
    "parse_json",
    "parse_message_ttl",
    "validate_namespace_policies",
    "validate_tenant_info",
]

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays/objects accepted in an admin body (Pulsar's bodies are at most 3 deep)."""


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a decoded JSON value (a scalar is 0), walked without recursion; stops counting once
    past ``limit`` (returns ``limit + 1`` then)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def parse_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode an admin request body; None for an empty one.

    Raises:
        ValueError: not JSON, or nested deeper than ``max_depth`` (admin: 400). The C decoder's own recursion
            guard stops a body nested thousands deep before Python's stack could; the depth walk bounds what
            is accepted far below that.
    """
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"request body is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError(f"request body is nested deeper than {max_depth} levels") from None
    if json_depth(value, max_depth) > max_depth:
        raise ValueError(f"request body is nested deeper than {max_depth} levels")
    return value


def validate_tenant_info(body: Any) -> dict[str, Any]:
    """A TenantInfo body ``{"adminRoles": [str], "allowedClusters": [str]}`` (both optional, default []);
    other keys are kept. Raises ValueError (400) for a field of the wrong type."""
    if body is None:
        return {"adminRoles": [], "allowedClusters": []}
    if not isinstance(body, dict):
        raise ValueError(f"tenant info must be a JSON object, got {type(body).__name__}")
    info = dict(body)
    for key in ("adminRoles", "allowedClusters"):
        value = info.setdefault(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"tenant info field {key} must be a list of strings, got {value!r:.100}")
    return info


def parse_message_ttl(value: Any) -> int:
    """A message TTL in seconds: an integer in [0, 2^31 - 1] (Pulsar's ``Integer``); raises ValueError (400)."""
    if type(value) is not int or not 0 <= value <= INT32_MAX:
        raise ValueError(f"messageTTL must be an integer in [0, {INT32_MAX}] (seconds), got {value!r:.100}")
    return value


def _dedup(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{DEDUPLICATION} must be true or false, got {value!r:.100}")
    return value


def _quota(value: Any) -> dict[str, Any]:
    return BacklogQuota.from_json(value).to_json()


_POLICY_CHECKS: dict[str, Callable[[Any], Any]] = {
    DEDUPLICATION: _dedup,
    RETENTION: parse_retention,
    MESSAGE_TTL: parse_message_ttl,
    BACKLOG_QUOTA: _quota,
}


def validate_namespace_policies(body: Any) -> dict[str, Any]:
    """Namespace policies as given at creation (``PUT /admin/v2/namespaces/{tenant}/{ns}``): a JSON object
    whose known policies (``deduplicationEnabled`` bool, ``retention_policies``, ``message_ttl_in_seconds``
    int >= 0, ``backlog_quota``) have their type; a null policy is dropped (unset). Returns the normalised
    policies; raises ValueError (400) naming the first bad field."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError(f"namespace policies must be a JSON object, got {type(body).__name__}")
    policies: dict[str, Any] = {}
    for key, value in body.items():
        if value is None:
            continue
        check = _POLICY_CHECKS.get(key)
        policies[key] = value if check is None else check(value)
    return policies
