"""PullEngine: the broker side of RocketMQ's pull by offset (``PullMessageProcessor`` ->
``DefaultMessageStore.getMessage``, seed 002), on the managed ledger of one topic partition.

A RocketMQ message queue is a partition (queue id = partition index; a non-partitioned topic is queue 0) and
its queue offsets are the managed ledger's queue offsets (the consume queue's). A consumer group's committed
offset is the mark-delete position of the durable subscription of the same name on that partition: the
offset is the *next* entry to consume, ``offset_after(mark_delete_position)``, so it survives restarts as
Pulsar cursors do, and Pulsar consumers of that subscription see the same progress.

No gRPC here: the handlers (``pull.py``) validate requests, call this and map its errors onto status codes
(:class:`IllegalOffsetError` -> ILLEGAL_OFFSET, :class:`OffsetNotFoundError` -> OFFSET_NOT_FOUND,
:class:`~.pull_hold.TooManyHoldsError` -> TOO_MANY_REQUESTS, the broker's own errors by ``status.code_of``).
Reads are the store's mapped-memory reads, on the loop thread like every ledger read; a long filtered scan
yields to the loop between store calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quasar.broker.errors import NotAllowedError, TopicNotFoundError
from quasar.broker.rocketmq.filter_expression import PROPERTY_TAGS, TagFilter
from quasar.broker.rocketmq.pull_hold import PullHoldService
from quasar.broker.topic import PersistentTopic
from quasar.ledger.entry import Entry
from quasar.protocol import TopicName, parse_headers_and_payload
from quasar.protocol.enums import InitialPosition
from quasar.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = [
    "IllegalOffsetError",
    "OffsetNotFoundError",
    "PullEngine",
    "PullResult",
]

MAX_PULL_BATCH = 32
"""Messages one pull returns at most (RocketMQ ``maxTransferCountOnMessageInMemory``)."""
MAX_PULL_BYTES = 4 * 1024 * 1024
"""Bytes of records one pull reads at most (about; at least one message), as the store's ``get``."""
MAX_FILTER_SCAN = 16_000
"""Consume queue units one store read examines at most (RocketMQ ``maxFilterMessageCount``)."""
MAX_SCANS_PER_PULL = 16
"""Store reads of one pull through a tag filter before it answers with what it has (nothing, and the
offset to continue from): a long stretch of other tags costs bounded work per request."""


class IllegalOffsetError(ValueError):
    """A queue offset outside the queue's range ``[min_offset, max_offset]``."""

    def __init__(self, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the queue's range [{min_offset}, {max_offset}]")
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset


class OffsetNotFoundError(LookupError):
    """The consumer group has no committed offset on the queue (no subscription of that name)."""


@dataclass(frozen=True, slots=True)
class PullResult:
    """What a pull found: ``entries`` in queue order and ``next_offset``, where the next pull starts (after
    the last unit examined, so units of other tags are not scanned again)."""

    entries: Sequence[Entry]
    next_offset: int


class PullEngine:
    """Pull by offset on the topics of ``service``; long polls wait in ``holds``."""

    def __init__(self, service: BrokerService, holds: PullHoldService | None = None) -> None:
        self._service = service
        self.holds = holds if holds is not None else PullHoldService()

    # ------------------------------------------------------------------ queues
    async def partition(self, topic: TopicName, queue_id: int) -> PersistentTopic:
        """The loaded partition ``queue_id`` of ``topic`` (the topic itself, queue 0, when not partitioned).
        Raises TopicNotFoundError for an unknown topic or a queue id it does not have, NamespaceNotFoundError,
        NotAllowedError for a non-persistent topic, and what loading a topic raises."""
        count = self._service.partitions(topic)
        if count > 0:
            if not 0 <= queue_id < count:
                raise TopicNotFoundError(f"{topic.full_name} has no queue {queue_id} (it has {count})")
            loaded = await self._service.get_or_create_topic(topic.partition(queue_id))
        else:
            if queue_id != 0:
                raise TopicNotFoundError(f"{topic.full_name} is not partitioned: its only queue is 0")
            loaded = await self._service.get_or_create_topic(topic, create=False)
        if not isinstance(loaded, PersistentTopic):
            raise NotAllowedError(f"{topic.full_name} is not persistent: it has no queue offsets")
        return loaded

    @staticmethod
    def offset_range(topic: PersistentTopic) -> tuple[int, int]:
        """``(min, max)`` queue offsets: the first entry still held and one past the last confirmed one
        (RocketMQ ``getMinOffsetInQueue`` / ``getMaxOffsetInQueue``)."""
        ledger = topic.ledger
        end = ledger.confirmed_end_offset
        return min(ledger.first_available_offset, end), end

    def offset_at_time(self, topic: PersistentTopic, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (ms since the epoch); the max offset when
        every entry is older, the min offset when none is (a binary search over store times, RocketMQ
        ``getOffsetInQueueByTime``)."""
        ledger = topic.ledger
        low, high = self.offset_range(topic)
        older = ledger.find_newest_matching(lambda entry: entry.store_timestamp < timestamp_ms)
        if older is None:
            return low
        offset = ledger.table.offset_of(older)
        return high if offset is None else min(max(offset + 1, low), high)

    # ------------------------------------------------------------------ pull
    async def pull(
        self,
        topic: PersistentTopic,
        offset: int,
        batch_size: int,
        tag_filter: TagFilter,
        long_polling_s: float,
        client_id: str,
    ) -> PullResult:
        """Up to ``batch_size`` (at most :data:`MAX_PULL_BATCH`) entries from queue ``offset`` matching
        ``tag_filter`` (tag hash on the consume queue first, then the entry's own ``TAGS``), in order.

        At the end of the queue (or after a filtered stretch ending there) the pull waits up to
        ``long_polling_s`` seconds for new entries (:class:`PullHoldService`) and answers as soon as matching
        ones arrive; it answers with no entries when the time is up. Raises :class:`IllegalOffsetError` for an
        offset outside ``[min, max]``, ``TooManyHoldsError`` when it may not wait, ValueError for
        ``batch_size < 1``.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        low, high = self.offset_range(topic)
        if not low <= offset <= high:
            raise IllegalOffsetError(offset, low, high)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(long_polling_s, 0.0)
        batch = min(batch_size, MAX_PULL_BATCH)
        hashes = tag_filter.tag_hashes
        scans = 0
        while True:
            ledger = topic.ledger
            entries, offset = ledger.read_matching(offset, batch, hashes, MAX_FILTER_SCAN, MAX_PULL_BYTES)
            scans += 1
            if hashes is not None:
                entries = [entry for entry in entries if tag_filter.matches_tag(entry_tag(entry))]
            if entries:
                return PullResult(entries, offset)
            if offset < ledger.confirmed_end_offset:  # a stretch of other tags: go on, bounded
                if scans >= MAX_SCANS_PER_PULL:
                    return PullResult((), offset)
                await asyncio.sleep(0)
                continue
            remaining = deadline - loop.time()
            if remaining <= 0 or not await self.holds.wait(ledger, client_id, remaining):
                return PullResult((), offset)

    # ------------------------------------------------------------------ committed offsets
    def committed_offset(self, topic: PersistentTopic, group: str) -> int:
        """The group's committed offset on this queue: the entry after the subscription's mark-delete position.
        Raises :class:`OffsetNotFoundError` when the group has no subscription here."""
        subscription = topic.subscriptions.get(group)
        if subscription is None or not subscription.durable:
            raise OffsetNotFoundError(f"consumer group {group} has no offset on {topic.name.full_name}")
        return topic.ledger.table.offset_after(subscription.cursor.mark_delete_position)

    async def commit_offset(self, topic: PersistentTopic, group: str, offset: int) -> None:
        """Make ``offset`` the group's committed offset (RocketMQ ``updateConsumeOffset``): the subscription
        ``group`` (created at the end of the queue when new) gets its mark-delete position just before
        ``offset``. Forward, the entries before it count as acknowledged (as a cumulative ack); backward, the
        cursor is reset there and the subscription's Pulsar consumers are disconnected to re-read from it (as
        Pulsar's reset-cursor). The cursor is persisted before this returns. Raises
        :class:`IllegalOffsetError` outside ``[min, max]``, the broker's errors (e.g. NotAllowedError for a
        reserved name, the subscription limits)."""
        low, high = self.offset_range(topic)
        if not low <= offset <= high:
            raise IllegalOffsetError(offset, low, high)
        subscription = topic.subscriptions.get(group)
        if subscription is None:
            self._service.check_subscription_limit(topic, group)
            subscription = await topic.get_or_create_subscription(
                group, durable=True, initial_position=InitialPosition.Latest
            )
        if not subscription.durable:
            raise NotAllowedError(f"{group} is a reader's subscription on {topic.name.full_name}")
        table = topic.ledger.table
        current = table.offset_after(subscription.cursor.mark_delete_position)
        if offset > current:
            subscription.expire_until(table.position_of(offset - 1))
        elif offset < current:
            subscription.close_consumers()  # they re-subscribe and read from the new position
            subscription.cursor.reset_cursor(table.position_of(offset))
        await subscription.cursor.flush()


def entry_tag(entry: Entry) -> str | None:
    """The tag of a stored entry: its Pulsar ``TAGS`` property (or the store property ``TAGS``), None when it
    has none or its metadata does not parse."""
    tag = entry.properties.get(PROPERTY_TAGS)
    if tag is not None:
        return tag
    try:
        metadata = parse_headers_and_payload(entry.data).metadata
    except ProtocolError:
        return None
    for item in metadata.properties:
        if item.key == PROPERTY_TAGS:
            return str(item.value)
    return None
