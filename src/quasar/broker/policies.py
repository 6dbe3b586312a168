"""Namespace and topic policies: retention, message TTL, backlog quotas (semantics.md B1, B6).

Policies are stored as JSON in the metadata store (namespace: ``/admin/policies/<tenant>/<ns>``, topic:
``/admin/topic-policies/<domain>/<tenant>/<ns>/<topic>``) under these keys, in Pulsar's admin JSON shapes:

    key                     value                                               Pulsar admin path
    deduplicationEnabled    true / false                                        .../deduplication(Enabled)
    retention_policies      {"retentionTimeInMinutes": int, "retentionSizeInMB": int}   .../retention
    message_ttl_in_seconds  int (0 = off)                                       .../messageTTL
    backlog_quota           {"limitSize": bytes, "limitTime": s, "policy": str} .../backlogQuota

-1 means unlimited for retention and backlog limits. A topic policy wins over the namespace's, which wins
over the broker default (``PolicyDefaults``, from the broker config).

Enforcement (run by ``BrokerService.run_policy_checks`` on a timer):

- **TTL** (``expire_messages``): every subscription's mark-delete moves past the entries published more than
  ``message_ttl_in_seconds`` ago (Pulsar ``PersistentMessageExpiryMonitor``, by publish time).
- **Backlog quota** (``check_backlog_quota``): the backlog of the slowest subscription, in bytes (average
  entry size x backlog entries) and in age (publish time of its first unacknowledged entry), against the
  limits. When exceeded: ``producer_request_hold`` and ``producer_exception`` disconnect the producers and
  refuse new ones (ServerError ProducerBlockedQuotaExceededError 7 / ...Exception 8) until the backlog is
  back under the quota; ``consumer_backlog_eviction`` moves the slowest cursors forward (size: down to 90 % of
  the limit; time: past the entries older than the limit) (Pulsar ``BacklogQuotaManager``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from quasar.ledger.position import Position
from quasar.protocol import parse_headers_and_payload

if TYPE_CHECKING:
    from quasar.broker.subscription import Subscription
    from quasar.ledger.managed_ledger import ManagedLedger
    from quasar.protocol import TopicName

__all__ = [
    "BACKLOG_POLICIES",
    "BACKLOG_QUOTA",
    "DEDUPLICATION",
    "INT32_MAX",
    "INT64_MAX",
    "MESSAGE_TTL",
    "RETENTION",
    "BacklogQuota",
    "PolicyDefaults",
    "PolicyTopic",
    "check_backlog_quota",
    "expire_messages",
    "expire_older_than",
    "parse_retention",
]

log = logging.getLogger(__name__)

DEDUPLICATION = "deduplicationEnabled"
RETENTION = "retention_policies"
MESSAGE_TTL = "message_ttl_in_seconds"
BACKLOG_QUOTA = "backlog_quota"

PRODUCER_REQUEST_HOLD = "producer_request_hold"
PRODUCER_EXCEPTION = "producer_exception"
CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
BACKLOG_POLICIES = (PRODUCER_REQUEST_HOLD, PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION)
EVICTION_REDUCTION_FACTOR = 0.9  # Pulsar reduces a size-evicted backlog to 90 % of the limit


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _int(value: Any, name: str, minimum: int = -1, maximum: int = INT64_MAX) -> int:
    """``value`` as a policy integer in ``[minimum, maximum]`` (Pulsar's field is a Java int or long, whose
    range bounds it); raises ValueError naming ``name``."""
    if type(value) is not int or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an integer in [{minimum}, {maximum}], got {value!r:.60}")
    return value


def parse_retention(body: Any) -> dict[str, int]:
    """Validate a retention body ``{"retentionTimeInMinutes": int, "retentionSizeInMB": int}`` (-1 =
    unlimited); raises ValueError."""
    if not isinstance(body, dict):
        raise ValueError(f"expected a retention policy object, got {body!r}")
    return {
        "retentionTimeInMinutes": _int(
            body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", maximum=INT32_MAX
        ),
        "retentionSizeInMB": _int(body.get("retentionSizeInMB", 0), "retentionSizeInMB"),
    }


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """``limit_size`` bytes and ``limit_time_s`` seconds of backlog (-1 = unlimited) and the ``policy``."""

    limit_size: int = -1
    limit_time_s: int = -1
    policy: str = PRODUCER_REQUEST_HOLD

    @property
    def unlimited(self) -> bool:
        return self.limit_size < 0 and self.limit_time_s < 0

    @classmethod
    def from_json(cls, body: Any) -> BacklogQuota:
        """Parse Pulsar's ``{"limitSize": bytes, "limitTime": s, "policy": name}``; raises ValueError."""
        if not isinstance(body, dict):
            raise ValueError(f"expected a backlog quota object, got {body!r}")
        policy = body.get("policy", PRODUCER_REQUEST_HOLD)
        if policy not in BACKLOG_POLICIES:
            raise ValueError(f"policy must be one of {BACKLOG_POLICIES}, got {policy!r}")
        return cls(
            _int(body.get("limitSize", -1), "limitSize"),
            _int(body.get("limitTime", -1), "limitTime", maximum=INT32_MAX),
            policy,
        )

    def to_json(self) -> dict[str, Any]:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time_s, "policy": self.policy}


@dataclass(frozen=True, slots=True)
class PolicyDefaults:
    """Broker-wide defaults (broker.conf ``defaultRetentionTimeInMinutes``/``SizeInMB`` 0/0,
    ``ttlDurationDefaultInSeconds`` 0, ``backlogQuotaDefaultLimitBytes``/``Second`` -1 with
    ``producer_request_hold``)."""

    retention_time_minutes: int = 0
    retention_size_mb: int = 0
    message_ttl_s: int = 0
    backlog_quota: BacklogQuota = field(default_factory=BacklogQuota)


class PolicyTopic(Protocol):
    """What policy enforcement uses of a persistent topic (``PersistentTopic`` implements it)."""

    message_ttl_s: int
    backlog_quota: BacklogQuota
    backlog_blocked: str | None
    """The producer policy in force while the backlog quota is exceeded; set by ``check_backlog_quota``."""

    @property
    def name(self) -> TopicName: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...

    def disconnect_producers(self) -> None: ...

    def find_position_by_publish_time(self, publish_time_ms: int) -> Position: ...


def _publish_time(topic: PolicyTopic, position: Position) -> int | None:
    entry = topic.ledger.get_entry(position)
    if entry is None:
        return None
    return int(parse_headers_and_payload(entry.data).metadata.publish_time)


def expire_older_than(topic: PolicyTopic, cutoff_ms: int, subscriptions: list[Any]) -> int:
    """Move the mark-delete of ``subscriptions`` past the entries published before ``cutoff_ms``; returns how
    many subscriptions moved."""
    first_kept = topic.find_position_by_publish_time(cutoff_ms)
    target = topic.ledger.previous_position(first_kept)
    moved = 0
    for subscription in subscriptions:
        if target > subscription.cursor.mark_delete_position:
            subscription.expire_until(target)
            moved += 1
    return moved


def expire_messages(topic: PolicyTopic, now_ms: int) -> int:
    """Apply the topic's message TTL to every durable subscription; returns how many moved."""
    ttl_s = topic.message_ttl_s
    if ttl_s <= 0:
        return 0
    subscriptions = [s for s in topic.subscriptions.values() if s.durable]
    if not subscriptions:
        return 0
    return expire_older_than(topic, now_ms - ttl_s * 1000, subscriptions)


def check_backlog_quota(topic: PolicyTopic, now_ms: int) -> bool:
    """Check (and for ``consumer_backlog_eviction`` enforce) the topic's backlog quota; sets
    ``topic.backlog_blocked`` to the producer policy in force, or None. Returns whether it was exceeded."""
    quota: BacklogQuota = topic.backlog_quota
    subscriptions = [s for s in topic.subscriptions.values() if s.durable]
    if quota.unlimited or not subscriptions:
        topic.backlog_blocked = None
        return False
    ledger = topic.ledger
    average = ledger.total_size / max(ledger.number_of_entries, 1)
    slowest = max(subscriptions, key=lambda s: s.cursor.number_of_entries_in_backlog)
    backlog_entries = slowest.cursor.number_of_entries_in_backlog
    over_size = quota.limit_size >= 0 and backlog_entries * average > quota.limit_size
    over_time = False
    if quota.limit_time_s >= 0 and backlog_entries > 0:
        oldest = min(
            (ledger.next_valid_position(s.cursor.mark_delete_position) for s in subscriptions),
            default=None,
        )
        published = _publish_time(topic, oldest) if oldest is not None else None
        over_time = published is not None and now_ms - published > quota.limit_time_s * 1000
    if not (over_size or over_time):
        topic.backlog_blocked = None
        return False
    if quota.policy != CONSUMER_BACKLOG_EVICTION:
        if topic.backlog_blocked is None:
            log.info("%s: backlog quota exceeded, %s", topic.name, quota.policy)
        topic.backlog_blocked = quota.policy
        topic.disconnect_producers()
        return True
    topic.backlog_blocked = None
    if over_time:
        expire_older_than(topic, now_ms - quota.limit_time_s * 1000, subscriptions)
    if over_size:
        keep = int(quota.limit_size * EVICTION_REDUCTION_FACTOR / max(average, 1))
        for subscription in subscriptions:
            cursor = subscription.cursor
            skip = cursor.number_of_entries_in_backlog - keep
            if skip > 0:
                subscription.expire_until(ledger.position_after(cursor.mark_delete_position, skip))
    log.info("%s: backlog quota exceeded, evicted the slowest cursors", topic.name)
    return True
