"""Query messages by key and time range (RocketMQ ``queryMessage``, which Pulsar lacks) over the admin API.

``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/messages?key=K[&from=MS][&to=MS][&max=N]``

``from`` / ``to`` are store times in ms since the epoch (default: everything), ``max`` the number of entries
looked up per partition (default 32, at most 64, RocketMQ's ``defaultQueryMaxNum`` / ``maxMsgsNumBatch``).
The answer is a JSON list, oldest first, of the messages whose key is K::

    {"messageId": "L:E" or "L:E:B", "ledgerId": L, "entryId": E, "batchIndex": B or -1,
     "partition": P or -1, "topic": "persistent://...", "key": K, "publishTime": ms, "storeTime": ms,
     "properties": {...}, "payload": "<base64>"}

A partitioned topic is queried partition by partition. The handler reaches the message store only through
``app[MESSAGE_STORE]`` (set by the composition root, ``broker/app.py``), never by importing storage; the
store's index is fed by :func:`pulsar_entry_keys`, which finds the keys of a stored Pulsar entry (the
partition key, and the partition key of every message inside a batch) on the store's reput thread; the
store also indexes the ``KEYS`` words and the ``UNIQ_KEY`` of a record (a RocketMQ client's keys and message
id), which match here too.

400 for a missing key or a bad number, 404 for an unknown topic (the routes' error middleware), 503 when no
store is attached.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import logging
from typing import Any, Protocol

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.admin.request_params import TOPIC_PATH
from quasar.broker.errors import NamespaceNotFoundError, NotAllowedError, TopicNotFoundError
from quasar.broker.topic import PersistentTopic
from quasar.protocol import TopicName
from quasar.protocol.compression import decompress
from quasar.protocol.entry_keys import MAX_UNCOMPRESSED_SIZE, entry_keys
from quasar.protocol.errors import InvalidTopicNameError
from quasar.protocol.metadata import iter_batch, parse_headers_and_payload

log = logging.getLogger(__name__)

DEFAULT_MAX = 32
MAX_MAX = 64


class StoredMessageView(Protocol):
    queue_offset: int
    store_timestamp: int
    body: memoryview


class KeyQueryable(Protocol):
    """What the handler needs of the store: ``MessageStore.query``."""

    def query(
        self, topic: str, key: str, begin_ms: int = ..., end_ms: int = ..., max_num: int = ...
    ) -> list[Any]: ...


MESSAGE_STORE = web.AppKey("message_store", KeyQueryable)
MAX_UNCOMPRESSED = web.AppKey("max_uncompressed_size", int)
"""The largest ``uncompressed_size`` (bytes) a stored entry is inflated to for a query (the broker's
``max_message_size``; default :data:`~quasar.protocol.entry_keys.MAX_UNCOMPRESSED_SIZE`); a larger one is
skipped, as the index skipped its batch keys."""


def pulsar_entry_keys(
    topic: str, body: memoryview, *, max_uncompressed_size: int = MAX_UNCOMPRESSED_SIZE
) -> list[str]:
    """Keys of a stored Pulsar entry: ``MessageMetadata.partition_key`` and, for a batch, each
    ``SingleMessageMetadata.partition_key`` (decompressing the payload; encrypted batches are not opened).

    The store's ``key_extractor``: it runs on the reput thread for every entry, so it is
    :func:`quasar.protocol.entry_keys.entry_keys`, compiled, one pass over the entry with the GIL released on
    large entries and no Python object per message (no CRC or required-field check: that happened on
    publish). Raises the protocol layer's errors (MalformedFrameError, MalformedBatchError,
    CompressionError) on a malformed entry; the store counts and skips those. Records of queues that are not
    managed ledgers of Pulsar topics (e.g. replication's state journal) have no keys.

    ``max_uncompressed_size`` (bytes; the broker passes its ``max_message_size``) bounds what a compressed
    batch may inflate to: a larger ``uncompressed_size`` is a CompressionError before anything is inflated,
    as the Java consumer discards such a batch."""
    if not topic.startswith(("persistent://", "non-persistent://")):
        return []
    return entry_keys(body, max_uncompressed_size=max_uncompressed_size)


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    if info["domain"] not in ("persistent", "non-persistent"):
        raise web.HTTPNotFound(reason=f"unknown domain {info['domain']}")
    return TopicName.parse(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}")


def _int_param(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name!r} must be an integer, got {raw!r}") from None


def _messages_of(
    topic: TopicName,
    partition: int,
    message: StoredMessageView,
    key: str,
    ledgers: list[tuple[int, int]],
    max_uncompressed_size: int = MAX_UNCOMPRESSED_SIZE,
) -> list[dict[str, Any]]:
    """The messages with ``key`` in one stored entry, as JSON objects; none for a compressed entry whose
    ``uncompressed_size`` is above ``max_uncompressed_size`` (it is not inflated)."""
    starts = [first for first, _ in ledgers]
    index = bisect.bisect_right(starts, message.queue_offset) - 1
    if index < 0:
        return []
    first_queue_offset, ledger_id = ledgers[index]
    entry_id = message.queue_offset - first_queue_offset
    parsed = parse_headers_and_payload(message.body)
    metadata = parsed.metadata
    base = {
        "ledgerId": ledger_id,
        "entryId": entry_id,
        "partition": partition,
        "topic": topic.full_name,
        "publishTime": metadata.publish_time,
        "storeTime": message.store_timestamp,
    }
    payload: bytes | memoryview = parsed.payload
    if metadata.compression:
        if metadata.uncompressed_size > max_uncompressed_size:
            return []
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    found = []
    if metadata.HasField("num_messages_in_batch"):
        # one item at a time: an entry of 5 MB can hold 800,000 items (objects for all of them took 200 MB)
        for batch_index, (single, item) in enumerate(iter_batch(payload, metadata.num_messages_in_batch)):
            if _has_key(single, key):
                properties = {kv.key: kv.value for kv in single.properties}
                found.append(_json(base, batch_index, key, properties, item))
    elif _has_key(metadata, key):
        properties = {kv.key: kv.value for kv in metadata.properties}
        found.append(_json(base, -1, key, properties, payload))
    return found


def _has_key(metadata: Any, key: str) -> bool:
    """Whether a message's (Single)MessageMetadata has ``key``: its partition key, or, for a message a RocketMQ
    client sent (``quasar.broker.rocketmq.mapping``), one of the words of its ``KEYS`` property or its
    ``UNIQ_KEY`` message id — the store indexes those too."""
    if metadata.HasField("partition_key") and metadata.partition_key == key:
        return True
    for kv in metadata.properties:
        if (kv.key == "KEYS" and key in kv.value.split()) or (kv.key == "UNIQ_KEY" and kv.value == key):
            return True
    return False


def _json(
    base: dict[str, Any], batch_index: int, key: str, properties: dict[str, str], payload: bytes | memoryview
) -> dict[str, Any]:
    message_id = f"{base['ledgerId']}:{base['entryId']}" + (f":{batch_index}" if batch_index >= 0 else "")
    return {
        "messageId": message_id,
        **base,
        "batchIndex": batch_index,
        "key": key,
        "properties": properties,
        "payload": base64.b64encode(bytes(payload)).decode("ascii"),
    }


async def query_messages(request: web.Request) -> web.Response:
    """``GET .../{topic}/messages?key=K&from=MS&to=MS&max=N`` (see the module docstring). Answers errors
    itself as ``{"reason": ...}`` (400 bad parameter, 412 invalid topic name, 404 unknown topic or namespace, 405 a
    non-persistent topic, which stores nothing to query)."""
    try:
        return await _query_messages(request)
    except InvalidTopicNameError as exc:  # as every admin path: Pulsar's 412
        return web.json_response({"reason": str(exc)}, status=412)
    except ValueError as exc:
        return web.json_response({"reason": str(exc)}, status=400)
    except NotAllowedError as exc:
        return web.json_response({"reason": str(exc)}, status=405)
    except (TopicNotFoundError, NamespaceNotFoundError) as exc:
        return web.json_response({"reason": str(exc)}, status=404)


async def _query_messages(request: web.Request) -> web.Response:
    key = request.query.get("key", "")
    if not key:
        raise ValueError("query parameter 'key' is required")
    begin_ms = _int_param(request, "from", 0)
    end_ms = _int_param(request, "to", 2**63 - 1)
    max_num = _int_param(request, "max", DEFAULT_MAX)
    if max_num < 1:
        raise ValueError(f"query parameter 'max' must be >= 1, got {max_num}")
    max_num = min(max_num, MAX_MAX)
    store = request.app.get(MESSAGE_STORE)
    if store is None:
        return web.json_response({"reason": "no message store attached to the admin API"}, status=503)
    service = request.app[SERVICE_KEY]
    max_uncompressed_size = request.app.get(MAX_UNCOMPRESSED, MAX_UNCOMPRESSED_SIZE)
    topic = _topic(request)
    partitions = service.partitions(topic)
    targets = [(topic.partition(i), i) for i in range(partitions)] if partitions > 0 else [(topic, -1)]
    results: list[dict[str, Any]] = []
    for target, partition in targets:
        loaded = await service.get_or_create_topic(target, create=False)
        if not isinstance(loaded, PersistentTopic):
            raise NotAllowedError(
                f"{target.full_name} is not persistent: only stored messages can be queried"
            )
        ledger = loaded.ledger
        ledgers = [(info.first_queue_offset, info.ledger_id) for info in ledger.ledgers]
        last_confirmed = ledger.last_confirmed_entry
        for message in store.query(target.full_name, key, begin_ms, end_ms, max_num):
            for item in _messages_of(target, partition, message, key, ledgers, max_uncompressed_size):
                if (item["ledgerId"], item["entryId"]) <= tuple(last_confirmed):
                    results.append(item)
            await asyncio.sleep(0)  # one entry (at most max_message_size bytes) between turns of the loop
    results.sort(key=lambda item: (item["storeTime"], item["partition"], item["ledgerId"], item["entryId"]))
    return web.json_response(results)


def register(app: web.Application) -> None:
    """Add the query route to the admin application."""
    app.router.add_get(TOPIC_PATH + "/messages", query_messages)
