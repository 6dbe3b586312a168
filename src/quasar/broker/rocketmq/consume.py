"""RocketMQ 5 consumption RPCs: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue (issue 18 part 2; reference rocketmq-grpc.md §6).

:class:`ConsumeActivity` is the handler group; the pop engine is ``broker.pop_consumer`` (one queue per group
and partition, ``consume_groups``), receipt handles are ``receipt_handle``, tag filters ``consume_filter``.

**ReceiveMessage** (server stream) pops from every queue of the topic this broker serves at once (the proxy
ignores the request's queue id and pops the broker's queues with id -1; push consumers send -1):

- checks: consumer group (ILLEGAL_CONSUMER_GROUP), topic (ILLEGAL_TOPIC / TOPIC_NOT_FOUND), the caller's
  consume permission on the topic and group (FORBIDDEN, as a Pulsar SUBSCRIBE; every RPC here), filter
  (ILLEGAL_FILTER_EXPRESSION for SQL92), ``batch_size`` >= 1 (BAD_REQUEST; capped at 32, the proxy's pop
  maximum), invisible time: with ``auto_renew`` 60 s renewed by the broker while the client is connected,
  else the request's ``invisible_duration`` in [10 s, 12 h] (ILLEGAL_INVISIBLE_TIME);
- polling time: ``long_polling_timeout``, else the call's remaining deadline minus half the request timeout;
  clamped to [5 s, ``long_polling_timeout_s`` (20 s)], and cut to end 1 s before the call's deadline (under
  5 s left: ILLEGAL_POLLING_TIME), so the stream always closes before the client gives up;
- a group whose subscription serves an Exclusive or Failover Pulsar consumer answers FORBIDDEN;
- long polls are bounded: :data:`MAX_LONG_POLLS_PER_CONNECTION` per gRPC peer and :data:`MAX_LONG_POLLS` in
  total; beyond, TOO_MANY_REQUESTS at once;
- the stream: ``status`` OK, the messages, ``delivery_timestamp`` (now); or MESSAGE_NOT_FOUND and
  ``delivery_timestamp`` when the poll ended empty. Each message has ``receipt_handle``,
  ``invisible_duration``, ``delivery_attempt`` (= the subscription's redelivery count + 1) and the mapping's
  fields (``mapping.messages_of_entry``). Messages whose tag does not match the filter are acked for the
  group and not sent; the poll goes on while time is left. Messages of a Pulsar batch entry each have a
  handle (its 9th field is the batch index) and are acked one by one (batch-index acks).

**AckMessage**: per entry OK, or INVALID_RECEIPT_HANDLE (40013) for a handle that is malformed, expired,
superseded (ChangeInvisibleDuration), already acked or names another broker/queue; top-level status = the
common code, else MULTIPLE_RESULTS. **ChangeInvisibleDuration**: [0, 12 h] (ILLEGAL_INVISIBLE_TIME); answers a
new handle (the old one stops working; for a message of a batch entry only its own handle changes, and
the entry is visible again once each of its messages not yet acked is due) — on error the request's handle
is echoed (the py client stores the reply's handle before it looks at the status).
**ForwardMessageToDeadLetterQueue**: copies the message to ``%DLQ%<group>`` and acks it (``consume_groups``);
40013 for a bad handle.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import contextmanager
from typing import Any

from quasar.broker.auth import PermissionDeniedError
from quasar.broker.errors import BrokerError, ConsumerBusyError
from quasar.broker.pop_consumer import PopItem, PopQueue, PopWaiter
from quasar.broker.rocketmq.consume_filter import TagFilter, entry_may_match, parse_filter
from quasar.broker.rocketmq.consume_groups import ConsumeGroups
from quasar.broker.rocketmq.context import RocketMQContext, call_metadata
from quasar.broker.rocketmq.group_policy import GroupPolicy, group_policy
from quasar.broker.rocketmq.mapping import messages_of_entry
from quasar.broker.rocketmq.receipt_handle import InvalidReceiptHandleError, ReceiptHandle, decode
from quasar.broker.rocketmq.status import Code, RocketMQError, code_of, new_status, ok_status
from quasar.broker.rocketmq.stubs import service
from quasar.broker.rocketmq.validation import check_consumer_group
from quasar.ledger.errors import ManagedLedgerError
from quasar.protocol import TopicName, parse_headers_and_payload
from quasar.protocol.errors import ProtocolError
from quasar.protocol.metadata import entry_dispatch_info

__all__ = [
    "AUTO_RENEW_INVISIBLE_MS",
    "MAX_BATCH_SIZE",
    "MAX_INVISIBLE_MS",
    "MAX_LONG_POLLS",
    "MAX_LONG_POLLS_PER_CONNECTION",
    "MIN_INVISIBLE_MS",
    "ConsumeActivity",
]

log = logging.getLogger(__name__)

MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000
MAX_BATCH_SIZE = 32
MIN_POLLING_S = 5.0
DEADLINE_MARGIN_S = 1.0
MAX_LONG_POLLS = 5_000
"""Receives waiting at once on one listener (below the server's call limit, so other calls still go)."""
MAX_LONG_POLLS_PER_CONNECTION = 256
"""Receives waiting at once from one gRPC peer (host:port)."""


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _now_timestamp() -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromMilliseconds(int(time.time() * 1000))
    return stamp


@contextmanager
def _busy_as_status(group: str) -> Any:
    """A group whose subscription serves an Exclusive/Failover Pulsar consumer: FORBIDDEN, saying why."""
    try:
        yield
    except ConsumerBusyError as exc:
        raise RocketMQError(
            Code.FORBIDDEN,
            f"consumer group {group} is a Pulsar subscription with an exclusive consumer: {exc}",
        ) from None


class ConsumeActivity:
    """The consumption RPCs (module docstring). Installs itself as ``context.consumer_groups`` (the
    :class:`~quasar.broker.rocketmq.context.ConsumerGroups` port), so QueryAssignment and the Telemetry reply
    read the groups' policies and a consumer's settings register its group; :meth:`close` closes every pop
    queue."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context
        self.groups = ConsumeGroups(context.service, is_alive=context.clients.__contains__)
        self._polls = 0
        self._polls_by_peer: dict[str, int] = {}
        context.consumer_groups = self

    def is_fifo_group(self, topic: TopicName, group: str) -> bool:
        """Whether ``group`` consumes orderly in ``topic``'s namespace (``consume_groups.group_policy``)."""
        return self.policy(topic, group).fifo

    def max_delivery_attempts(self, topic: TopicName, group: str) -> int:
        """Deliveries before ``%DLQ%<group>`` (the group policy's ``retryMaxTimes`` + 1)."""
        return self.policy(topic, group).max_delivery_attempts

    def policy(self, topic: TopicName, group: str) -> GroupPolicy:
        return group_policy(self.context.service, topic.namespace_name, group)

    async def register(self, group: str, topic: TopicName, role: str | None) -> None:
        """Create ``group``'s subscriptions (at the end of each queue this broker serves, unless they exist)
        when a consumer declares ``topic`` in its settings (``ConsumerGroups.register``). Raises RocketMQError
        FORBIDDEN without consume permission, TOPIC_NOT_FOUND and the broker's other refusals."""
        check_consumer_group(group)
        try:
            self.context.service.security.check_consume(role, topic, group)
        except PermissionDeniedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None
        queues = self.context.queue_count(topic)
        policy = self.policy(topic, group)
        try:
            for i in self.context.local_queues(topic, queues):
                await self.groups.queue(group, self.context.queue_topic(topic, i, queues), policy)
        except (BrokerError, ManagedLedgerError) as exc:
            raise RocketMQError(code_of(exc), str(exc)) from None

    def close(self) -> None:
        self.groups.close()

    # ------------------------------------------------------------------ receive
    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        metadata = call_metadata(context)
        group = request.group.name
        check_consumer_group(group)
        topic = self.context.topic_name(request.message_queue.topic, metadata)
        queues = self.context.queue_count(topic)
        self._check_consume(context, topic, group)
        tags = parse_filter(request.filter_expression if request.HasField("filter_expression") else None)
        if request.batch_size < 1:
            raise RocketMQError(Code.BAD_REQUEST, f"batch_size must be at least 1, not {request.batch_size}")
        batch = min(request.batch_size, MAX_BATCH_SIZE)
        invisible_ms = self._invisible_ms(request)
        polling_s = self._polling_s(request, context)
        policy = self.policy(topic, group)
        try:
            pop_queues = [
                await self.groups.queue(group, self.context.queue_topic(topic, i, queues), policy)
                for i in self.context.local_queues(topic, queues)
            ]
        except (BrokerError, ManagedLedgerError) as exc:
            raise RocketMQError(code_of(exc), str(exc)) from None
        for queue in pop_queues:
            queue.accept = None if tags.matches_all else functools.partial(entry_may_match, tags)
        with self._long_poll(metadata.peer), _busy_as_status(group):
            messages = await self._pop(
                request, pop_queues, tags, batch, invisible_ms, polling_s, metadata.client_id
            )
        sent = 0
        try:
            if not messages:
                yield service.ReceiveMessageResponse(
                    status=new_status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
            else:
                yield service.ReceiveMessageResponse(status=ok_status())
                for _, message in messages:
                    yield service.ReceiveMessageResponse(message=message)
                    sent += 1
            yield service.ReceiveMessageResponse(delivery_timestamp=_now_timestamp())
        finally:
            for item, _ in messages[sent:]:  # never reached the client (cancelled): visible again at once
                item.queue.give_back(item)

    def _invisible_ms(self, request: Any) -> int:
        if request.auto_renew:
            return AUTO_RENEW_INVISIBLE_MS
        if not request.HasField("invisible_duration"):
            raise RocketMQError(
                Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew"
            )
        invisible = _ms(request.invisible_duration)
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise RocketMQError(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible time {invisible} ms is out of range [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms",
            )
        return invisible

    def _polling_s(self, request: Any, context: Any) -> float:
        settings = self.context.settings
        remaining = context.time_remaining()
        if request.HasField("long_polling_timeout"):
            polling = _ms(request.long_polling_timeout) / 1000
        elif remaining is not None:
            polling = remaining - settings.request_timeout_s / 2
        else:
            polling = float(settings.long_polling_timeout_s)
        polling = min(max(polling, MIN_POLLING_S), float(max(settings.long_polling_timeout_s, MIN_POLLING_S)))
        if remaining is not None:
            if remaining < MIN_POLLING_S:
                raise RocketMQError(
                    Code.ILLEGAL_POLLING_TIME,
                    f"the call's deadline leaves {remaining:.1f} s, less than the {MIN_POLLING_S:.0f} s "
                    "a receive needs",
                )
            polling = min(polling, remaining - DEADLINE_MARGIN_S)
        return polling

    @property
    def long_polls_waiting(self) -> int:
        """Receives waiting now, all peers."""
        return sum(self._polls_by_peer.values())

    @contextmanager
    def _long_poll(self, peer: str) -> Any:
        """Count one waiting receive; TOO_MANY_REQUESTS past the limits (module docstring)."""
        if self._polls >= MAX_LONG_POLLS:
            raise RocketMQError(Code.TOO_MANY_REQUESTS, f"too many receives waiting ({MAX_LONG_POLLS})")
        by_peer = self._polls_by_peer.get(peer, 0)
        if by_peer >= MAX_LONG_POLLS_PER_CONNECTION:
            raise RocketMQError(
                Code.TOO_MANY_REQUESTS,
                f"too many receives waiting on this connection ({MAX_LONG_POLLS_PER_CONNECTION})",
            )
        self._polls += 1
        self._polls_by_peer[peer] = by_peer + 1
        try:
            yield
        finally:
            self._polls -= 1
            left = self._polls_by_peer[peer] - 1
            if left:
                self._polls_by_peer[peer] = left
            else:
                del self._polls_by_peer[peer]

    async def _pop(
        self,
        request: Any,
        queues: list[PopQueue],
        tags: TagFilter,
        batch: int,
        invisible_ms: int,
        polling_s: float,
        client_id: str,
    ) -> list[tuple[PopItem, Any]]:
        """Wait up to ``polling_s`` for messages; returns (entry in flight, RocketMQ message) pairs."""
        loop_deadline = time.monotonic() + polling_s
        out: list[tuple[PopItem, Any]] = []
        while True:
            waiter = PopWaiter(batch, invisible_ms, owner=client_id, auto_renew=request.auto_renew)
            try:
                items = await waiter.wait(queues, max(loop_deadline - time.monotonic(), 0.0))
            except BaseException:  # cancelled (the client went away) or a queue refused: nothing was sent
                for item in waiter.items:
                    item.queue.give_back(item)
                raise
            for item in items:
                out.extend(self._messages(request, item, tags))
            if out or time.monotonic() >= loop_deadline:
                return out

    def _messages(self, request: Any, item: PopItem, tags: TagFilter) -> list[tuple[PopItem, Any]]:
        """The RocketMQ messages of one popped entry that the client gets (acked, filtered-out and unreadable
        ones are left out; an entry with nothing left is acked)."""
        queue = item.queue
        topic = queue.subscription.topic
        entry = topic.ledger.get_entry(item.position)
        if entry is None:  # trimmed meanwhile
            queue.ack(item)
            return []
        queue_id = max(topic.partition_index, 0)
        try:
            messages = messages_of_entry(
                entry,
                topic=request.message_queue.topic,
                queue_id=queue_id,
                store_host=self.context.store_host(),
            )
            is_batch = parse_headers_and_payload(entry.data).metadata.HasField("num_messages_in_batch")
        except ProtocolError as exc:  # as a Pulsar consumer discards it
            queue.ack(item)
            log.warning(
                "discarding unreadable entry %s of %s for group %s: %s",
                item.position,
                topic.name,
                queue.group,
                exc,
            )
            return []
        unacked = queue.acked_indexes(item) if is_batch else None
        size = len(messages)
        out = []
        for index, message in enumerate(messages):
            if unacked is not None and not unacked >> index & 1:
                continue  # acked earlier (batch-index ack)
            tag = message.system_properties.tag if message.system_properties.HasField("tag") else None
            if not tags.matches_tag(tag):
                if is_batch:
                    queue.ack_index(item, index, size)
                else:
                    queue.ack(item)
                continue
            handle = ReceiptHandle(
                retrieve_time_ms=item.retrieve_ms,
                invisible_time_ms=item.invisible_ms,
                broker_name=self.context.settings.broker_name,
                queue_id=queue_id,
                offset=item.queue_offset,
                batch_index=index if is_batch else None,
            )
            props = message.system_properties
            props.receipt_handle = handle.encode()
            props.delivery_attempt = item.attempt
            props.invisible_duration.FromMilliseconds(item.invisible_ms)
            out.append((item, message))
        return out

    # ------------------------------------------------------------------ receipts
    def _item(self, group: str, topic: TopicName, text: str) -> tuple[PopItem, ReceiptHandle]:
        """The in-flight entry a handle names. Raises RocketMQError INVALID_RECEIPT_HANDLE when it is
        malformed, for another broker or queue, expired, superseded or unknown."""
        try:
            handle = decode(text)
        except InvalidReceiptHandleError as exc:
            raise RocketMQError(Code.INVALID_RECEIPT_HANDLE, f"invalid receipt handle: {exc}") from None
        if handle.broker_name != self.context.settings.broker_name:
            raise RocketMQError(Code.INVALID_RECEIPT_HANDLE, "receipt handle names another broker")
        queues = self.context.queue_count(topic)
        if handle.queue_id >= queues:
            raise RocketMQError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle names queue {handle.queue_id}")
        queue = self.groups.find(group, self.context.queue_topic(topic, handle.queue_id, queues))
        item = (
            None
            if queue is None
            else queue.lookup(handle.offset, handle.retrieve_time_ms, handle.batch_index)
        )
        if item is None:
            raise RocketMQError(
                Code.INVALID_RECEIPT_HANDLE,
                "receipt handle is expired or stale (the message was acked, redelivered or its invisible time changed)",
            )
        if handle.batch_index is not None and handle.batch_index >= entry_dispatch_info(item.data)[0]:
            raise RocketMQError(Code.INVALID_RECEIPT_HANDLE, "receipt handle names no message of the entry")
        return item, handle

    def _target(self, request: Any, context: Any) -> tuple[str, TopicName]:
        metadata = call_metadata(context)
        group = request.group.name
        check_consumer_group(group)
        topic = self.context.topic_name(request.topic, metadata)
        self._check_consume(context, topic, group)
        return group, topic

    def _check_consume(self, context: Any, topic: TopicName, group: str) -> None:
        """FORBIDDEN unless the caller's role may consume ``topic`` with subscription ``group`` (as a Pulsar
        SUBSCRIBE is checked; nothing is checked with authentication off)."""
        try:
            self.context.service.security.check_consume(self.context.role(context), topic, group)
        except PermissionDeniedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None

    async def AckMessage(self, request: Any, context: Any) -> Any:
        group, topic = self._target(request, context)
        results = []
        for entry in request.entries:
            try:
                item, handle = self._item(group, topic, entry.receipt_handle)
                if handle.batch_index is None:
                    item.queue.ack(item)
                else:
                    item.queue.ack_index(item, handle.batch_index, entry_dispatch_info(item.data)[0])
                status = ok_status()
            except RocketMQError as exc:
                status = new_status(exc.code, exc.message)
            results.append(
                service.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
                )
            )
        codes = {r.status.code for r in results}
        if len(codes) == 1:
            top = results[0].status
        elif not codes:
            top = new_status(Code.BAD_REQUEST, "no entry to acknowledge")
        else:
            top = new_status(Code.MULTIPLE_RESULTS, "entries have different results")
        return service.AckMessageResponse(status=top, entries=results)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        try:
            group, topic = self._target(request, context)
            invisible = _ms(request.invisible_duration)
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise RocketMQError(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible time {invisible} ms is out of range [0, {MAX_INVISIBLE_MS}]",
                )
            item, handle = self._item(group, topic, request.receipt_handle)
        except RocketMQError as exc:
            return service.ChangeInvisibleDurationResponse(
                status=new_status(exc.code, exc.message), receipt_handle=request.receipt_handle
            )
        retrieve = item.queue.change_invisible(item, invisible, handle.batch_index)
        renewed = ReceiptHandle(
            retrieve_time_ms=retrieve,
            invisible_time_ms=invisible,
            broker_name=handle.broker_name,
            queue_id=handle.queue_id,
            offset=handle.offset,
            batch_index=handle.batch_index,
        )
        return service.ChangeInvisibleDurationResponse(status=ok_status(), receipt_handle=renewed.encode())

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        group, topic = self._target(request, context)
        item, _ = self._item(group, topic, request.receipt_handle)
        item.queue.dead_letter_now(item)
        return service.ForwardMessageToDeadLetterQueueResponse(status=ok_status())
