"""RocketMQ consumer-group policy (RocketMQ's ``SubscriptionGroupConfig``), per namespace.

Namespace policy :data:`GROUPS_POLICY` = ``{group: {"consumeMessageOrderly": bool, "retryMaxTimes": int}}``,
set over admin REST (``admin/rocketmq_group_routes.py``: ``.../namespaces/{tenant}/{ns}/subscriptionGroups``).
``consumeMessageOrderly`` makes the group FIFO (RocketMQ orderly consumption: a message group's next message
only after the previous one is acked or dead-lettered; pushed to clients as ``Settings.subscription.fifo``, and
QueryAssignment answers one assignment per queue); ``retryMaxTimes`` (default 16) gives
``max_delivery_attempts`` = ``retryMaxTimes + 1`` (17 by default, reference rocketmq-grpc.md §3).
:func:`group_policy` reads it; this module has no I/O and does not load the gRPC stubs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = [
    "DEFAULT_RETRY_MAX_TIMES",
    "GROUPS_POLICY",
    "MAX_RETRY_MAX_TIMES",
    "GroupPolicy",
    "group_policy",
    "parse_group_config",
]

log = logging.getLogger(__name__)

GROUPS_POLICY = "rocketmq_subscription_groups"
"""Namespace policy key: ``{group: {"consumeMessageOrderly": bool, "retryMaxTimes": int}}``."""
DEFAULT_RETRY_MAX_TIMES = 16
MAX_RETRY_MAX_TIMES = 1000


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """A consumer group's settings: ``fifo`` (orderly consumption), ``max_delivery_attempts`` (first
    delivery included; a message is dead-lettered instead of delivered again past it)."""

    fifo: bool = False
    max_delivery_attempts: int = DEFAULT_RETRY_MAX_TIMES + 1


def parse_group_config(value: Any) -> dict[str, Any]:
    """Validate one group's config as the admin API accepts it: a JSON object with only
    ``consumeMessageOrderly`` (bool) and ``retryMaxTimes`` (int in [0, 1000]). Returns the normalized
    object; raises ValueError naming the bad field."""
    if not isinstance(value, dict):
        raise ValueError("a subscription group config must be a JSON object")
    unknown = set(value) - {"consumeMessageOrderly", "retryMaxTimes"}
    if unknown:
        raise ValueError(f"unknown subscription group fields: {sorted(unknown)}")
    orderly = value.get("consumeMessageOrderly", False)
    if type(orderly) is not bool:
        raise ValueError("consumeMessageOrderly must be true or false")
    retries = value.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)
    if type(retries) is not int or not 0 <= retries <= MAX_RETRY_MAX_TIMES:
        raise ValueError(f"retryMaxTimes must be an integer in [0, {MAX_RETRY_MAX_TIMES}]")
    return {"consumeMessageOrderly": orderly, "retryMaxTimes": retries}


def group_policy(service: BrokerService, namespace: str, group: str) -> GroupPolicy:
    """The policy of ``group`` in ``namespace`` (``tenant/ns``); defaults when unset or unreadable.
    rmqcore's Telemetry reply reads ``fifo`` (``subscription.fifo``) and ``max_delivery_attempts``
    (``backoff_policy.max_attempts``) here."""
    try:
        groups = service.namespace_policy(namespace, GROUPS_POLICY)
    except Exception:  # noqa: BLE001 - unknown namespace: the defaults (the receive itself says why)
        return GroupPolicy()
    config = groups.get(group) if isinstance(groups, dict) else None
    if config is None:
        return GroupPolicy()
    try:
        parsed = parse_group_config(config)
    except ValueError:
        log.warning("ignoring the malformed RocketMQ group policy of %s in %s", group, namespace)
        return GroupPolicy()
    return GroupPolicy(bool(parsed["consumeMessageOrderly"]), int(parsed["retryMaxTimes"]) + 1)
