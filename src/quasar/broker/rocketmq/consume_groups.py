"""RocketMQ consumer groups on Pulsar subscriptions: the group policy, the pop queues, dead letters.

**Group = subscription.** Consumer group ``G`` on topic ``T`` is the durable subscription ``G`` on every
partition of ``T`` (issue 18 item 2). A group that already exists as a Pulsar subscription keeps its
position; a new one starts at the end of each queue (Pulsar ``Latest``), as RocketMQ's new groups do. Pulsar
consumers may share the subscription (Shared): what a RocketMQ client holds invisible is pending on the pop
engine's virtual consumer and is not given to them.

**Group policy**: FIFO and the maximum delivery attempts come from ``group_policy`` (set over admin REST).

**Dead letters.** A message past its group's attempts, or forwarded by ForwardMessageToDeadLetterQueue, is
copied to ``%DLQ%<group>`` in the source topic's namespace (a non-partitioned topic, created on first use, as
RocketMQ's one-queue DLQ topic) with the properties ``REAL_TOPIC`` (the source topic, full Pulsar name) and
``ORIGIN_MESSAGE_ID`` (``ledger:entry:partition``), as Pulsar's dead-letter producer writes them; its other
fields (``UNIQ_KEY`` = the RocketMQ message id, tag, keys, body) are kept. A partly acknowledged batch loses
the acknowledged messages on the way. Then the source entry is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quasar.broker.compaction.messages import read_entry
from quasar.broker.pop_consumer import PopItem, PopQueue
from quasar.broker.rocketmq.group_policy import GroupPolicy
from quasar.broker.topic import PersistentTopic
from quasar.ledger.position import Position
from quasar.protocol import TopicName, parse_headers_and_payload
from quasar.protocol.compression import compress
from quasar.protocol.enums import InitialPosition
from quasar.protocol.errors import ProtocolError
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.metadata import encode_batch
from quasar.protocol.proto.PulsarApi_pb2 import KeyValue, MessageMetadata

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = ["DLQ_PREFIX", "ConsumeGroups", "dead_letter_copy", "dead_letter_topic", "ordering_key"]

log = logging.getLogger(__name__)

DLQ_PREFIX = "%DLQ%"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
MAX_QUEUES = 100_000
"""Pop queues kept at most; past it, idle ones (no receive waiting, nothing in flight) are dropped."""


def dead_letter_topic(topic: TopicName, group: str) -> TopicName:
    """``%DLQ%<group>`` in ``topic``'s namespace."""
    return TopicName.parse(f"persistent://{topic.namespace_name}/{DLQ_PREFIX}{group}")


def ordering_key(data: memoryview) -> str | None:
    """The FIFO message group of a stored entry: its ``ordering_key`` (a batch's, else its first message's
    when the batch was built per key), None without one."""
    metadata = parse_headers_and_payload(data).metadata
    if metadata.HasField("ordering_key"):
        return bytes(metadata.ordering_key).decode("utf-8", "replace")
    if metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys:
        parsed = read_entry(data)
        if parsed.items and parsed.items[0][0].HasField("ordering_key"):
            return bytes(parsed.items[0][0].ordering_key).decode("utf-8", "replace")
    return None


def dead_letter_copy(data: memoryview, unacked: int | None, real_topic: str, origin_id: str) -> bytes | None:
    """The entry as it goes to the dead-letter topic: only the messages still unacknowledged (``unacked``:
    the cursor's batch bit set, None = all) with ``REAL_TOPIC`` / ``ORIGIN_MESSAGE_ID`` added to each
    message's properties; None when nothing is left."""
    parsed = read_entry(data)
    extra = [KeyValue(key=REAL_TOPIC, value=real_topic), KeyValue(key=ORIGIN_MESSAGE_ID, value=origin_id)]
    if not parsed.batch:
        whole = parse_headers_and_payload(data)
        metadata = MessageMetadata()
        metadata.CopyFrom(whole.metadata)
        _set_properties(metadata.properties, extra)
        return encode_headers_and_payload(metadata, whole.payload)
    keep = [unacked is None or bool(unacked >> i & 1) for i in range(len(parsed.items))]
    items = []
    for (single, body), kept in zip(parsed.items, keep, strict=True):
        if kept:
            _set_properties(single.properties, extra)
            items.append((single, body))
    if not items:
        return None
    batch = encode_batch(items)
    metadata = MessageMetadata()
    metadata.CopyFrom(parsed.metadata)
    metadata.num_messages_in_batch = len(items)
    metadata.uncompressed_size = len(batch)
    payload = compress(metadata.compression, batch) if metadata.compression else batch
    return encode_headers_and_payload(metadata, payload)


def _set_properties(properties: Any, extra: list[KeyValue]) -> None:
    names = {kv.key for kv in extra}
    kept = [kv for kv in properties if kv.key not in names]
    del properties[:]
    properties.extend(kept)
    properties.extend(extra)


class ConsumeGroups:
    """The pop queues of every (group, partition) this listener served, and the dead-letter writer.

    ``is_alive(client_id)``: whether a client is still connected (auto-renewed messages are renewed only
    for live clients). :meth:`close` cancels every queue's timer and tasks (the listener calls it on stop).
    """

    def __init__(self, service: BrokerService, *, is_alive: Any = None) -> None:
        self.service = service
        self.is_alive = is_alive
        self._queues: dict[tuple[str, str], PopQueue] = {}

    async def queue(self, group: str, topic: TopicName, policy: GroupPolicy) -> PopQueue:
        """The pop queue of ``group`` on partition topic ``topic`` (loading the topic and creating the
        subscription at the end of the queue when new), with ``policy`` applied. Raises broker errors
        (TopicNotFoundError, NotAllowedError, ...) from loading."""
        loaded = await self.service.get_or_create_topic(topic)
        if not isinstance(loaded, PersistentTopic):
            raise TypeError(f"{topic.full_name} is not a persistent topic")
        subscription = loaded.subscriptions.get(group)
        if subscription is None:
            subscription = await loaded.get_or_create_subscription(
                group, durable=True, initial_position=InitialPosition.Latest
            )
        key = (group, topic.full_name)
        queue = self._queues.get(key)
        if queue is None or queue.subscription is not subscription or queue.closed:
            if queue is not None:
                queue.close()
            if len(self._queues) >= MAX_QUEUES:
                self._prune()
            queue = PopQueue(
                subscription,
                group=group,
                dead_letter=self._dead_letter_writer(group, topic),
                key_of=ordering_key,
                is_alive=self.is_alive,
                is_current=self._current_check(group, topic, loaded, subscription),
            )
            self._queues[key] = queue
        queue.fifo = policy.fifo
        queue.max_delivery_attempts = policy.max_delivery_attempts
        return queue

    def find(self, group: str, topic: TopicName) -> PopQueue | None:
        """The live pop queue of ``group`` on ``topic``, without loading anything (acks of handles)."""
        queue = self._queues.get((group, topic.full_name))
        if queue is None or queue.closed:
            return None
        loaded = self.service.topics.get(topic.full_name)
        if (
            not isinstance(loaded, PersistentTopic)
            or loaded.subscriptions.get(group) is not queue.subscription
        ):
            queue.close()  # the topic was unloaded or the subscription deleted: its receipts are gone
            del self._queues[(group, topic.full_name)]
            return None
        return queue

    def _current_check(
        self, group: str, topic: TopicName, loaded: PersistentTopic, subscription: Any
    ) -> Callable[[], bool]:
        def current() -> bool:
            return (
                self.service.topics.get(topic.full_name) is loaded
                and loaded.subscriptions.get(group) is subscription
            )

        return current

    def _prune(self) -> None:
        for key, queue in list(self._queues.items()):
            if queue.idle or queue.closed:
                queue.close()
                del self._queues[key]

    def close(self) -> None:
        """Close every pop queue (idempotent)."""
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            queue.close()

    def _dead_letter_writer(self, group: str, topic: TopicName) -> Any:
        async def write(item: PopItem) -> None:
            await self.dead_letter(group, topic, item)

        return write

    async def dead_letter(self, group: str, topic: TopicName, item: PopItem) -> Position | None:
        """Copy ``item`` (an entry of ``topic``) to ``%DLQ%<group>``; returns its position there (None when
        every message of the batch was acknowledged already). Raises broker/ledger errors on failure."""
        unacked = item.queue.acked_indexes(item)
        ledger_id, entry_id = item.position
        origin = f"{ledger_id}:{entry_id}:{max(topic.partition_index, -1)}"
        real_topic = topic.partitioned_topic_name if topic.partition_index >= 0 else topic.full_name
        try:
            data = dead_letter_copy(item.data, unacked, real_topic, origin)
        except ProtocolError as exc:  # unreadable: moved as stored, nothing can read it anyway
            log.warning("dead-lettering an unreadable entry %s of %s: %s", item.position, topic, exc)
            data = bytes(item.data)
        if data is None:
            return None
        target = await self.service.get_or_create_topic(dead_letter_topic(topic, group))
        if not isinstance(target, PersistentTopic):
            raise TypeError("the dead-letter topic is not persistent")
        done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

        def published(position: Position | None, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None or position is None:
                done.set_exception(error or RuntimeError("dead-letter publish failed"))
            else:
                done.set_result(position)

        target.publish(memoryview(data), published)
        position = await done
        log.info("moved %s of %s to %s (group %s)", item.position, topic, target.name, group)
        return position
