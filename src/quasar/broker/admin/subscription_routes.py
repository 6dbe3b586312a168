"""Subscriptions of a persistent topic over the admin REST API (Pulsar ``PersistentTopicsBase``), plus the
topic's partitioned stats and unload. Paths are under ``/admin/v2/persistent/{tenant}/{namespace}/{topic}``;
errors are ``{"reason": ...}``; ``non-persistent`` answers 405. For the base name of a partitioned topic the
call applies to every partition where Pulsar does so (create subscription, skip_all, expireMessages,
resetcursor by time, unload); skip, resetcursor to a message id and peek answer 405 there, as Pulsar does.

- ``PUT .../subscription/{sub}``, body a MessageId ``{"ledgerId", "entryId"}`` (``-1/-1`` earliest, empty or
  ``Long.MAX_VALUE`` latest): create durable subscription ``sub`` whose first message is that one, creating
  the topic as Pulsar does with topic auto-creation; 204, 409 "Subscription already exists for topic".
- ``POST .../subscription/{sub}/skip_all``: clear the backlog (mark-delete to the last entry); 204.
- ``POST .../subscription/{sub}/skip/{n}``: skip the next ``n`` unacknowledged entries; 204.
- ``POST .../subscription/{sub}/expireMessages/{seconds}`` and ``POST .../all_subscription/expireMessages/
  {seconds}``: acknowledge the messages published more than ``seconds`` ago (one subscription / every
  durable one); 204.
- ``POST .../subscription/{sub}/resetcursor/{timestamp}`` (ms since the epoch) and ``POST .../subscription/
  {sub}/resetcursor`` with a MessageId body (``"isExcluded": true`` starts after it): disconnect the
  subscription's consumers and move its cursor so that they resume from the first message published at or
  after the time / from that message (Pulsar ``resetCursor``); 204.
- ``GET .../subscription/{sub}/position/{n}``: the ``n``-th (1-based) unacknowledged entry after the
  mark-delete position, as Pulsar ``peekNthMessage``: the uncompressed payload as the body (a batch stays
  the batch payload, items included) with ``X-Pulsar-*`` headers (``peek_headers``); 404 "Message not found".
- ``GET .../partitioned-stats[?perPartition=true]``: Pulsar PartitionedTopicStats: the partitions' TopicStats
  summed, ``metadata.partitions``, and ``partitions`` ``{partition name: TopicStats}`` (default true).
- ``PUT .../unload``: close the topic object (clients are disconnected and reconnect; it loads again); 204.
- ``DELETE .../{topic}[?force=true]`` and ``DELETE .../{topic}/partitions[?force=true]``: delete the topic / every
  partition of a partitioned topic and its metadata (``quasar.broker.topic_deletion``); 204.

404 "Subscription not found" for an unknown subscription; unknown topics 404.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from quasar.broker.admin.peek import peek_response
from quasar.broker.admin.request_params import TOPIC_PATH, query_flag
from quasar.broker.admin.request_params import service_of as _service
from quasar.broker.admin.validation import parse_json
from quasar.broker.broker_service import TopicExistsError
from quasar.broker.errors import NotAllowedError, TopicNotFoundError
from quasar.broker.policies import expire_older_than
from quasar.broker.subscription import Subscription
from quasar.broker.topic import PersistentTopic
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import InitialPosition

__all__ = ["OWNER_ONLY", "register", "register_last"]

_TOPIC = TOPIC_PATH
_SUB = _TOPIC + "/subscription/{subscription}"
_LATEST = 2**63 - 1  # Java Long.MAX_VALUE: MessageId.latest


def _not_allowed(request: web.Request, reason: str) -> web.HTTPMethodNotAllowed:
    return web.HTTPMethodNotAllowed(
        request.method, [], text=web.json_response({"reason": reason}).text, content_type="application/json"
    )


def _topic_name(request: web.Request) -> TopicName:
    info = request.match_info
    if info["domain"] != "persistent":
        raise _not_allowed(request, "This operation is only supported for persistent topics")
    return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")


def _targets(request: web.Request, *, partitioned: str | None = None) -> list[TopicName]:
    """The topic, or every partition of a partitioned topic (``partitioned`` is Pulsar's 405 reason where the
    operation is refused on a partitioned topic); NotAllowedError for a partition served elsewhere."""
    name = _topic_name(request)
    service = _service(request)
    count = service.partitions(name)
    if count == 0:
        return [name]
    if partitioned is not None:
        raise _not_allowed(request, partitioned)
    partitions = [name.partition(index) for index in range(count)]
    for partition in partitions:
        if service.owner_web_url(partition) is not None:
            raise NotAllowedError(
                f"{partition.full_name} is served by another broker group: call it there for this partition"
            )
    return partitions


async def _loaded(request: web.Request, name: TopicName, *, create: bool = False) -> PersistentTopic:
    topic = await _service(request).get_or_create_topic(name, create=create)
    if not isinstance(topic, PersistentTopic):
        raise TopicNotFoundError(f"Topic {name.full_name} is not persistent")
    return topic


def _subscription(request: web.Request, topic: PersistentTopic) -> Subscription:
    subscription = topic.subscriptions.get(request.match_info["subscription"])
    if subscription is None or not subscription.durable:
        raise TopicNotFoundError("Subscription not found")
    return subscription


def _int_param(request: web.Request, key: str, *, minimum: int = 0) -> int:
    raw = request.match_info[key]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {raw!r:.50}") from None
    if value < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value}")
    return value


def _message_id(body: Any) -> tuple[int, int, bool]:
    """(ledgerId, entryId, isExcluded) of a MessageId / ResetCursorData JSON object."""
    if not isinstance(body, dict):
        raise ValueError('body must be a MessageId JSON object {"ledgerId": .., "entryId": ..}')
    ledger_id, entry_id = body.get("ledgerId"), body.get("entryId")
    if type(ledger_id) is not int or type(entry_id) is not int:
        raise ValueError(f"ledgerId and entryId must be integers, got {ledger_id!r:.30} and {entry_id!r:.30}")
    excluded = body.get("isExcluded", False)
    if not isinstance(excluded, bool):
        raise ValueError(f"isExcluded must be true or false, got {excluded!r:.30}")
    return ledger_id, entry_id, excluded


def _start_position(topic: PersistentTopic, ledger_id: int, entry_id: int, excluded: bool) -> Position:
    """The next entry to read for a MessageId (earliest -1/-1, latest Long.MAX_VALUE)."""
    ledger = topic.ledger
    if ledger_id < 0 or entry_id < 0:
        return ledger.first_position
    if ledger_id == _LATEST or entry_id == _LATEST:
        return ledger.next_valid_position(ledger.last_confirmed_entry)
    position = Position(ledger_id, entry_id)
    return ledger.next_valid_position(position) if excluded else position


# ---------------------------------------------------------------------- handlers
async def create_subscription(request: web.Request) -> web.Response:
    """PUT .../subscription/{sub}: 204; 409 when it exists (module docstring)."""
    body = parse_json(await request.text())
    message_id = (_LATEST, _LATEST, False) if body is None else _message_id(body)
    name = request.match_info["subscription"]
    # Pulsar creates the topic (allowAutoTopicCreation, always on in Quasar) or the partitions' topics
    topics = [await _loaded(request, target, create=True) for target in _targets(request)]
    if any(name in topic.subscriptions for topic in topics):
        raise TopicExistsError("Subscription already exists for topic")
    for topic in topics:
        _service(request).check_subscription_limit(topic, name)
        subscription = await topic.get_or_create_subscription(
            name, durable=True, initial_position=InitialPosition.Latest
        )
        subscription.cursor.reset_cursor(_start_position(topic, *message_id))
    return web.Response(status=204)


async def skip_all(request: web.Request) -> web.Response:
    """POST .../subscription/{sub}/skip_all: clear the backlog (module docstring)."""
    for target in _targets(request):
        topic = await _loaded(request, target)
        _subscription(request, topic).expire_until(topic.ledger.last_confirmed_entry)
    return web.Response(status=204)


def _nth_unacked(subscription: Subscription, n: int) -> Position | None:
    """The ``n``-th (n >= 1) entry after the mark-delete position that is not individually acknowledged,
    or None when the backlog holds fewer (Pulsar ``getNthEntry`` with ``IndividualDeletedEntries.Exclude``)."""
    cursor = subscription.cursor
    ledger = subscription.topic.ledger
    if n > cursor.number_of_entries_in_backlog:
        return None
    if cursor.individually_deleted.cardinality == 0:
        return ledger.position_after(cursor.mark_delete_position, n)
    position = cursor.mark_delete_position
    while n > 0:  # bounded: n <= backlog, and every step moves one entry forward
        position = ledger.next_valid_position(position)
        if not cursor.is_acked(position):
            n -= 1
    return position


async def skip(request: web.Request) -> web.Response:
    """POST .../subscription/{sub}/skip/{n} (module docstring)."""
    count = _int_param(request, "count")
    [target] = _targets(request, partitioned="Skip messages on a partitioned topic is not allowed")
    topic = await _loaded(request, target)
    subscription = _subscription(request, topic)
    if count > 0:
        subscription.expire_until(_nth_unacked(subscription, count) or topic.ledger.last_confirmed_entry)
    return web.Response(status=204)


async def expire_messages(request: web.Request) -> web.Response:
    """POST .../subscription/{sub}/expireMessages/{seconds} (module docstring)."""
    seconds = _int_param(request, "seconds")
    cutoff_ms = int(time.time() * 1000) - seconds * 1000
    for target in _targets(request):
        topic = await _loaded(request, target)
        expire_older_than(topic, cutoff_ms, [_subscription(request, topic)])
    return web.Response(status=204)


async def expire_all_subscriptions(request: web.Request) -> web.Response:
    """POST .../all_subscription/expireMessages/{seconds} (module docstring)."""
    seconds = _int_param(request, "seconds")
    cutoff_ms = int(time.time() * 1000) - seconds * 1000
    for target in _targets(request):
        topic = await _loaded(request, target)
        durable = [s for s in topic.subscriptions.values() if s.durable]
        if durable:
            expire_older_than(topic, cutoff_ms, durable)
    return web.Response(status=204)


def _reset(subscription: Subscription, position: Position) -> None:
    subscription.close_consumers()  # they re-subscribe and read from the new position
    subscription.cursor.reset_cursor(position)


async def reset_cursor_by_time(request: web.Request) -> web.Response:
    """POST .../subscription/{sub}/resetcursor/{timestamp} (module docstring)."""
    timestamp = _int_param(request, "timestamp")
    for target in _targets(request):
        topic = await _loaded(request, target)
        _reset(_subscription(request, topic), topic.find_position_by_publish_time(timestamp))
    return web.Response(status=204)


async def reset_cursor_to_message(request: web.Request) -> web.Response:
    """POST .../subscription/{sub}/resetcursor with a MessageId body (module docstring)."""
    message_id = _message_id(parse_json(await request.text()))
    [target] = _targets(request, partitioned="Reset-cursor at position is not allowed for partitioned-topic")
    topic = await _loaded(request, target)
    _reset(_subscription(request, topic), _start_position(topic, *message_id))
    return web.Response(status=204)


async def peek(request: web.Request) -> web.Response:
    """GET .../subscription/{sub}/position/{n}: payload and ``X-Pulsar-*`` headers (module docstring)."""
    n = _int_param(request, "position", minimum=1)
    [target] = _targets(request, partitioned="Peek messages on a partitioned topic is not allowed")
    topic = await _loaded(request, target)
    position = _nth_unacked(_subscription(request, topic), n)
    entry = None if position is None else topic.ledger.get_entry(position)
    if position is None or entry is None:
        raise TopicNotFoundError("Message not found")
    return peek_response(position, entry.data)


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter", "bytesInCounter",
           "msgOutCounter", "bytesOutCounter", "storageSize")  # fmt: skip
_SUB_SUMMED = (
    "msgBacklog",
    "unackedMessages",
    "msgRateOut",
    "msgThroughputOut",
    "msgOutCounter",
    "bytesOutCounter",
)


def _aggregate(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """PartitionedTopicStats' aggregate: counters and rates summed, publishers listed, subscriptions merged
    (backlog, unacked, out counters and rates summed, consumers listed)."""
    total: dict[str, Any] = {key: sum(s.get(key, 0) for s in stats) for key in _SUMMED}
    total["publishers"] = [p for s in stats for p in s.get("publishers", [])]
    subscriptions: dict[str, dict[str, Any]] = {}
    for partition in stats:
        for name, sub in partition.get("subscriptions", {}).items():
            merged = subscriptions.setdefault(name, {**sub, **dict.fromkeys(_SUB_SUMMED, 0), "consumers": []})
            for key in _SUB_SUMMED:
                merged[key] += sub.get(key, 0)
            merged["consumers"] += sub["consumers"]
    total["subscriptions"] = subscriptions
    return total


async def partitioned_stats(request: web.Request) -> web.Response:
    """GET .../partitioned-stats[?perPartition=true] (module docstring); 404 for a non-partitioned topic."""
    name = _topic_name(request)
    if _service(request).partitions(name) == 0:
        raise TopicNotFoundError("Partitioned Topic not found")
    per_partition = query_flag(request, "perPartition", default=True)
    stats: dict[str, dict[str, Any]] = {}
    for partition in _targets(request):
        try:
            stats[partition.full_name] = (await _loaded(request, partition)).stats()
        except TopicNotFoundError:  # a partition nobody has used yet holds nothing
            continue
    body = _aggregate(list(stats.values()))
    body["metadata"] = {"partitions": _service(request).partitions(name), "deleted": False}
    body["partitions"] = stats if per_partition else {}
    return web.json_response(body)


async def unload(request: web.Request) -> web.Response:
    """PUT .../unload: 204 (module docstring); a partition nobody has used yet has nothing to unload."""
    targets = _targets(request)
    for target in targets:
        try:
            await _service(request).unload_topic(target)
        except TopicNotFoundError:
            if target.partition_index < 0:
                raise
    return web.Response(status=204)


async def delete_topic(request: web.Request) -> web.Response:
    """DELETE .../{topic}[?force=true] (Pulsar ``deleteTopic``) and DELETE .../{topic}/partitions[?force=true]
    (``deletePartitionedTopic``): 204; 412 while clients are connected unless ``force``; 404 for an unknown
    topic; 409 for the base name of a partitioned topic without ``/partitions``."""
    domain = request.match_info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise web.HTTPNotFound(text='{"reason": "Not found"}', content_type="application/json")
    info = request.match_info
    topic = TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    force = request.query.get("force", "false").lower() == "true"
    service = _service(request)
    if request.path.endswith("/partitions"):
        await service.delete_partitioned_topic(topic, force=force)
    elif service.partitions(topic) > 0:
        raise web.HTTPConflict(
            text=web.json_response({"reason": f"{topic.full_name} is a partitioned topic"}).text,
            content_type="application/json",
        )
    else:
        await service.delete_topic(topic, force=force)
    return web.Response(status=204)


OWNER_ONLY = (create_subscription, skip_all, skip, expire_messages, expire_all_subscriptions,
              reset_cursor_by_time, reset_cursor_to_message, peek, unload, delete_topic)  # fmt: skip
"""Handlers the cluster's owner-redirect middleware sends to the topic's owning broker."""


def register(app: web.Application) -> None:
    """Add the subscription, partitioned-stats and unload routes."""
    app.add_routes(
        [
            web.put(_SUB, create_subscription),
            web.post(_SUB + "/skip_all", skip_all),
            web.post(_SUB + "/skip/{count}", skip),
            web.post(_SUB + "/expireMessages/{seconds}", expire_messages),
            web.post(_TOPIC + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions),
            web.post(_SUB + "/resetcursor/{timestamp}", reset_cursor_by_time),
            web.post(_SUB + "/resetcursor", reset_cursor_to_message),
            web.get(_SUB + "/position/{position}", peek),
            web.get(_TOPIC + "/partitioned-stats", partitioned_stats),
            web.put(_TOPIC + "/unload", unload),
        ]
    )


def register_last(app: web.Application) -> None:
    """Add ``DELETE .../{topic}`` and ``DELETE .../{topic}/partitions``; call after every other route, so
    that the ``{topic}`` templates never take a more specific path."""
    app.add_routes([web.delete(_TOPIC, delete_topic), web.delete(_TOPIC + "/partitions", delete_topic)])
