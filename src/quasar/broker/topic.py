"""PersistentTopic: producers, subscriptions and the managed ledger of one topic (or one partition).

Follows Pulsar's ``PersistentTopic``: a topic owns one managed ledger; every durable cursor of that ledger is
a subscription, restored when the topic loads; publishing appends one entry per SEND.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from quasar.broker.access_modes import ProducerAccess
from quasar.broker.compaction.view import COMPACTION_SUBSCRIPTION, CompactedView
from quasar.broker.dedup import DEDUP_CURSOR_NAME, MessageDeduplication
from quasar.broker.dispatchers import entry_num_messages
from quasar.broker.errors import BacklogQuotaExceededError, NotAllowedError, TopicTerminatedError
from quasar.broker.policies import BacklogQuota, check_backlog_quota
from quasar.broker.producer import Producer, PublishCallback
from quasar.broker.subscription import Subscription, SubscriptionOptions
from quasar.broker.topic_stats import TopicCounters
from quasar.ledger.entry import Entry
from quasar.ledger.managed_ledger import InitialPosition as LedgerInitialPosition
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.position import Position
from quasar.protocol import TopicName, parse_headers_and_payload
from quasar.protocol.enums import InitialPosition, ServerError

log = logging.getLogger(__name__)

_CURSOR_START: dict[int, LedgerInitialPosition] = {
    InitialPosition.Latest: LedgerInitialPosition.LATEST,
    InitialPosition.Earliest: LedgerInitialPosition.EARLIEST,
}
"""Wire ``CommandSubscribe.InitialPosition`` -> where the ledger starts a new durable cursor (the ledger keeps
its own enum: it may not import ``quasar.protocol``)."""


class PersistentTopic:
    """One persistent topic partition (or non-partitioned topic)."""

    is_persistent = True

    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        *,
        subscription_options: SubscriptionOptions | None = None,
        max_producers: int = 0,
        dedup_entries_interval: int = 1000,
        dedup_max_producers: int = 10_000,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.partition_index = name.partition_index
        self.access: ProducerAccess[Producer] = ProducerAccess(name.full_name, max_producers=max_producers)
        self.producers: dict[str, Producer] = self.access.producers
        self.subscriptions: dict[str, Subscription] = {}
        self._subscription_options = subscription_options or SubscriptionOptions()
        self.message_ttl_s = 0  # effective message TTL policy (0 = off)
        self.backlog_quota = BacklogQuota()  # effective backlog quota
        self.backlog_blocked: str | None = None  # the producer policy in force while the quota is exceeded
        self.compacted_view: CompactedView | None = None  # set by the compactor / at load (compaction.view)
        self.counters = TopicCounters()  # stats and /metrics (topic_stats)
        self.last_active = time.monotonic()
        """When (``time.monotonic()`` s) the topic was loaded or last lost a producer or consumer (Pulsar's
        ``lastActive``): the inactive-topic unloader (``inactive_topics``) measures idleness from it."""
        self.dedup = MessageDeduplication(
            ledger, entries_interval=dedup_entries_interval, max_producers=dedup_max_producers
        )
        for cursor_name, cursor in ledger.cursors.items():
            if cursor_name in (DEDUP_CURSOR_NAME, COMPACTION_SUBSCRIPTION):
                continue
            self.subscriptions[cursor_name] = Subscription(
                self, cursor_name, cursor, durable=True, options=self._subscription_options
            )
        ledger.add_entries_listener(self._on_new_entries)

    # ------------------------------------------------------------------ publish
    def add_producer(self, producer: Producer) -> bool:
        """Register ``producer`` under its access mode (``access_modes``); returns False when it waits for
        exclusive access. Raises ProducerBusyError (name taken, limit, access conflict); while the backlog
        quota is exceeded new producers are refused (ProducerBlockedQuotaExceededError / ...Exception, by the
        quota's policy); a terminated topic refuses every producer (TopicTerminatedError)."""
        if self.ledger.is_terminated:
            raise TopicTerminatedError(f"Topic {self.name.full_name} was already terminated")
        quota = self.backlog_quota
        if (
            not quota.unlimited
            and quota.policy != "consumer_backlog_eviction"
            and check_backlog_quota(self, int(time.time() * 1000))
        ):
            code = (
                ServerError.ProducerBlockedQuotaExceededException
                if self.backlog_blocked == "producer_exception"
                else ServerError.ProducerBlockedQuotaExceededError
            )
            raise BacklogQuotaExceededError(
                f"Cannot create producer on topic with backlog quota exceeded: {self.name.full_name}",
                server_error=code,
            )
        return self.access.add(producer)

    def remove_producer(self, producer: Producer) -> None:
        self.access.remove(producer)
        self.last_active = time.monotonic()

    async def terminate(self) -> Position:
        """Terminate the topic (Pulsar ``PersistentTopic.terminate``): the managed ledger takes no more entries,
        for good; every producer is disconnected (its reconnect is refused with TopicTerminatedError, final for
        the client) and consumers that have acknowledged everything are told REACHED_END_OF_TOPIC. Returns the
        last message's position. Raises the ledger's errors (``ManagedLedgerError``)."""
        last = await self.ledger.terminate()
        self.disconnect_producers()
        for subscription in list(self.subscriptions.values()):
            subscription.notify_end_of_topic()
        return last

    def disconnect_producers(self) -> None:
        """Broker-initiated CLOSE_PRODUCER to every producer (backlog quota exceeded); clients reconnect."""
        for producer in list(self.producers.values()):
            producer.fence()

    def disconnect_clients(self) -> None:
        """Topic unload (Pulsar ``PersistentTopic.close``): CLOSE_PRODUCER to every producer and CLOSE_CONSUMER
        to every consumer (their clients reconnect), then cancel the subscriptions' timers."""
        self.disconnect_producers()
        for subscription in list(self.subscriptions.values()):
            subscription.close_consumers()
        self.close()

    async def set_deduplication(self, enabled: bool) -> None:
        """Apply the effective deduplication policy (Pulsar ``checkDeduplicationStatus``). Raises
        ``ManagedLedgerError`` when the dedup cursor cannot be opened, read or removed."""
        if enabled:
            await self.dedup.enable()
        else:
            await self.dedup.disable()

    def publish(
        self,
        data: memoryview,
        callback: PublishCallback,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """Append one entry (SEND bytes after the command, verbatim); ``callback(position, None)`` once it is
        durable, ``callback(None, error)`` if not (``ManagedLedger.add_entry_callback``: no future or task per
        entry on the publish path). ``properties`` / ``tag_hash`` go on the store record (the RocketMQ
        endpoint's ``KEYS``/``UNIQ_KEY`` for the key index, and the tag's hash for the consume queue unit)."""
        if properties is None and not tag_hash:
            self.ledger.add_entry_callback(data, callback)
        else:
            self.ledger.add_entry_callback(data, callback, properties=properties, tag_hash=tag_hash)

    def _on_new_entries(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.schedule_dispatch()

    # ------------------------------------------------------------------ subscriptions
    async def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_position: InitialPosition | int,
        start_position: Position | None = None,
    ) -> Subscription:
        """Return subscription ``name``, creating it (and its cursor) if needed.

        Durable: a new cursor starts at the end (Latest) or the first entry (Earliest); an existing one resumes
        after its mark-delete position. Non-durable (readers): a fresh cursor whose next read is
        ``start_position`` (Pulsar's NonDurableCursorImpl), or per ``initial_position`` when it is None.
        """
        subscription = self.subscriptions.get(name)
        if subscription is not None:
            return subscription
        if name in (DEDUP_CURSOR_NAME, COMPACTION_SUBSCRIPTION):
            raise NotAllowedError(f"subscription name {name} is reserved by the broker")
        if durable:
            cursor = await self.ledger.open_cursor(
                name, _CURSOR_START.get(initial_position, LedgerInitialPosition.LATEST)
            )
            loaded = self.subscriptions.get(name)
            if loaded is not None:  # a concurrent SUBSCRIBE created it while the cursor was opening
                return loaded
        else:
            if start_position is None:
                start_position = (
                    self.ledger.first_position
                    if initial_position == InitialPosition.Earliest
                    else self.ledger.next_valid_position(self.ledger.last_confirmed_entry)
                )
            cursor = self.ledger.new_non_durable_cursor(start_position)
        subscription = Subscription(self, name, cursor, durable=durable, options=self._subscription_options)
        self.subscriptions[name] = subscription
        return subscription

    async def delete_subscription(self, name: str) -> None:
        """Drop subscription ``name`` and its cursor (UNSUBSCRIBE)."""
        subscription = self.subscriptions.pop(name, None)
        if subscription is None:
            return
        self._count_removed(subscription)
        subscription.close()
        if subscription.durable:
            await self.ledger.delete_cursor(name)

    def remove_non_durable_if_idle(self, subscription: Subscription) -> None:
        """Drop a reader's (non-durable) subscription once it has no consumer; a newer subscription of the same
        name is left alone."""
        if (
            not subscription.durable
            and not subscription.consumers
            and self.subscriptions.get(subscription.name) is subscription
        ):
            del self.subscriptions[subscription.name]
            self._count_removed(subscription)
            subscription.close()

    def _count_removed(self, subscription: Subscription) -> None:
        """Keep what a removed subscription dispatched in the topic's out counters (Pulsar's
        ``msgOutFromRemovedSubscriptions``)."""
        self.counters.msg_out_removed += subscription.msg_out_counter
        self.counters.bytes_out_removed += subscription.bytes_out_counter

    def close(self) -> None:
        """Cancel the timers of every subscription (topic unload, broker shutdown). The managed ledger is closed
        by its factory."""
        for subscription in self.subscriptions.values():
            subscription.close()

    # ------------------------------------------------------------------ queries
    def find_position_by_publish_time(self, publish_time_ms: int) -> Position:
        """First entry whose MessageMetadata.publish_time (ms) is >= ``publish_time_ms``, or the position after
        the last entry when there is none (Pulsar resetCursor by timestamp: a binary search for the newest
        entry published before the time, parsing only metadata)."""
        ledger = self.ledger

        def published_before(entry: Entry) -> bool:
            return parse_headers_and_payload(entry.data).metadata.publish_time < publish_time_ms

        newest_before = ledger.find_newest_matching(published_before)
        if newest_before is None:
            return ledger.first_position
        return ledger.next_valid_position(newest_before)

    def last_message_id(self) -> tuple[int, int, int]:
        """(ledger_id, entry_id, batch_index) of the last durable entry; (-1, -1, -1) when the topic is empty.

        batch_index is num_messages_in_batch - 1 for a batch entry, else -1 (Pulsar ServerCnx
        getLargestBatchIndexWhenPossible).
        """
        last = self.ledger.last_confirmed_entry
        if last.entry_id < 0:
            return -1, -1, -1
        entry = self.ledger.get_entry(last)
        batch_index = -1
        if entry is not None:
            count = entry_num_messages(entry.data)
            if count > 1:
                batch_index = count - 1
        return last.ledger_id, last.entry_id, batch_index

    @property
    def msg_out_counter(self) -> int:
        """Messages dispatched from this topic since it was loaded (deleted subscriptions included)."""
        return self.counters.msg_out_removed + sum(s.msg_out_counter for s in self.subscriptions.values())

    @property
    def bytes_out_counter(self) -> int:
        """Entry bytes dispatched from this topic since it was loaded (deleted subscriptions included)."""
        return self.counters.bytes_out_removed + sum(s.bytes_out_counter for s in self.subscriptions.values())

    def stats(self) -> dict[str, object]:
        """TopicStats JSON in Pulsar's admin v2 shape (subset). Counters (messages, bytes) count from the
        topic's load; rates (msg/s, bytes/s) are over the last ``stats_update_frequency_in_secs`` period, as
        ``GET /metrics`` reports them (``topic_stats``)."""
        counters = self.counters
        return {
            "msgRateIn": counters.rate_in.msg_rate,
            "msgThroughputIn": counters.rate_in.throughput,
            "msgRateOut": counters.rate_out.msg_rate,
            "msgThroughputOut": counters.rate_out.throughput,
            "msgInCounter": counters.msg_in,
            "bytesInCounter": counters.bytes_in,
            "msgOutCounter": self.msg_out_counter,
            "bytesOutCounter": self.bytes_out_counter,
            "storageSize": self.ledger.total_size,
            "publishers": [
                {
                    "producerId": p.producer_id,
                    "producerName": p.producer_name,
                    "msgInCounter": p.msg_in_counter,
                }
                for p in self.producers.values()
            ],
            "subscriptions": {
                name: {
                    "msgBacklog": sub.cursor.number_of_entries_in_backlog,
                    "msgRateOut": sub.rate_out.msg_rate,
                    "msgThroughputOut": sub.rate_out.throughput,
                    "msgOutCounter": sub.msg_out_counter,
                    "bytesOutCounter": sub.bytes_out_counter,
                    "type": sub.sub_type.name if sub.sub_type is not None else None,
                    "unackedMessages": sub.unacked_messages,
                    "isDurable": sub.durable,
                    "consumers": [
                        {
                            "consumerName": c.consumer_name,
                            "availablePermits": c.permits,
                            "unackedMessages": c.unacked_messages,
                            "msgOutCounter": c.msg_out_counter,
                            "address": c.cnx.remote_address,
                        }
                        for c in sub.consumers
                    ],
                }
                for name, sub in self.subscriptions.items()
            },
            "deduplicationStatus": self.dedup.status,
        }
