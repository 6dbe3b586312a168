"""Topic termination over the admin REST API (Pulsar ``PersistentTopics.terminate`` /
``terminatePartitionedTopic``).

- ``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/terminate``: terminate a non-partitioned topic or
  one partition; answers the last message id ``{"ledgerId", "entryId", "partitionIndex"}`` (entry -1 when
  the topic holds none). 405 for the base name of a partitioned topic (Pulsar: "Termination of a
  partitioned topic is not allowed"), 404 for an unknown topic.
- ``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/terminate/partitions``: terminate every
  partition of a partitioned topic; answers ``{"<partition index>": {message id}, ...}``. 404 when the topic
  is not partitioned.

Only persistent topics can be terminated (405 for ``non-persistent``). A
terminated topic refuses producers with TopicTerminatedError and tells consumers that acknowledged
everything REACHED_END_OF_TOPIC (``PersistentTopic.terminate``); the mark survives restarts.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.admin.request_params import TOPIC_PATH
from quasar.broker.errors import NotAllowedError, TopicNotFoundError
from quasar.broker.topic import PersistentTopic
from quasar.protocol import TopicName

__all__ = ["OWNER_ONLY", "register"]

_TOPIC = TOPIC_PATH


def _topic_name(request: web.Request) -> TopicName:
    info = request.match_info
    if info["domain"] != "persistent":
        raise web.HTTPMethodNotAllowed(
            request.method,
            ["POST"],
            text='{"reason": "Termination is only supported for persistent topics"}',
            content_type="application/json",
        )
    return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")


def _message_id(position: Any, partition_index: int) -> dict[str, int]:
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": partition_index}


async def _terminate_one(request: web.Request, name: TopicName) -> dict[str, int]:
    topic = await request.app[SERVICE_KEY].get_or_create_topic(name, create=False)
    if not isinstance(topic, PersistentTopic):
        raise TopicNotFoundError(f"Topic {name.full_name} is not persistent")
    return _message_id(await topic.terminate(), name.partition_index)


async def terminate(request: web.Request) -> web.Response:
    """POST {topic}/terminate: the last message id of the terminated topic (module docstring)."""
    name = _topic_name(request)
    if request.app[SERVICE_KEY].partitions(name) > 0:
        return web.json_response({"reason": "Termination of a partitioned topic is not allowed"}, status=405)
    return web.json_response(await _terminate_one(request, name))


async def terminate_partitions(request: web.Request) -> web.Response:
    """POST {topic}/terminate/partitions: ``{partition index: last message id}`` (module docstring)."""
    name = _topic_name(request)
    service = request.app[SERVICE_KEY]
    count = service.partitions(name)
    if count == 0:
        raise TopicNotFoundError(f"Topic {name.full_name} is not a partitioned topic")
    answer: dict[str, dict[str, int]] = {}
    for index in range(count):
        partition = name.partition(index)
        if service.owner_web_url(partition) is not None:
            raise NotAllowedError(
                f"partition {index} is served by another broker group: terminate it there"
                f" ({partition.full_name})"
            )
        answer[str(index)] = await _terminate_one(request, partition)
    return web.json_response(answer)


OWNER_ONLY = (terminate,)
"""Handlers the cluster's owner-redirect middleware sends to the topic's owning broker."""


def register(app: web.Application) -> None:
    """Add the termination routes to the admin ``app`` (its error middleware maps the errors)."""
    app.add_routes(
        [
            web.post(_TOPIC + "/terminate", terminate),
            web.post(_TOPIC + "/terminate/partitions", terminate_partitions),
        ]
    )
