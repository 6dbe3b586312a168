"""Generate ``src/quasar/broker/admin/openapi.json``, the OpenAPI 3.1 document of the admin REST API.

The document is checked in (the broker serves it at ``GET /admin/v2/openapi.json`` from package data); this
script is its source. After adding or changing an admin route, describe it in ``OPERATIONS`` below and run

    python scripts/gen_openapi.py          # rewrite the file
    python scripts/gen_openapi.py --check  # exit 1 when the file is not what this script writes

``tests/broker/test_openapi_spec.py`` fails when a route is missing from the document (or the document names
one the broker does not route) and when the file is stale.

Error answers are Pulsar's ``{"reason": "..."}`` JSON; which status codes an operation documents is derived
from what it takes (a path name: 404 and 412; a body: 400 and 413; authentication: 401 and 403) plus the codes
listed with it (307, 405, 409, 422).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling module, however this script is loaded
from openapi_components import (
    EMPTY,
    ERRORS,
    FORCE,
    INT64,
    JSON,
    NAME_PARAMS,
    PATH_PARAMS,
    SCHEMAS,
    STRINGS,
    TTL,
    body,
    nullable,
    ok,
    query,
    ref,
)

OUTPUT = Path(__file__).resolve().parent.parent / "src" / "quasar" / "broker" / "admin" / "openapi.json"
OPEN_OPERATIONS = {
    "getStatus", "getOpenApiDocument", "getMetrics", "getDashboardRoot", "getDashboard", "getDashboardFile"
}  # served without authentication (admin/auth.py)

# ---------------------------------------------------------------------------------------------- operations
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
SUB = TOPIC + "/subscription/{subscription}"
SCHEMAS_PATH = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"

# (method, path, operationId, tag, summary, extra fields): extra keys are "ok" (2xx responses, default 204),
# "body" (requestBody), "query" (query parameters), "codes" (further error codes: 307, 405, 409, 422)
Op = tuple[str, str, str, str, str, dict[str, Any]]
_OWNER = 307  # answered by the broker that owns the topic: 307 to it in a cluster
OPERATIONS: list[Op] = [
    (
        "GET",
        "/status.html",
        "getStatus",
        "health",
        "Health check: 'OK' while the broker serves",
        {
            "ok": {
                "200": {"description": "Serving", "content": {"text/plain": {"schema": {"type": "string"}}}}
            }
        },
    ),
    (
        "GET",
        "/admin/v2/openapi.json",
        "getOpenApiDocument",
        "health",
        "This OpenAPI document",
        {"ok": ok({"type": "object"})},
    ),
    (
        "GET",
        "/metrics",
        "getMetrics",
        "metrics",
        "Prometheus text exposition of the broker's metrics (Pulsar's names; docs/metrics.md)",
        {"ok": {"200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    ),
    (
        "GET",
        "/dashboard",
        "getDashboardRoot",
        "dashboard",
        "Redirect to /dashboard/",
        {"ok": {"308": {"description": "To /dashboard/", "headers": {"Location": {"schema": {"type": "string"}}}}}},
    ),
    (
        "GET",
        "/dashboard/",
        "getDashboard",
        "dashboard",
        "The web dashboard's page",
        {"ok": {"200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}}},
    ),
    (
        "GET",
        "/dashboard/static/{name}",
        "getDashboardFile",
        "dashboard",
        "A script, style sheet or image of the dashboard (404 for any other name)",
        {"ok": {"200": {"description": "The file", "content": {"*/*": {"schema": {"type": "string"}}}}},
         "codes": [404]},
    ),
    # clusters and brokers
    (
        "GET",
        "/admin/v2/clusters",
        "getClusters",
        "clusters",
        "The cluster names (this broker's cluster)",
        {"ok": ok(STRINGS)},
    ),
    (
        "GET",
        "/admin/v2/clusters/{cluster}",
        "getCluster",
        "clusters",
        "ClusterData of this broker's cluster",
        {"ok": ok(ref("ClusterData"))},
    ),
    (
        "GET",
        "/admin/v2/brokers",
        "getBrokers",
        "clusters",
        "Every live broker of the cluster (Quasar)",
        {"ok": ok({"type": "array", "items": ref("BrokerInfo")})},
    ),
    (
        "GET",
        "/admin/v2/brokers/{cluster}",
        "getBrokersOfCluster",
        "clusters",
        "The live brokers as host:webport (Pulsar)",
        {"ok": ok(STRINGS)},
    ),
    (
        "GET",
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
        "lookupTopic",
        "lookup",
        "HTTP lookup: LookupData of the broker that owns (or is given) the topic",
        {
            "ok": ok(ref("LookupData")),
            "codes": [307],
            "query": [
                query("listenerName", {"type": "string"}, "advertised listener to answer for"),
                query("authoritative", {"type": "boolean"}, "the asker was redirected here"),
            ],
        },
    ),
    (
        "GET",
        "/admin/v2/broker-stats/loop-lag",
        "getLoopLag",
        "broker-stats",
        "Largest event-loop lag (ms) since the last reset",
        {
            "ok": ok(ref("LoopLag")),
            "query": [query("reset", {"type": "boolean"}, "restart the window after answering")],
        },
    ),
    (
        "GET",
        "/admin/v2/broker-stats/load-report",
        "getLoadReport",
        "broker-stats",
        "Topics, producers and consumers loaded on this broker, and idle topics unloaded since the start",
        {"ok": ok(ref("LoadReport"))},
    ),
    (
        "GET",
        "/admin/v2/broker-stats/rocketmq",
        "getRocketMQStats",
        "broker-stats",
        "What the RocketMQ endpoint holds: clients, Telemetry streams, producers, waiting long polls (404: off)",
        {"ok": ok({"type": "object", "additionalProperties": {"type": "integer"}}), "codes": [404]},
    ),
    (
        "GET",
        "/admin/v2/broker-stats/topics",
        "getLoadedTopicsStats",
        "broker-stats",
        "Stats of every topic loaded in memory (an unloaded topic is not listed)",
        {"ok": ok(ref("LoadedTopicsStats"))},
    ),
    (
        "GET",
        "/admin/v2/replication",
        "getReplication",
        "replication",
        "Replication status of this broker (404 when it does not replicate)",
        {"ok": ok(ref("ReplicationStatus")), "codes": [404]},
    ),
    (
        "POST",
        "/admin/v2/replication/failover",
        "postFailover",
        "replication",
        "Manual failover: the group's master resigns and an in-sync slave takes over (404: no replication)",
        {"codes": [307, 404, 409]},
    ),
    # tenants
    ("GET", "/admin/v2/tenants", "getTenants", "tenants", "The tenant names", {"ok": ok(STRINGS)}),
    (
        "GET",
        "/admin/v2/tenants/{tenant}",
        "getTenant",
        "tenants",
        "The tenant's TenantInfo",
        {"ok": ok(ref("TenantInfo"))},
    ),
    (
        "PUT",
        "/admin/v2/tenants/{tenant}",
        "createTenant",
        "tenants",
        "Create a tenant",
        {"body": body(nullable(ref("TenantInfo")), required=False), "codes": [409]},
    ),
    (
        "POST",
        "/admin/v2/tenants/{tenant}",
        "updateTenant",
        "tenants",
        "Replace the tenant's TenantInfo",
        {"body": body(nullable(ref("TenantInfo")), required=False)},
    ),
    (
        "DELETE",
        "/admin/v2/tenants/{tenant}",
        "deleteTenant",
        "tenants",
        "Delete a tenant without namespaces (409 otherwise; force: 405, forced deletion is off)",
        {"query": [FORCE], "codes": [405, 409]},
    ),
    # namespaces
    (
        "GET",
        "/admin/v2/namespaces/{tenant}",
        "getNamespaces",
        "namespaces",
        "The tenant's namespaces (tenant/ns)",
        {"ok": ok(STRINGS)},
    ),
    ("GET", NS, "getPolicies", "namespaces", "The namespace's Policies", {"ok": ok(ref("Policies"))}),
    (
        "PUT",
        NS,
        "createNamespace",
        "namespaces",
        "Create a namespace with optional initial Policies",
        {"body": body(nullable(ref("Policies")), required=False), "codes": [409]},
    ),
    (
        "DELETE",
        NS,
        "deleteNamespace",
        "namespaces",
        "Delete a namespace without topics (409 otherwise; force: 405, forced deletion is off)",
        {"query": [FORCE], "codes": [405, 409]},
    ),
    (
        "GET",
        NS + "/topics",
        "getNamespaceTopics",
        "namespaces",
        "The namespace's topics, partitions one by one",
        {
            "ok": ok(STRINGS),
            "query": [
                query(
                    "mode",
                    {"type": "string", "enum": ["PERSISTENT", "NON_PERSISTENT", "ALL"]},
                    "which domains (case-insensitive; default PERSISTENT)",
                ),
                query("include_system_topic", {"type": "boolean"}, "true: list system topics too"),
            ],
        },
    ),
    (
        "GET",
        "/admin/v2/{domain}/{tenant}/{namespace}",
        "getTopicList",
        "topics",
        "The namespace's topics of this domain (system topics only with includeSystemTopic=true)",
        {
            "ok": ok(STRINGS),
            "query": [query("includeSystemTopic", {"type": "boolean"}, "true: list system topics too")],
        },
    ),
    (
        "GET",
        "/admin/v2/{domain}/{tenant}/{namespace}/partitioned",
        "getPartitionedTopicList",
        "topics",
        "The namespace's partitioned topics of this domain",
        {"ok": ok(STRINGS)},
    ),
]


def _policy_ops() -> list[Op]:
    """Namespace and topic policies: deduplication, retention, messageTTL, backlog quota."""
    ops: list[Op] = []
    bool_body = body({"type": "boolean"})
    ttl_query = query("messageTTL", TTL, "the TTL in seconds instead of a body")
    for level, prefix, id_part in (("namespace", NS, "Namespace"), ("topic", TOPIC, "Topic")):
        dedup = NS + "/deduplication" if level == "namespace" else TOPIC + "/deduplicationEnabled"
        ops += [
            (
                "GET",
                dedup,
                f"get{id_part}Deduplication",
                "policies",
                f"The {level}'s deduplication policy (null when unset)",
                {"ok": ok(nullable({"type": "boolean"}))},
            ),
            (
                "POST",
                dedup,
                f"set{id_part}Deduplication",
                "policies",
                f"Set the {level}'s deduplication policy",
                {"body": bool_body},
            ),
            (
                "DELETE",
                dedup,
                f"remove{id_part}Deduplication",
                "policies",
                f"Unset the {level}'s deduplication policy",
                {},
            ),
            (
                "GET",
                prefix + "/retention",
                f"get{id_part}Retention",
                "policies",
                f"The {level}'s retention (null when unset)",
                {"ok": ok(nullable(ref("RetentionPolicies")))},
            ),
            (
                "POST",
                prefix + "/retention",
                f"set{id_part}Retention",
                "policies",
                f"Set the {level}'s retention",
                {"body": body(ref("RetentionPolicies"))},
            ),
            (
                "DELETE",
                prefix + "/retention",
                f"remove{id_part}Retention",
                "policies",
                f"Unset the {level}'s retention",
                {},
            ),
            (
                "GET",
                prefix + "/messageTTL",
                f"get{id_part}MessageTTL",
                "policies",
                f"The {level}'s message TTL in seconds (null when unset)",
                {"ok": ok(nullable(TTL))},
            ),
            (
                "POST",
                prefix + "/messageTTL",
                f"set{id_part}MessageTTL",
                "policies",
                f"Set the {level}'s message TTL (seconds)",
                {
                    "body": body(TTL, required=level == "namespace"),
                    **({"query": [ttl_query]} if level == "topic" else {}),
                },
            ),
            (
                "DELETE",
                prefix + "/messageTTL",
                f"remove{id_part}MessageTTL",
                "policies",
                f"Unset the {level}'s message TTL",
                {},
            ),
            (
                "GET",
                prefix + "/backlogQuotaMap",
                f"get{id_part}BacklogQuota",
                "policies",
                f"The {level}'s backlog quota (null when unset)",
                {"ok": ok(nullable(ref("BacklogQuota")))},
            ),
            (
                "POST",
                prefix + "/backlogQuota",
                f"set{id_part}BacklogQuota",
                "policies",
                f"Set the {level}'s backlog quota",
                {"body": body(ref("BacklogQuota"))},
            ),
            (
                "DELETE",
                prefix + "/backlogQuota",
                f"remove{id_part}BacklogQuota",
                "policies",
                f"Unset the {level}'s backlog quota",
                {},
            ),
        ]
    return ops


def _schema_policy_ops() -> list[Op]:
    ops: list[Op] = [
        (
            "GET",
            NS + "/schemaCompatibilityStrategy",
            "getSchemaCompatibilityStrategy",
            "schemas",
            "The compatibility strategy in force in the namespace",
            {"ok": ok(ref("SchemaCompatibilityStrategy"))},
        ),
        (
            "PUT",
            NS + "/schemaCompatibilityStrategy",
            "setSchemaCompatibilityStrategy",
            "schemas",
            "Set the namespace's strategy (UNDEFINED: the broker's)",
            {"body": body(ref("SchemaCompatibilityStrategy"))},
        ),
    ]
    for path, name in (("/isAllowAutoUpdateSchema", "IsAllowAutoUpdateSchema"),
                       ("/schemaValidationEnforced", "SchemaValidationEnforced")):  # fmt: skip
        ops += [
            (
                "GET",
                NS + path,
                f"get{name}",
                "schemas",
                "The value in force (the namespace's, else the broker's)",
                {"ok": ok({"type": "boolean"})},
            ),
            (
                "POST",
                NS + path,
                f"set{name}",
                "schemas",
                "Set the namespace's value",
                {"body": body({"type": "boolean"})},
            ),
        ]
    return ops


OPERATIONS += _policy_ops() + _schema_policy_ops()
OPERATIONS += [
    ("PUT", TOPIC + "/properties", "updateTopicProperties", "topics",
     "Merge properties into the topic's (message.type: NORMAL, FIFO, DELAY, TRANSACTION or MIXED)",
     {"body": body({"type": "object", "additionalProperties": {"type": "string"}})}),
    ("GET", TOPIC + "/properties", "getTopicProperties", "topics", "The topic's properties",
     {"ok": ok({"type": "object", "additionalProperties": {"type": "string"}})}),
    ("DELETE", TOPIC + "/properties", "removeTopicProperty", "topics", "Remove one property of the topic",
     {"query": [query("key", {"type": "string"}, "the property to remove")]}),
    ("GET", NS + "/compactionThreshold", "getCompactionThreshold", "compaction",
     "The namespace's compaction threshold in bytes (204 when unset)",
     {"ok": {**ok({"type": "integer", "minimum": 0}), **EMPTY}}),
    ("PUT", NS + "/compactionThreshold", "setCompactionThreshold", "compaction",
     "Set the compaction threshold (bytes; 412 for a value that is not an integer >= 0)",
     {"body": body({"type": "integer", "minimum": 0})}),
    ("POST", NS + "/compactionThreshold", "setCompactionThresholdPost", "compaction",
     "Set the compaction threshold (as PUT)", {"body": body({"type": "integer", "minimum": 0})}),
    ("DELETE", NS + "/compactionThreshold", "removeCompactionThreshold", "compaction",
     "Unset the compaction threshold", {}),
    # RocketMQ consumer groups (broker/admin/rocketmq_group_routes.py)
    ("GET", NS + "/subscriptionGroups", "getSubscriptionGroups", "policies",
     "RocketMQ consumer-group configs of the namespace: group -> config",
     {"ok": ok({"type": "object", "additionalProperties": ref("SubscriptionGroupConfig")})}),
    ("GET", NS + "/subscriptionGroups/{group}", "getSubscriptionGroup", "policies",
     "A RocketMQ consumer group's config (404 when unset)", {"ok": ok(ref("SubscriptionGroupConfig"))}),
    ("POST", NS + "/subscriptionGroups/{group}", "setSubscriptionGroup", "policies",
     "Set a RocketMQ consumer group's config (FIFO, retries)", {"body": body(ref("SubscriptionGroupConfig"))}),
    ("DELETE", NS + "/subscriptionGroups/{group}", "removeSubscriptionGroup", "policies",
     "Unset a RocketMQ consumer group's config", {}),
    # permissions
    ("GET", NS + "/permissions", "getNamespacePermissions", "permissions", "role -> actions granted on the namespace",
     {"ok": ok(ref("Permissions"))}),
    ("POST", NS + "/permissions/{role}", "grantNamespacePermission", "permissions",
     "Grant actions on the namespace (replaces the role's actions)",
     {"body": body({"type": "array", "items": ref("AuthAction")})}),
    ("DELETE", NS + "/permissions/{role}", "revokeNamespacePermission", "permissions",
     "Revoke the role's grant on the namespace", {}),
    ("GET", NS + "/permissions/subscription", "getSubscriptionPermissions", "permissions",
     "subscription -> the roles allowed to use it", {"ok": ok(ref("SubscriptionPermissions"))}),
    ("POST", NS + "/permissions/subscription/{subscription}", "grantSubscriptionPermission", "permissions",
     "Only these roles (with consume) may use the subscription", {"body": body(STRINGS)}),
    ("DELETE", NS + "/permissions/{subscription}/{role}", "revokeSubscriptionPermission", "permissions",
     "Drop one role from the subscription's roles", {}),
    ("GET", TOPIC + "/permissions", "getTopicPermissions", "permissions",
     "Effective role -> actions on the topic (namespace grants united with the topic's)",
     {"ok": ok(ref("Permissions"))}),
    ("POST", TOPIC + "/permissions/{role}", "grantTopicPermission", "permissions",
     "Grant actions on the topic (a partition's grants are its partitioned topic's)",
     {"body": body({"type": "array", "items": ref("AuthAction")})}),
    ("DELETE", TOPIC + "/permissions/{role}", "revokeTopicPermission", "permissions",
     "Revoke a topic-level grant (412 when the role has none)", {}),
    # topics
    ("PUT", TOPIC, "createNonPartitionedTopic", "topics", "Create a non-partitioned topic",
     {"codes": [_OWNER, 409]}),
    ("DELETE", TOPIC, "deleteTopic", "topics",
     "Delete a topic (412 with connected clients unless force; 409 for a partitioned topic's base name)",
     {"query": [FORCE], "codes": [_OWNER, 409]}),
    ("PUT", TOPIC + "/partitions", "createPartitionedTopic", "topics",
     "Create a partitioned topic; body: the partition count or {\"partitions\": N}",
     {"body": body({"oneOf": [{"type": "integer", "minimum": 1}, ref("PartitionedTopicMetadata")]}),
      "codes": [409]}),
    ("GET", TOPIC + "/partitions", "getPartitionedMetadata", "topics",
     "Partition count (0: not partitioned)", {"ok": ok(ref("PartitionedTopicMetadata"))}),
    ("DELETE", TOPIC + "/partitions", "deletePartitionedTopic", "topics",
     "Delete a partitioned topic with every partition (412 with connected clients unless force)",
     {"query": [FORCE], "codes": [_OWNER, 409]}),
    ("GET", TOPIC + "/stats", "getStats", "topics", "TopicStats of a non-partitioned topic or a partition",
     {"ok": ok(ref("TopicStats")), "codes": [_OWNER]}),
    ("GET", TOPIC + "/partitioned-stats", "getPartitionedStats", "topics",
     "PartitionedTopicStats: the partitions' stats summed (and each one's with perPartition)",
     {"ok": ok(ref("PartitionedTopicStats")), "codes": [405],
      "query": [query("perPartition", {"type": "boolean"}, "include each partition's stats (default true)")]}),
    ("GET", TOPIC + "/internalStats", "getInternalStats", "topics",
     "PersistentTopicInternalStats: ledgers, entries, size, cursors",
     {"ok": ok(ref("PersistentTopicInternalStats")), "codes": [_OWNER]}),
    ("GET", TOPIC + "/subscriptions", "getSubscriptions", "topics", "The topic's subscription names",
     {"ok": ok(STRINGS), "codes": [_OWNER]}),
    ("GET", TOPIC + "/lastMessageId", "getLastMessageId", "topics", "Id of the last message (-1/-1 when empty)",
     {"ok": ok(ref("LastMessageId")), "codes": [_OWNER]}),
    ("GET", TOPIC + "/messages", "queryMessages", "topics",
     "Messages whose key is K in a store-time range (RocketMQ queryMessage; Quasar)",
     {"ok": ok({"type": "array", "items": ref("QueriedMessage")}), "codes": [_OWNER, 405],
      "query": [{**query("key", {"type": "string", "minLength": 1}, "the message key", required=True),
                 "example": "my-key"},
                query("from", INT64, "store time from, ms since the epoch"),
                query("to", INT64, "store time to, ms since the epoch"),
                query("max", {"type": "integer", "minimum": 1}, "entries looked up per partition (at most 64)")]}),
    ("PUT", TOPIC + "/unload", "unloadTopic", "topics", "Close the topic object; clients reconnect",
     {"codes": [_OWNER, 405]}),
    ("POST", TOPIC + "/terminate", "terminateTopic", "topics",
     "Terminate a non-partitioned topic or a partition: no more publishes; answers the last message id",
     {"ok": ok(ref("LastMessageId")), "codes": [_OWNER, 405]}),
    ("POST", TOPIC + "/terminate/partitions", "terminatePartitionedTopic", "topics",
     "Terminate every partition of a partitioned topic", {"ok": ok(ref("TerminatedPartitions")), "codes": [405]}),
    ("PUT", TOPIC + "/compaction", "compact", "compaction",
     "Start compacting the topic (every partition of a partitioned topic)", {"codes": [_OWNER, 405, 409]}),
    ("GET", TOPIC + "/compaction", "compactionStatus", "compaction", "Status of the last compaction",
     {"ok": ok(ref("CompactionStatus")), "codes": [_OWNER, 405]}),
    # subscriptions
    ("PUT", SUB, "createSubscription", "subscriptions",
     "Create a durable subscription starting at a message id (default: latest)",
     {"body": body(ref("MessageId"), required=False), "codes": [_OWNER, 405, 409]}),
    ("DELETE", SUB, "deleteSubscription", "subscriptions",
     "Delete a subscription (412 while consumers are connected unless force)",
     {"query": [FORCE], "codes": [_OWNER]}),
    ("POST", SUB + "/skip_all", "skipAllMessages", "subscriptions", "Clear the subscription's backlog",
     {"codes": [_OWNER, 405]}),
    ("POST", SUB + "/skip/{count}", "skipMessages", "subscriptions", "Skip the next count unacknowledged entries",
     {"codes": [_OWNER, 405]}),
    ("POST", SUB + "/expireMessages/{seconds}", "expireTopicMessages", "subscriptions",
     "Acknowledge the messages published more than seconds ago", {"codes": [_OWNER, 405]}),
    ("POST", TOPIC + "/all_subscription/expireMessages/{seconds}", "expireMessagesForAllSubscriptions",
     "subscriptions", "Expire messages on every durable subscription", {"codes": [_OWNER, 405]}),
    ("POST", SUB + "/resetcursor/{timestamp}", "resetCursor", "subscriptions",
     "Move the cursor to the first message published at or after timestamp (ms)", {"codes": [_OWNER, 405]}),
    ("POST", SUB + "/resetcursor", "resetCursorOnPosition", "subscriptions",
     "Move the cursor to a message id", {"body": body(ref("MessageId")), "codes": [_OWNER, 405]}),
    ("GET", SUB + "/position/{position}", "peekNthMessage", "subscriptions",
     "The position-th unacknowledged entry: payload as the body, metadata as X-Pulsar-* headers",
     {"ok": {"200": {"description": "The entry's payload (uncompressed; a batch stays the batch payload)",
                     "headers": {"X-Pulsar-Message-ID": {"schema": {"type": "string"},
                                                         "description": "ledgerId:entryId"}},
                     "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
      "codes": [_OWNER, 405]}),
    # schemas
    ("GET", SCHEMAS_PATH + "/schema", "getSchema", "schemas", "The latest schema version",
     {"ok": ok(ref("SchemaResponse"))}),
    ("GET", SCHEMAS_PATH + "/schema/{version}", "getSchemaVersion", "schemas", "A live schema version",
     {"ok": ok(ref("SchemaResponse"))}),
    ("GET", SCHEMAS_PATH + "/schemas", "getAllSchemas", "schemas", "Every live version, oldest first",
     {"ok": ok({"type": "object", "required": ["getSchemaResponses"],
                "properties": {"getSchemaResponses": {"type": "array", "items": ref("SchemaResponse")}}})}),
    ("POST", SCHEMAS_PATH + "/schema", "postSchema", "schemas",
     "Add a schema under the namespace's compatibility strategy (or find the identical live version)",
     {"ok": ok(ref("SchemaVersion")), "body": body(ref("PostSchemaPayload")), "codes": [409, 422]}),
    ("DELETE", SCHEMAS_PATH + "/schema", "deleteSchema", "schemas",
     "Mark the schema deleted (a new version), or with force remove every version",
     {"ok": ok(ref("SchemaVersion")), "query": [FORCE]}),
    ("POST", SCHEMAS_PATH + "/compatibility", "testCompatibility", "schemas",
     "Would this schema be accepted", {"ok": ok(ref("IsCompatibilityResponse")),
                                       "body": body(ref("PostSchemaPayload")), "codes": [422]}),
]  # fmt: skip


def _responses(method: str, path: str, op_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    responses: dict[str, Any] = dict(extra.get("ok", EMPTY))
    params = {p.strip("{}") for p in path.split("/") if p.startswith("{")}
    codes = set(extra.get("codes", ()))
    if op_id not in OPEN_OPERATIONS:
        codes |= {401, 403, 500, 503}
        if params or "body" in extra or "query" in extra:
            codes.add(400)
        if params:
            codes.add(404)
        if params & NAME_PARAMS:
            codes.add(412)
        if "body" in extra:
            codes.add(413)
    for code in sorted(codes):
        if code == 307:
            responses["307"] = {
                "description": "Another broker serves this: repeat the request at Location",
                "headers": {"Location": {"schema": {"type": "string"}}},
            }
        else:
            responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    return responses


def _operation(
    method: str, path: str, op_id: str, tag: str, summary: str, extra: dict[str, Any]
) -> dict[str, Any]:
    names = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
    parameters: list[Any] = [{"$ref": f"#/components/parameters/{name}"} for name in names]
    parameters += extra.get("query", [])
    operation: dict[str, Any] = {"operationId": op_id, "tags": [tag], "summary": summary}
    if parameters:
        operation["parameters"] = parameters
    if "body" in extra:
        operation["requestBody"] = extra["body"]
    operation["responses"] = _responses(method, path, op_id, extra)
    if op_id in OPEN_OPERATIONS:
        operation["security"] = []
    return operation


def build() -> dict[str, Any]:
    """The whole document."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, op_id, tag, summary, extra in OPERATIONS:
        item = paths.setdefault(path, {})
        if method.lower() in item:
            raise ValueError(f"{method} {path} is described twice")
        item[method.lower()] = _operation(method, path, op_id, tag, summary, extra)
    parameters = {
        name: {"name": name, "in": "path", "required": True, **spec} for name, spec in PATH_PARAMS.items()
    }
    responses = {
        f"E{code}": {"description": text, "content": {JSON: {"schema": ref("Error")}}}
        for code, text in ERRORS.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Quasar admin REST API",
            "version": "v2",
            "description": (
                "Pulsar's admin v2 paths and JSON shapes where a feature exists in both, plus Quasar's own "
                '(query by key, brokers, replication, loop lag). Errors are {"reason": ...}. With '
                "authenticationEnabled every operation but the health page and this document needs a Bearer "
                "token (JWT), Basic credentials or a TLS client certificate."
            ),
        },
        "servers": [{"url": "http://127.0.0.1:8080", "description": "make run (standalone defaults)"}],
        "security": [{"bearer": []}, {"basic": []}],
        "tags": [{"name": tag} for tag in dict.fromkeys(op[3] for op in OPERATIONS)],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "parameters": parameters,
            "responses": responses,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "basic": {"type": "http", "scheme": "basic"},
            },
        },
    }


def render() -> str:
    """The file's text: the document as indented JSON, keys in definition order, ending with a newline."""
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python scripts/gen_openapi.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(build()['paths'])} paths)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
