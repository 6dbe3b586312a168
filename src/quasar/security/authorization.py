"""Authorization: may this role do that? (Pulsar ``PulsarAuthorizationProvider``, reference/security.md §3).

Permissions live in each namespace's policies as Pulsar stores them (``auth_policies``)::

    {"namespace_auth": {role: [action, ...]},                 # namespace-wide grants
     "destination_auth": {topic: {role: [action, ...]}},      # per-topic grants (full topic name)
     "subscription_auth_roles": {subscription: [role, ...]}}  # who may use a subscription

Actions are Pulsar's ``AuthAction``: ``produce``, ``consume``, ``functions``, ``sources``, ``sinks``,
``packages``. Rules:

- a super user (``super_user_roles``) may do everything; a tenant's admin (TenantInfo ``adminRoles``) may do
  everything in that tenant ("admin" below);
- produce needs admin or ``produce`` on the namespace or on the topic (a partition is judged by its
  partitioned topic's grants); consume needs admin or ``consume`` likewise, and when the subscription has
  roles listed in ``subscription_auth_roles``, the role among them; lookup (LOOKUP, PARTITIONED_METADATA,
  stats, metadata) needs produce or consume;
- a role of None (not authenticated) is denied everything.

The policies are read through a :class:`PolicySource` (the broker's in-memory copy of its metadata), so every
check is a few dictionary look-ups and never waits.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol

from quasar.errors import QuasarError

__all__ = [
    "AUTH_POLICIES",
    "AuthAction",
    "AuthorizationError",
    "AuthorizationService",
    "PolicySource",
    "parse_actions",
    "updated_auth_policies",
]

AUTH_POLICIES = "auth_policies"
"""The namespace-policies key holding the permissions (Pulsar ``Policies.auth_policies``)."""


class AuthorizationError(QuasarError):
    """The role may not do this; the broker answers ServerError AuthorizationError or HTTP 403."""


class AuthAction(enum.StrEnum):
    """Pulsar's ``AuthAction``."""

    produce = "produce"
    consume = "consume"
    functions = "functions"
    sources = "sources"
    sinks = "sinks"
    packages = "packages"


def parse_actions(body: Any) -> list[str]:
    """A grant's body (a JSON list of action names) as sorted, distinct action names. Raises ValueError
    naming the bad entry."""
    if not isinstance(body, list):
        raise ValueError('permissions must be a JSON list of actions, e.g. ["produce", "consume"]')
    actions = set()
    for item in body:
        if not isinstance(item, str) or item not in AuthAction.__members__:
            raise ValueError(f"unknown action {item!r}; actions are {', '.join(AuthAction.__members__)}")
        actions.add(item)
    return sorted(actions)


def updated_auth_policies(
    current: Mapping[str, Any] | None,
    *,
    topic: str | None = None,
    subscription: str | None = None,
    role: str | None = None,
    actions: Iterable[str] | None = None,
    roles: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A copy of ``current`` (``auth_policies``) with one change:

    - ``role`` + ``actions``: grant (``actions`` None: revoke) on the namespace, or on ``topic``;
    - ``subscription`` + ``roles``: set (``roles`` None: remove) the roles allowed on ``subscription``.
    """
    policies: dict[str, Any] = {
        "namespace_auth": dict((current or {}).get("namespace_auth") or {}),
        "destination_auth": {k: dict(v) for k, v in ((current or {}).get("destination_auth") or {}).items()},
        "subscription_auth_roles": dict((current or {}).get("subscription_auth_roles") or {}),
    }
    if subscription is not None:
        subs = policies["subscription_auth_roles"]
        if roles is None:
            subs.pop(subscription, None)
        else:
            subs[subscription] = sorted(set(roles))
        return policies
    if role is None:
        raise ValueError("a grant or revoke needs a role")
    destinations = policies["destination_auth"]
    table = policies["namespace_auth"] if topic is None else destinations.setdefault(topic, {})
    if actions is None:
        table.pop(role, None)
    else:
        table[role] = sorted(set(actions))
    if topic is not None and not table:
        del policies["destination_auth"][topic]
    return policies


class PolicySource(Protocol):
    """Where the authorization service reads tenants and namespace policies."""

    def tenant_admin_roles(self, tenant: str) -> Collection[str]:
        """The tenant's ``adminRoles`` (empty for an unknown tenant)."""
        ...

    def auth_policies(self, namespace: str) -> Mapping[str, Any]:
        """The namespace's ``auth_policies`` (empty for an unknown namespace or none set)."""
        ...


class AuthorizationService:
    """Permission checks (module docstring).

    Args:
        super_user_roles: roles that may do everything.
        source: tenants and namespace policies.
    """

    def __init__(self, super_user_roles: Collection[str], source: PolicySource) -> None:
        self.super_user_roles = frozenset(super_user_roles)
        self._source = source

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_user_roles

    def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        """Super user, or one of ``tenant``'s ``adminRoles``."""
        if role is None:
            return False
        return role in self.super_user_roles or role in self._source.tenant_admin_roles(tenant)

    def _granted(self, role: str, namespace: str, topic: str | None, action: str) -> bool:
        policies = self._source.auth_policies(namespace)
        if action in _entry(_entry(policies, "namespace_auth", dict), role, list):
            return True
        if topic is None:
            return False
        return action in _entry(_entry(_entry(policies, "destination_auth", dict), topic, dict), role, list)

    def can_produce(self, role: str | None, namespace: str, topic: str) -> bool:
        """Whether ``role`` may publish on ``topic`` (the full name; for a partition, its partitioned
        topic's) in ``namespace`` (``tenant/ns``)."""
        if role is None:
            return False
        return self.is_tenant_admin(role, _tenant(namespace)) or self._granted(
            role, namespace, topic, AuthAction.produce
        )

    def can_consume(
        self, role: str | None, namespace: str, topic: str | None, subscription: str = ""
    ) -> bool:
        """Whether ``role`` may consume from ``topic`` (None: any topic of ``namespace`` by a namespace grant)
        on ``subscription`` ("" = no particular subscription)."""
        if role is None:
            return False
        if self.is_tenant_admin(role, _tenant(namespace)):
            return True
        if not self._granted(role, namespace, topic, AuthAction.consume):
            return False
        if subscription:
            policies = self._source.auth_policies(namespace)
            allowed = _entry(_entry(policies, "subscription_auth_roles", dict), subscription, list)
            if allowed and role not in allowed:
                return False
        return True

    def can_lookup(self, role: str | None, namespace: str, topic: str | None) -> bool:
        """Whether ``role`` may look ``topic`` up (produce or consume; ``topic`` None: any topic of the
        namespace by a namespace grant)."""
        if role is None:
            return False
        if self.is_tenant_admin(role, _tenant(namespace)):
            return True
        return self._granted(role, namespace, topic, AuthAction.produce) or self._granted(
            role, namespace, topic, AuthAction.consume
        )


def _entry(table: Any, key: str, kind: type) -> Any:
    """``table[key]`` when both have the expected shapes, else an empty ``kind``: stored policies written by
    hand or by another tool are read defensively, an ill-typed entry grants nothing."""
    value = table.get(key) if isinstance(table, Mapping) else None
    return value if isinstance(value, kind) else kind()


def _tenant(namespace: str) -> str:
    return namespace.split("/", 1)[0]
