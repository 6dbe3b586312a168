"""PullActivity: RocketMQ's pull by offset over gRPC — QueryOffset, PullMessage, GetOffset, UpdateOffset
(``apache.rocketmq.v2.MessagingService``; seed 002's ``PullMessageProcessor``; reference rocketmq-grpc.md §10).
The proxy leaves these RPCs unimplemented; Quasar serves them on its store:

- **QueryOffset** ``{message_queue, query_offset_policy, timestamp}`` -> ``offset``: BEGINNING = the queue's
  min offset (first entry still held), END = its max offset (one past the last entry), TIMESTAMP = the first
  offset stored at or after ``timestamp`` (max offset when every entry is older).
- **PullMessage** ``{group, message_queue, offset, batch_size, filter_expression, long_polling_timeout}``
  (server stream): ``status`` (OK, or MESSAGE_NOT_FOUND when nothing matched), then each ``message`` in queue
  order (at most ``batch_size``, capped at 32 entries; a Pulsar batch entry gives all its messages), then
  ``next_offset`` (where the next pull starts: past the last unit examined, so units of other tags are not
  scanned again). At the end of the queue it waits up to ``long_polling_timeout`` (capped at the listener's
  ``long_polling_timeout_s``, 20 s, and cut to the call's deadline less 1 s) for new entries, woken by them
  (``pull_hold.PullHoldService``, RocketMQ ``PullRequestHoldService``); absent or zero = answer at once.
  Offsets outside ``[min, max]`` answer ILLEGAL_OFFSET naming the range. Pulling moves no offset.
- **GetOffset** ``{group, message_queue}`` -> the group's committed offset: the entry after the mark-delete
  position of the durable subscription ``group`` on that partition; OFFSET_NOT_FOUND without one.
- **UpdateOffset** ``{group, message_queue, offset}``: sets it (creating the subscription when new), persisted
  before the answer, so it survives a restart (``pull_engine.PullEngine.commit_offset``).

Filtering (``filter_expression.py``): TAG expressions (``*``, ``A||B``) match on the consume queue's tag hash
first, without reading skipped records, then on the message's tag; SQL92 answers ILLEGAL_FILTER_EXPRESSION.
Delayed messages are returned where they are stored, as Pulsar readers get them (delivery time is a
subscription dispatch feature). Every request is validated before any work: topic and group names
(ILLEGAL_TOPIC / ILLEGAL_CONSUMER_GROUP), a negative offset or polling time, a batch size < 1 (BAD_REQUEST).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from quasar.broker.errors import NotAllowedError
from quasar.broker.rocketmq.consume_filter import parse_filter
from quasar.broker.rocketmq.context import RocketMQContext, call_metadata
from quasar.broker.rocketmq.mapping import messages_of_entry
from quasar.broker.rocketmq.pull_engine import IllegalOffsetError, OffsetNotFoundError, PullEngine
from quasar.broker.rocketmq.pull_hold import PullHoldService, TooManyHoldsError
from quasar.broker.rocketmq.status import Code, RocketMQError, code_of, new_status, ok_status
from quasar.broker.rocketmq.stubs import definition, service
from quasar.broker.rocketmq.validation import check_consumer_group
from quasar.broker.topic import PersistentTopic
from quasar.errors import QuasarError
from quasar.protocol import ProtocolError

__all__ = ["DEADLINE_MARGIN_S", "PullActivity"]

log = logging.getLogger(__name__)

DEADLINE_MARGIN_S = 1.0
"""A long poll ends this long before the call's deadline, so the answer reaches the client in time."""


class PullActivity:
    """The pull-by-offset handler group (one per listener; owns the long-poll holds)."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context
        self.engine = PullEngine(context.service, PullHoldService())

    # ------------------------------------------------------------------ helpers
    async def _queue(self, message_queue: Any, metadata: Any) -> PersistentTopic:
        """The partition named by a ``MessageQueue``; raises RocketMQError for a bad or unknown one."""
        topic = self.context.topic_name(message_queue.topic, metadata)
        queue_id = message_queue.id
        if queue_id < 0:
            raise RocketMQError(Code.BAD_REQUEST, f"queue id must be >= 0 to pull by offset, got {queue_id}")
        self.context.queue_count(topic)  # TOPIC_NOT_FOUND for an unknown namespace
        try:
            return await self.engine.partition(topic, queue_id)
        except NotAllowedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None
        except QuasarError as exc:
            raise RocketMQError(code_of(exc), str(exc)) from None

    @staticmethod
    def _group(resource: Any) -> str:
        check_consumer_group(resource.name)
        return str(resource.name)

    @staticmethod
    def _illegal_offset(exc: IllegalOffsetError) -> RocketMQError:
        return RocketMQError(Code.ILLEGAL_OFFSET, str(exc))

    def _polling_s(self, request: Any, context: Any) -> float:
        """Seconds a pull may wait at the end of the queue (module docstring)."""
        if not request.HasField("long_polling_timeout"):
            return 0.0
        duration = request.long_polling_timeout
        seconds = duration.seconds + duration.nanos / 1e9
        if seconds < 0:
            raise RocketMQError(Code.ILLEGAL_POLLING_TIME, f"long_polling_timeout is negative: {seconds} s")
        seconds = min(seconds, float(self.context.settings.long_polling_timeout_s))
        remaining = context.time_remaining()
        if remaining is not None:
            seconds = min(seconds, remaining - DEADLINE_MARGIN_S)
        return float(max(seconds, 0.0))

    # ------------------------------------------------------------------ RPCs
    async def QueryOffset(self, request: Any, context: Any) -> Any:
        """BEGINNING / END / TIMESTAMP -> a queue offset (module docstring)."""
        metadata = call_metadata(context)
        policy = request.query_offset_policy
        if policy == definition.QueryOffsetPolicy.TIMESTAMP and not request.HasField("timestamp"):
            raise RocketMQError(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
        if policy not in definition.QueryOffsetPolicy.values():
            raise RocketMQError(Code.BAD_REQUEST, f"unknown query_offset_policy {policy}")
        topic = await self._queue(request.message_queue, metadata)
        low, high = self.engine.offset_range(topic)
        if policy == definition.QueryOffsetPolicy.BEGINNING:
            offset = low
        elif policy == definition.QueryOffsetPolicy.END:
            offset = high
        else:
            offset = self.engine.offset_at_time(topic, request.timestamp.ToMilliseconds())
        return service.QueryOffsetResponse(status=ok_status(), offset=offset)

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """status, messages, next_offset (module docstring)."""
        metadata = call_metadata(context)
        self._group(request.group)
        tag_filter = parse_filter(request.filter_expression)
        if request.offset < 0:
            raise RocketMQError(Code.ILLEGAL_OFFSET, f"offset must be >= 0, got {request.offset}")
        if request.batch_size < 1:
            raise RocketMQError(Code.BAD_REQUEST, f"batch_size must be >= 1, got {request.batch_size}")
        polling_s = self._polling_s(request, context)
        topic = await self._queue(request.message_queue, metadata)
        try:
            result = await self.engine.pull(
                topic, request.offset, request.batch_size, tag_filter, polling_s, metadata.client_id
            )
        except IllegalOffsetError as exc:
            raise self._illegal_offset(exc) from None
        except TooManyHoldsError as exc:
            raise RocketMQError(Code.TOO_MANY_REQUESTS, str(exc)) from None
        store_host = self.context.store_host()
        queue_id = request.message_queue.id
        messages = []
        for entry in result.entries:
            try:
                mapped = messages_of_entry(
                    entry, topic=request.message_queue.topic, queue_id=queue_id, store_host=store_host
                )
            except ProtocolError as exc:  # as Pulsar consumers discard an entry they cannot parse
                log.warning("%s: entry %s skipped by a pull: %s", topic.name.full_name, entry.position, exc)
                continue
            messages.extend(mapped)  # the engine checked the entries' tags
        if messages:
            yield service.PullMessageResponse(status=ok_status())
        else:
            yield service.PullMessageResponse(
                status=new_status(Code.MESSAGE_NOT_FOUND, "no matching message from this offset")
            )
        for message in messages:
            yield service.PullMessageResponse(message=message)
        yield service.PullMessageResponse(next_offset=result.next_offset)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        """The group's committed offset on the queue; OFFSET_NOT_FOUND without one."""
        metadata = call_metadata(context)
        group = self._group(request.group)
        topic = await self._queue(request.message_queue, metadata)
        try:
            offset = self.engine.committed_offset(topic, group)
        except OffsetNotFoundError as exc:
            raise RocketMQError(Code.OFFSET_NOT_FOUND, str(exc)) from None
        return service.GetOffsetResponse(status=ok_status(), offset=offset)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        """Set the group's committed offset (its subscription's mark-delete position), persisted."""
        metadata = call_metadata(context)
        group = self._group(request.group)
        if request.offset < 0:
            raise RocketMQError(Code.ILLEGAL_OFFSET, f"offset must be >= 0, got {request.offset}")
        topic = await self._queue(request.message_queue, metadata)
        try:
            await self.engine.commit_offset(topic, group, request.offset)
        except IllegalOffsetError as exc:
            raise self._illegal_offset(exc) from None
        except QuasarError as exc:
            raise RocketMQError(code_of(exc), str(exc)) from None
        return service.UpdateOffsetResponse(status=ok_status())
