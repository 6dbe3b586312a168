"""The components of the admin API's OpenAPI document (``scripts/gen_openapi.py`` writes the document):
JSON schemas of the bodies, path parameters, error answers, and the helpers that build operations from them.

Schemas follow what the broker answers (Pulsar's field names; a subset of Pulsar's TopicStats, Policies,
...); integer policy fields carry the range of Pulsar's Java type (int or long), which the broker enforces.
"""

from __future__ import annotations

from typing import Any

JSON = "application/json"
NAME_PATTERN = "^[A-Za-z0-9_=:.\\-]+$"  # Pulsar NamedEntity.checkName (TopicName.parse, check_named_entity)


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


INT64 = {"type": "integer", "format": "int64"}
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# a Pulsar policy field: a Java int or long, -1 = unlimited
INT_POLICY = {"type": "integer", "format": "int32", "minimum": -1, "maximum": INT32_MAX}
LONG_POLICY = {"type": "integer", "format": "int64", "minimum": -1, "maximum": INT64_MAX}
TTL = {"type": "integer", "format": "int32", "minimum": 0, "maximum": INT32_MAX}
STRINGS = {"type": "array", "items": {"type": "string"}}

# ---------------------------------------------------------------------------------------------- schemas
SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "description": "Pulsar's error answer.",
        "required": ["reason"],
        "properties": {"reason": {"type": "string", "description": "What was wrong, for a person."}},
    },
    "TenantInfo": {
        "type": "object",
        "description": "Pulsar TenantInfo; other keys are kept as given.",
        "properties": {"adminRoles": STRINGS, "allowedClusters": STRINGS},
    },
    "SubscriptionGroupConfig": {
        "type": "object",
        "description": "A RocketMQ consumer group's config (RocketMQ SubscriptionGroupConfig field names).",
        "properties": {
            "consumeMessageOrderly": {"type": "boolean", "description": "FIFO (orderly) consumption"},
            "retryMaxTimes": {
                "type": "integer",
                "minimum": 0,
                "maximum": 1000,
                "description": "redeliveries before the dead-letter topic (16 by default)",
            },
        },
        "additionalProperties": False,
    },
    "RetentionPolicies": {
        "type": "object",
        "description": "-1 = unlimited; a missing field is 0.",
        "properties": {"retentionTimeInMinutes": INT_POLICY, "retentionSizeInMB": LONG_POLICY},
    },
    "BacklogQuota": {
        "type": "object",
        "description": "limitSize bytes, limitTime seconds (-1 = unlimited) and what happens past them.",
        "properties": {
            "limitSize": LONG_POLICY,
            "limitTime": INT_POLICY,
            "policy": {
                "type": "string",
                "enum": ["producer_request_hold", "producer_exception", "consumer_backlog_eviction"],
            },
        },
    },
    "Policies": {
        "type": "object",
        "description": (
            "Pulsar namespace Policies (snake_case field names as Pulsar's); the known policies are checked "
            "by type, other keys are kept as given."
        ),
        "properties": {
            "deduplicationEnabled": {"type": "boolean"},
            "retention_policies": ref("RetentionPolicies"),
            "message_ttl_in_seconds": TTL,
            "backlog_quota": ref("BacklogQuota"),
            "replication_clusters": STRINGS,
            "auth_policies": {"type": "object"},
            "deleted": {"type": "boolean"},
        },
    },
    "Permissions": {
        "type": "object",
        "description": "role -> granted actions",
        "additionalProperties": {"type": "array", "items": ref("AuthAction")},
    },
    "SubscriptionPermissions": {
        "type": "object",
        "description": "subscription -> the roles that may use it",
        "additionalProperties": STRINGS,
    },
    "AuthAction": {
        "type": "string",
        "enum": ["produce", "consume", "functions", "sources", "sinks", "packages"],
    },
    "MessageId": {
        "type": "object",
        "description": "-1/-1 is the earliest message, 9223372036854775807 (Long.MAX_VALUE) the latest.",
        "required": ["ledgerId", "entryId"],
        "properties": {
            "ledgerId": INT64,
            "entryId": INT64,
            "isExcluded": {"type": "boolean", "description": "resetcursor: start after this message"},
        },
    },
    "LastMessageId": {
        "type": "object",
        "required": ["ledgerId", "entryId", "partitionIndex"],
        "properties": {
            "ledgerId": INT64,
            "entryId": INT64,
            "partitionIndex": {"type": "integer"},
            "batchIndex": {"type": "integer"},
        },
    },
    "PartitionedTopicMetadata": {
        "type": "object",
        "required": ["partitions"],
        "properties": {"partitions": {"type": "integer", "minimum": 0}},
    },
    "TopicStats": {
        "type": "object",
        "description": "Pulsar TopicStats (subset).",
        "required": [
            "msgInCounter",
            "bytesInCounter",
            "msgOutCounter",
            "storageSize",
            "publishers",
            "subscriptions",
        ],
        "properties": {
            "msgInCounter": INT64,
            "bytesInCounter": INT64,
            "msgOutCounter": INT64,
            "storageSize": INT64,
            "publishers": {"type": "array", "items": {"type": "object"}},
            "subscriptions": {"type": "object", "additionalProperties": ref("SubscriptionStats")},
            "deduplicationStatus": {"type": "string"},
        },
    },
    "SubscriptionStats": {
        "type": "object",
        "required": ["msgBacklog", "consumers"],
        "properties": {
            "msgBacklog": INT64,
            "type": nullable({"type": "string"}),
            "unackedMessages": INT64,
            "isDurable": {"type": "boolean"},
            "msgDropCount": INT64,
            "consumers": {"type": "array", "items": {"type": "object"}},
        },
    },
    "PartitionedTopicStats": {
        "allOf": [ref("TopicStats")],
        "type": "object",
        "required": ["metadata", "partitions"],
        "properties": {
            "metadata": {
                "type": "object",
                "required": ["partitions"],
                "properties": {"partitions": {"type": "integer"}, "deleted": {"type": "boolean"}},
            },
            "partitions": {"type": "object", "additionalProperties": ref("TopicStats")},
        },
    },
    "PersistentTopicInternalStats": {
        "type": "object",
        "required": ["numberOfEntries", "totalSize", "lastConfirmedEntry", "ledgers", "cursors"],
        "properties": {
            "numberOfEntries": INT64,
            "totalSize": INT64,
            "lastConfirmedEntry": {"type": "string", "description": "ledgerId:entryId"},
            "ledgers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["ledgerId", "entries", "size"],
                    "properties": {"ledgerId": INT64, "entries": INT64, "size": INT64, "createdMs": INT64},
                },
            },
            "cursors": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["markDeletePosition", "readPosition"],
                    "properties": {
                        "markDeletePosition": {"type": "string"},
                        "readPosition": {"type": "string"},
                        "numberOfEntriesSinceFirstNotAckedMessage": INT64,
                        "properties": {"type": "object"},
                    },
                },
            },
        },
    },
    "TerminatedPartitions": {
        "type": "object",
        "description": "partition index (as a string) -> the last message id of that partition",
        "additionalProperties": ref("LastMessageId"),
    },
    "ClusterData": {
        "type": "object",
        "required": ["serviceUrl", "brokerServiceUrl"],
        "properties": {
            "serviceUrl": {"type": "string"},
            "serviceUrlTls": {"type": "string"},
            "brokerServiceUrl": {"type": "string"},
            "brokerServiceUrlTls": {"type": "string"},
        },
    },
    "BrokerInfo": {
        "type": "object",
        "description": "A live broker as registered in the cluster (group, id, role, URLs, listeners, load).",
        "properties": {
            "cluster": {"type": "string"},
            "brokerName": {"type": "string"},
            "brokerId": {"type": "integer"},
            "role": {"type": "string"},
            "serviceUrl": {"type": "string"},
            "webServiceUrl": {"type": "string"},
        },
    },
    "LookupData": {
        "type": "object",
        "required": ["brokerUrl", "httpUrl"],
        "properties": {
            "brokerUrl": {"type": "string"},
            "brokerUrlTls": {"type": "string"},
            "httpUrl": {"type": "string"},
            "httpUrlTls": {"type": "string"},
            "nativeUrl": {"type": "string"},
            "topic": {"type": "string"},
        },
    },
    "PostSchemaPayload": {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"type": "string", "description": "a SchemaType name: AVRO, JSON, STRING, INT32, ..."},
            "schema": {
                "type": "string",
                "description": "the definition (AVRO/JSON: the schema JSON as text)",
            },
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "SchemaResponse": {
        "type": "object",
        "required": ["version", "type", "timestamp", "data", "properties"],
        "properties": {
            "version": INT64,
            "type": {"type": "string"},
            "timestamp": INT64,
            "data": {"type": "string"},
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "SchemaVersion": {
        "type": "object",
        "required": ["version"],
        "properties": {"version": nullable(INT64)},
    },
    "IsCompatibilityResponse": {
        "type": "object",
        "required": ["isCompatibility", "schemaCompatibilityStrategy"],
        "properties": {
            "isCompatibility": {"type": "boolean"},
            "schemaCompatibilityStrategy": ref("SchemaCompatibilityStrategy"),
        },
    },
    "SchemaCompatibilityStrategy": {
        "type": "string",
        "enum": [
            "UNDEFINED",
            "ALWAYS_INCOMPATIBLE",
            "ALWAYS_COMPATIBLE",
            "BACKWARD",
            "FORWARD",
            "FULL",
            "BACKWARD_TRANSITIVE",
            "FORWARD_TRANSITIVE",
            "FULL_TRANSITIVE",
        ],
    },
    "CompactionStatus": {
        "type": "object",
        "required": ["status", "lastError"],
        "properties": {
            "status": {"type": "string", "enum": ["NOT_RUN", "RUNNING", "SUCCESS", "ERROR"]},
            "lastError": {"type": "string"},
        },
    },
    "QueriedMessage": {
        "type": "object",
        "required": [
            "messageId",
            "ledgerId",
            "entryId",
            "batchIndex",
            "partition",
            "topic",
            "key",
            "payload",
        ],
        "properties": {
            "messageId": {"type": "string", "description": "L:E or L:E:B"},
            "ledgerId": INT64,
            "entryId": INT64,
            "batchIndex": {"type": "integer"},
            "partition": {"type": "integer"},
            "topic": {"type": "string"},
            "key": {"type": "string"},
            "publishTime": INT64,
            "storeTime": INT64,
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
            "payload": {"type": "string", "contentEncoding": "base64"},
        },
    },
    "LoopLag": {
        "type": "object",
        "required": ["maxLagMs", "ticks", "intervalMs"],
        "properties": {
            "maxLagMs": {"type": "number"},
            "ticks": {"type": "integer"},
            "intervalMs": {"type": "number"},
        },
    },
    "LoadReport": {
        "type": "object",
        "description": "Pulsar's LocalBrokerData (subset): what this broker holds in memory now.",
        "required": ["numTopics", "numProducers", "numConsumers", "inactiveTopicsUnloaded"],
        "properties": {
            "pulsarServiceUrl": {"type": "string"},
            "webServiceUrl": {"type": "string"},
            "numTopics": {"type": "integer", "description": "topics loaded in memory"},
            "numProducers": {"type": "integer"},
            "numConsumers": {"type": "integer"},
            "inactiveTopicsUnloaded": {
                "type": "integer",
                "description": "topics unloaded as idle since the broker started (Quasar)",
            },
        },
    },
    "LoadedTopicsStats": {
        "type": "object",
        "description": "namespace -> bundle (one: 0x00000000_0xffffffff) -> domain -> topic -> TopicStats, for"
        " the loaded topics only",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {"type": "object", "additionalProperties": ref("TopicStats")},
            },
        },
    },
    "ReplicationStatus": {
        "type": "object",
        "description": "role, master epoch, leader, sync-state set, and per slave (on a master) its state.",
        "properties": {"role": {"type": "string"}},
    },
}

# ---------------------------------------------------------------------------------------------- parameters
_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": NAME_PATTERN}
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "tenant": {
        "schema": _NAME,
        "example": "my-tenant",
        "description": "Tenant name ([A-Za-z0-9_=:.-]+, not . or ..)",
    },
    "namespace": {
        "schema": _NAME,
        "example": "my-namespace",
        "description": "Namespace name within the tenant",
    },
    "cluster": {"schema": _NAME, "example": "standalone", "description": "Cluster name"},
    "domain": {
        "schema": {"type": "string", "enum": ["persistent", "non-persistent"]},
        "example": "persistent",
        "description": "Topic domain",
    },
    "topic": {
        "schema": {"type": "string", "minLength": 1, "pattern": "^[^/\\\\\\x00-\\x1f\\x7f]+$"},
        "example": "my-topic",
        "description": (
            "Topic local name (URL-encoded; no '/', no control character; <base>-partition-<i> names a partition)"
        ),
    },
    "subscription": {
        "schema": {"type": "string", "minLength": 1},
        "example": "my-subscription",
        "description": "Subscription name",
    },
    "group": {
        "schema": {"type": "string", "minLength": 1, "maxLength": 120, "pattern": "^[%|a-zA-Z0-9_-]+$"},
        "example": "my-group",
        "description": "RocketMQ consumer group name",
    },
    "role": {
        "schema": {"type": "string", "minLength": 1},
        "example": "my-role",
        "description": "Role (authenticated principal)",
    },
    "count": {"schema": {"type": "integer", "minimum": 0}, "description": "Number of entries to skip"},
    "seconds": {"schema": {"type": "integer", "minimum": 0}, "description": "Age in seconds"},
    "timestamp": {"schema": {**INT64, "minimum": 0}, "description": "Publish time, ms since the epoch"},
    "position": {"schema": {"type": "integer", "minimum": 1}, "description": "1-based unacknowledged entry"},
    "version": {"schema": {**INT64, "minimum": 0}, "description": "Schema version"},
    "name": {
        "schema": {"type": "string", "minLength": 1},
        "example": "app.js",
        "description": "File name of the dashboard's static files",
    },
}
NAME_PARAMS = {"tenant", "namespace", "cluster", "topic"}


def query(name: str, schema: dict[str, Any], description: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


FORCE = query("force", {"type": "boolean"}, "true: Pulsar's forced variant (see the operation)")


EMPTY = {"204": {"description": "Done"}}  # a success without a body


def ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"200": {"description": description, "content": {JSON: {"schema": schema}}}}


def body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


# (method, path, operationId, tag, summary, extra fields): extra keys are "ok" (2xx responses, default 204),

ERRORS: dict[int, str] = {
    400: "Bad input: a body or parameter that is not what the operation takes",
    401: "Authentication is enabled and the request's credentials are missing or refused",
    403: "The authenticated role is not authorized for this operation",
    404: "Unknown tenant, namespace, topic, subscription, schema or cluster",
    405: "Not allowed on this kind of topic (non-persistent, or the base name of a partitioned topic)",
    409: "Already exists, or a conflicting state (e.g. still has namespaces/topics)",
    412: "Precondition failed: an invalid tenant, namespace or topic name (Pulsar's 412), or a refused state",
    413: "Request body larger than http_max_request_size",
    422: "The schema definition is invalid for its type",
    500: "Internal error (a bug: the broker logs it)",
    503: "Retry later: no live owner for the topic, or the metadata store is unreachable",
}
