"""Admin REST API on aiohttp, on the broker's event loop. Paths and JSON shapes follow Pulsar's admin v2
(reference/pulsar-protocol.md §11): errors are ``{"reason": "..."}`` with 400 (bad input), 404 (unknown
tenant/namespace/topic), 409 (already exists), 412 (precondition, e.g. partitioned parent, or an invalid
tenant, namespace or topic name after URL-decoding, as Pulsar), 503 (no live
owner for the topic now, or the metadata store unreachable: retry) and 500. In a cluster, requests about a
topic another broker serves get a 307 to it (``cluster_routes``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from quasar.broker.admin import (
    broker_stats_routes,
    cluster_routes,
    compaction_routes,
    dashboard_routes,
    openapi_route,
    permission_routes,
    rocketmq_group_routes,
    schema_routes,
    subscription_routes,
    tenant_routes,
    topic_properties_routes,
    topic_routes,
)
from quasar.broker.admin import query as query_routes
from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.admin.auth import auth_middleware
from quasar.broker.admin.bad_request_log import install_bad_request_log_filter
from quasar.broker.admin.request_params import DOMAIN_LIST_PATH, TOPIC_PATH, query_flag
from quasar.broker.admin.request_params import existing_namespace as _namespace
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.admin.validation import (
    parse_json,
    parse_message_ttl,
    validate_namespace_policies,
    validate_tenant_info,
)
from quasar.broker.broker_service import BrokerService, TopicExistsError
from quasar.broker.errors import (
    BrokerError,
    NamespaceNotFoundError,
    NotAllowedError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from quasar.broker.policies import BACKLOG_QUOTA, MESSAGE_TTL, RETENTION, BacklogQuota, parse_retention
from quasar.broker.system_topics import user_topics
from quasar.metadata import MetadataStoreError
from quasar.protocol import TopicName
from quasar.protocol.errors import InvalidTopicNameError
from quasar.protocol.topic_name import check_named_entity

log = logging.getLogger(__name__)

DOMAINS = ("persistent", "non-persistent")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@web.middleware
async def _errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map Quasar errors to Pulsar's admin status codes; nothing escapes as a bare 500 traceback, and every
    error answer is ``{"reason": ...}`` JSON, aiohttp's own 404/405 included."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:  # past http_max_request_size (Pulsar httpMaxRequestSize)
        return _error(413, exc.text or "request body too large")
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        # aiohttp's own answers (no route: 404, wrong method: 405 with Allow) as Pulsar's JSON error
        kept = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
        return web.json_response({"reason": exc.reason}, status=exc.status, headers=kept)
    except InvalidTopicNameError as exc:  # Pulsar: 412 "Topic name is not valid" / "... name is not valid"
        return _error(412, str(exc))
    except (ValueError, json.JSONDecodeError) as exc:
        return _error(400, str(exc))
    except TopicExistsError as exc:
        return _error(409, str(exc))
    except (NamespaceNotFoundError, TopicNotFoundError) as exc:
        return _error(404, str(exc))
    except NotAllowedError as exc:
        return _error(412, str(exc))
    except (ServiceNotReadyError, MetadataStoreError) as exc:  # retry later (no live owner, metadata down)
        return _error(503, str(exc))
    except BrokerError as exc:
        return _error(500, str(exc))
    except Exception:
        log.exception("admin request %s %s failed", request.method, request.path)
        return _error(500, "internal error")


def _domain(request: web.Request) -> str:
    domain = request.match_info["domain"]
    if domain not in DOMAINS:
        raise web.HTTPNotFound(
            text=json.dumps({"reason": f"unknown domain {domain}"}), content_type="application/json"
        )
    return domain


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    return TopicName.parse(f"{_domain(request)}://{info['tenant']}/{info['namespace']}/{info['topic']}")


async def _json_body(request: web.Request) -> Any:
    """The decoded body (None when empty); ValueError (400) for bad or too deeply nested JSON; aiohttp's 413
    past ``http_max_request_size``."""
    return parse_json(await request.text())


# ---------------------------------------------------------------------- clusters, tenants, namespaces
async def get_status(request: web.Request) -> web.Response:
    """GET /status.html: ``OK`` while the broker serves (Pulsar's health page; open without credentials)."""
    return web.Response(text="OK")


async def get_clusters(request: web.Request) -> web.Response:
    return web.json_response([_service(request).cluster_name])


async def get_tenants(request: web.Request) -> web.Response:
    return web.json_response(_service(request).tenants())


async def put_tenant(request: web.Request) -> web.Response:
    """PUT /admin/v2/tenants/{tenant}, body TenantInfo JSON (optional): 204; 409 if it exists, 412 for a bad
    name (Pulsar "Tenant name is not valid"), 400 for a bad body."""
    tenant = request.match_info["tenant"]
    check_named_entity("tenant", tenant)
    await _service(request).create_tenant(tenant, validate_tenant_info(await _json_body(request)))
    return web.Response(status=204)


async def get_namespaces(request: web.Request) -> web.Response:
    """GET /admin/v2/namespaces/{tenant}: JSON array of "tenant/ns"; 404 for an unknown tenant."""
    tenant = request.match_info["tenant"]
    service = _service(request)
    if not service.tenant_exists(tenant):
        raise NamespaceNotFoundError(f"Tenant {tenant} does not exist")
    return web.json_response(service.namespaces(tenant))


async def put_namespace(request: web.Request) -> web.Response:
    """PUT /admin/v2/namespaces/{tenant}/{ns}, body policies JSON (optional): 204; 404 unknown tenant, 409 exists."""
    check_named_entity("tenant", request.match_info["tenant"])
    check_named_entity("namespace", request.match_info["namespace"])
    namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
    policies = validate_namespace_policies(await _json_body(request))  # typed: never stored ill-typed
    await _service(request).create_namespace(namespace, policies)
    return web.Response(status=204)


# ---------------------------------------------------------------------- topics
async def list_topics(request: web.Request) -> web.Response:
    """GET /admin/v2/{domain}/{tenant}/{ns}: the namespace's topics, system topics only with
    ``includeSystemTopic=true`` (Pulsar ``PersistentTopics.getList``; ``broker/system_topics.py``)."""
    namespace = _namespace(request)
    topics = _service(request).list_topics(namespace, _domain(request))
    return web.json_response(topics if query_flag(request, "includeSystemTopic") else user_topics(topics))


async def list_partitioned_topics(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    return web.json_response(_service(request).partitioned_topics(namespace, _domain(request)))


async def put_partitions(request: web.Request) -> web.Response:
    """Create a partitioned topic; body = partition count (JSON int) or ``{"partitions": N}``."""
    topic = _topic(request)
    body = await _json_body(request)
    if isinstance(body, dict):
        body = body.get("partitions")
    if isinstance(body, bool) or not isinstance(body, int):
        raise ValueError("body must be the number of partitions as a JSON integer")
    if body <= 0:
        raise ValueError(f"Number of partitions should be more than 0, got {body}")
    await _service(request).create_partitioned_topic(topic, body)
    return web.Response(status=204)


async def get_partitions(request: web.Request) -> web.Response:
    topic = _topic(request)
    _namespace(request)
    return web.json_response({"partitions": _service(request).partitions(topic)})


async def put_topic(request: web.Request) -> web.Response:
    """Create a non-partitioned topic (409 if it or a partitioned topic of that name exists)."""
    topic = _topic(request)
    service = _service(request)
    _namespace(request)
    if service.factory.exists(topic.full_name) or service.partitions(topic) > 0:
        raise TopicExistsError(f"Topic {topic.full_name} already exists")
    await service.get_or_create_topic(topic)
    return web.Response(status=204)


async def get_stats(request: web.Request) -> web.Response:
    """GET {topic}/stats: Pulsar TopicStats JSON (subset); 404 for a partitioned parent or an unknown topic."""
    topic = _topic(request)
    service = _service(request)
    if service.partitions(topic) > 0:
        raise TopicNotFoundError(f"{topic.full_name} is a partitioned topic; use partitioned-stats")
    return web.json_response((await service.get_or_create_topic(topic, create=False)).stats())


async def get_internal_stats(request: web.Request) -> web.Response:
    """PersistentTopicInternalStats (subset): ledgers, entries, size, cursors with their positions."""
    topic = _topic(request)
    loaded = await _service(request).get_or_create_topic(topic, create=False)
    ledger = getattr(loaded, "ledger", None)
    if ledger is None:
        raise NotAllowedError("internal stats exist only for persistent topics")
    ledgers = ledger.ledgers
    last = ledger.last_confirmed_entry
    return web.json_response(
        {
            "numberOfEntries": ledger.number_of_entries,
            "totalSize": ledger.total_size,
            "lastConfirmedEntry": f"{last.ledger_id}:{last.entry_id}",
            "ledgers": [
                {
                    "ledgerId": r.ledger_id,
                    "entries": r.entries or 0,  # the open ledger: 0 until it closes (Pulsar's LedgerInfo)
                    "size": r.size_bytes or 0,
                    "createdMs": r.created_ms,
                }
                for r in ledgers
            ],
            "cursors": {
                name: {
                    "markDeletePosition": "{}:{}".format(*cursor.mark_delete_position),
                    "readPosition": "{}:{}".format(*cursor.read_position),
                    "numberOfEntriesSinceFirstNotAckedMessage": cursor.number_of_entries_in_backlog,
                    "properties": cursor.properties,
                }
                for name, cursor in ledger.cursors.items()
            },
        }
    )


async def get_subscriptions(request: web.Request) -> web.Response:
    topic = _topic(request)
    loaded = await _service(request).get_or_create_topic(topic, create=False)
    return web.json_response(sorted(loaded.subscriptions))


async def get_last_message_id(request: web.Request) -> web.Response:
    """GET {topic}/lastMessageId: ``{"ledgerId", "entryId", "partitionIndex"[, "batchIndex"]}``, -1/-1 when
    empty; 404 for an unknown topic."""
    topic = _topic(request)
    loaded = await _service(request).get_or_create_topic(topic, create=False)
    ledger_id, entry_id, batch_index = loaded.last_message_id()
    body: dict[str, Any] = {
        "ledgerId": ledger_id,
        "entryId": entry_id,
        "partitionIndex": topic.partition_index,
    }
    if batch_index >= 0:
        body["batchIndex"] = batch_index
    return web.json_response(body)


async def delete_subscription(request: web.Request) -> web.Response:
    """DELETE {topic}/subscription/{subscription}[?force=true] (Pulsar ``deleteSubscription``): 412 while
    consumers are connected unless ``force``, which disconnects them first; 404 for an unknown one."""
    topic = _topic(request)
    name = request.match_info["subscription"]
    force = query_flag(request, "force")
    loaded = await _service(request).get_or_create_topic(topic, create=False)
    subscription = loaded.subscriptions.get(name)
    if subscription is None:
        raise TopicNotFoundError(f"Subscription {name} not found")
    if subscription.consumers:
        if not force:
            raise NotAllowedError(f"Subscription {name} has active consumers")
        subscription.close_consumers()
    await loaded.delete_subscription(name)
    return web.Response(status=204)


# ---------------------------------------------------------------------- deduplication policies
def _bool_body(body: Any) -> bool:
    if not isinstance(body, bool):
        raise ValueError(f"expected true or false as the request body, got {body!r}")
    return body


async def post_namespace_deduplication(request: web.Request) -> web.Response:
    """POST /admin/v2/namespaces/{tenant}/{ns}/deduplication with ``true``/``false`` (Pulsar
    ``setDeduplicationStatus``): 204; applied at once to the namespace's loaded topics."""
    namespace = _namespace(request)
    enabled = _bool_body(await _json_body(request))
    await _service(request).set_namespace_deduplication(namespace, enabled)
    return web.Response(status=204)


async def get_namespace_deduplication(request: web.Request) -> web.Response:
    """GET .../deduplication: the namespace policy (``true``/``false``), or ``null`` when unset."""
    namespace = _namespace(request)
    return web.json_response(_service(request).namespace_deduplication(namespace))


async def delete_namespace_deduplication(request: web.Request) -> web.Response:
    namespace = _namespace(request)
    await _service(request).set_namespace_deduplication(namespace, None)
    return web.Response(status=204)


async def post_topic_deduplication(request: web.Request) -> web.Response:
    """POST {topic}/deduplicationEnabled with ``true``/``false`` (Pulsar topic policy
    ``setDeduplicationStatus``): 204."""
    topic = _topic(request)
    _namespace(request)
    enabled = _bool_body(await _json_body(request))
    await _service(request).set_topic_deduplication(topic, enabled)
    return web.Response(status=204)


async def get_topic_deduplication(request: web.Request) -> web.Response:
    """GET {topic}/deduplicationEnabled: the topic policy, or ``null`` when unset (the namespace applies)."""
    topic = _topic(request)
    _namespace(request)
    return web.json_response(_service(request).topic_deduplication(topic))


async def delete_topic_deduplication(request: web.Request) -> web.Response:
    """DELETE {topic}/deduplicationEnabled: drop the topic policy (the namespace policy applies again): 204."""
    topic = _topic(request)
    _namespace(request)
    await _service(request).set_topic_deduplication(topic, None)
    return web.Response(status=204)


# ---------------------------------------------------------------------- retention, TTL, backlog quota
def _parse_quota(body: Any) -> dict[str, Any]:
    return BacklogQuota.from_json(body).to_json()


_POLICY_PARSERS: dict[str, Callable[[Any], Any]] = {
    RETENTION: parse_retention,
    MESSAGE_TTL: parse_message_ttl,
    BACKLOG_QUOTA: _parse_quota,
}


def _policy_handlers(key: str) -> tuple[Handler, Handler, Handler, Handler, Handler, Handler]:
    """POST/GET/DELETE handlers for policy ``key`` at namespace and topic level. The body is the policy's
    JSON; the topic-level messageTTL also takes ``?messageTTL=<s>`` as Pulsar's admin client sends it."""
    parse = _POLICY_PARSERS[key]

    async def body_value(request: web.Request) -> Any:
        text = await request.text()
        if key == MESSAGE_TTL and "messageTTL" in request.query:
            if text.strip():
                raise ValueError("give the message TTL either as ?messageTTL= or as the body, not both")
            raw = request.query["messageTTL"]
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"messageTTL must be an integer, got {raw!r:.50}") from None
            return parse(value)
        return parse(parse_json(text))

    async def post_namespace(request: web.Request) -> web.Response:
        namespace = _namespace(request)
        await _service(request).set_namespace_policy(namespace, key, await body_value(request))
        return web.Response(status=204)

    async def get_namespace(request: web.Request) -> web.Response:
        return web.json_response(_service(request).namespace_policy(_namespace(request), key))

    async def delete_namespace(request: web.Request) -> web.Response:
        await _service(request).set_namespace_policy(_namespace(request), key, None)
        return web.Response(status=204)

    async def post_topic(request: web.Request) -> web.Response:
        topic = _topic(request)
        _namespace(request)
        await _service(request).set_topic_policy(topic, key, await body_value(request))
        return web.Response(status=204)

    async def get_topic(request: web.Request) -> web.Response:
        topic = _topic(request)
        _namespace(request)
        return web.json_response(_service(request).topic_policy(topic, key))

    async def delete_topic(request: web.Request) -> web.Response:
        topic = _topic(request)
        _namespace(request)
        await _service(request).set_topic_policy(topic, key, None)
        return web.Response(status=204)

    return post_namespace, get_namespace, delete_namespace, post_topic, get_topic, delete_topic


def _policy_routes(topic: str) -> list[web.RouteDef]:
    namespace = "/admin/v2/namespaces/{tenant}/{namespace}"
    routes = []
    for key, path, get_path in (
        (RETENTION, "/retention", "/retention"),
        (MESSAGE_TTL, "/messageTTL", "/messageTTL"),
        (BACKLOG_QUOTA, "/backlogQuota", "/backlogQuotaMap"),
    ):
        post_ns, get_ns, delete_ns, post_t, get_t, delete_t = _policy_handlers(key)
        routes += [
            web.post(namespace + path, post_ns),
            web.get(namespace + get_path, get_ns),
            web.delete(namespace + path, delete_ns),
            web.post(topic + path, post_t),
            web.get(topic + get_path, get_t),
            web.delete(topic + path, delete_t),
        ]
    return routes


def build_admin_app(
    service: BrokerService,
    *,
    max_request_size: int = 10 * 1024 * 1024,
    authenticate_metrics_endpoint: bool = False,
) -> web.Application:
    """The admin REST application for ``service``, authenticated and authorized by ``service.security``
    (``admin.auth``; ``/metrics`` only with ``authenticate_metrics_endpoint``); request bodies past
    ``max_request_size`` bytes (``http_max_request_size``) are refused with 413 before they are buffered whole;
    requests aiohttp cannot parse are logged as one rate-limited line (``bad_request_log``)."""
    install_bad_request_log_filter()
    owner_only = (get_stats, get_internal_stats, get_subscriptions, get_last_message_id, delete_subscription,
                  put_topic, query_routes.query_messages, *topic_routes.OWNER_ONLY,
                  *compaction_routes.OWNER_ONLY, *subscription_routes.OWNER_ONLY)  # fmt: skip
    app = web.Application(
        middlewares=[
            auth_middleware(service.security, authenticate_metrics_endpoint=authenticate_metrics_endpoint),
            _errors_middleware,
            cluster_routes.owner_redirect_middleware(owner_only),
        ],
        client_max_size=max_request_size,
    )
    app[SERVICE_KEY] = service
    openapi_route.register(app)  # GET /admin/v2/openapi.json, this API's OpenAPI 3.1 document
    permission_routes.register(app)  # grants: before the {topic} templates
    topic_routes.register(app)  # POST .../{topic}/terminate[/partitions] (Pulsar topic termination)
    compaction_routes.register(app)  # PUT/GET .../{topic}/compaction, namespaces/.../compactionThreshold
    schema_routes.register(app)  # /admin/v2/schemas/... and the namespace schema policies (Pulsar schemas)
    query_routes.register(app)  # GET .../{topic}/messages?key=K&from=MS&to=MS (RocketMQ queryMessage)
    tenant_routes.register(app)  # GET/POST/DELETE tenants/{t}, GET/DELETE namespaces/{t}/{ns}[/topics]
    broker_stats_routes.register(app)  # GET /admin/v2/broker-stats/load-report (loaded topics, idle unloads)
    subscription_routes.register(app)  # create/skip/expire/resetcursor/peek subscriptions, unload, stats
    rocketmq_group_routes.register(app)  # GET/POST/DELETE namespaces/{t}/{ns}/subscriptionGroups[/{group}]
    topic_properties_routes.register(app)  # PUT/GET/DELETE .../{topic}/properties (message.type)
    topic = TOPIC_PATH
    app.add_routes(
        [
            web.get("/status.html", get_status),
            web.get("/admin/v2/clusters", get_clusters),
            web.get("/admin/v2/tenants", get_tenants),
            web.put("/admin/v2/tenants/{tenant}", put_tenant),
            web.get("/admin/v2/namespaces/{tenant}", get_namespaces),
            web.put("/admin/v2/namespaces/{tenant}/{namespace}", put_namespace),
            web.get(DOMAIN_LIST_PATH, list_topics),
            web.get(DOMAIN_LIST_PATH + "/partitioned", list_partitioned_topics),
            web.put(topic + "/partitions", put_partitions),
            web.get(topic + "/partitions", get_partitions),
            web.get(topic + "/stats", get_stats),
            web.get(topic + "/subscriptions", get_subscriptions),
            web.get(topic + "/internalStats", get_internal_stats),
            web.get(topic + "/lastMessageId", get_last_message_id),
            web.post("/admin/v2/namespaces/{tenant}/{namespace}/deduplication", post_namespace_deduplication),
            web.get("/admin/v2/namespaces/{tenant}/{namespace}/deduplication", get_namespace_deduplication),
            web.delete(
                "/admin/v2/namespaces/{tenant}/{namespace}/deduplication", delete_namespace_deduplication
            ),
            web.delete(topic + "/subscription/{subscription}", delete_subscription),
            web.post(topic + "/deduplicationEnabled", post_topic_deduplication),
            web.get(topic + "/deduplicationEnabled", get_topic_deduplication),
            web.delete(topic + "/deduplicationEnabled", delete_topic_deduplication),
            *_policy_routes(topic),
            web.put(topic, put_topic),
        ]
    )
    cluster_routes.register(app)
    dashboard_routes.register(app)  # GET /dashboard/ and /dashboard/static/{name}: the web dashboard's files
    subscription_routes.register_last(app)  # DELETE .../{topic}[/partitions]: 405 (no topic deletion)
    return app
