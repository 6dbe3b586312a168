"""Non-persistent topics (``non-persistent://``): never stored, fanned out to consumers that have permits.

Follows Pulsar's ``NonPersistentTopic`` / ``NonPersistentSubscription`` and their dispatchers (semantics.md
B3 "Non-persistent topics" and gotcha 3):

- a publish is acknowledged at once with message id **(0, 0)** (``callback.completed(null, 0L, 0L)``), and
  every message is delivered with id (0, 0) too; the clients use a no-op ack tracker on such topics, so
  acks, redelivery requests and ack timeouts change nothing here;
- each subscription takes the message if a consumer can: Exclusive/Failover the active consumer with
  permits > 0 and a writable connection, Shared the next consumer in round robin with permits, Key_Shared
  the consumer the sticky key selects if it has permits; otherwise the message is **dropped** for that
  subscription (counted in ``msg_drop_counter``);
- a subscription exists only while it has consumers (nothing is kept for it);
- the per-connection in-flight limit (``maxConcurrentNonPersistentMessagePerConnection`` 1000) lives in
  ServerCnx: a publish beyond it is answered with id (-1, -1) and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from quasar.broker.access_modes import ProducerAccess
from quasar.broker.dedup import DisabledDeduplication
from quasar.broker.dispatchers import entry_num_messages, failover_active_consumer
from quasar.broker.errors import ConsumerAssignError, ConsumerBusyError, NotAllowedError
from quasar.broker.key_shared import KeySharedMeta, new_selector
from quasar.broker.key_shared_dispatcher import entry_key_info
from quasar.broker.subscription import SubscriptionOptions
from quasar.broker.topic_stats import RateMeter, TopicCounters
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import InitialPosition, SubType

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer
    from quasar.broker.key_shared import StickyKeySelector
    from quasar.broker.producer import Producer, PublishCallback

log = logging.getLogger(__name__)

NON_PERSISTENT_POSITION = Position(0, 0)
"""The id of every non-persistent message, in receipts and deliveries (gotcha 3)."""
DROPPED_POSITION = Position(-1, -1)
"""The receipt id of a publish dropped by the per-connection in-flight limit."""


class NonPersistentSubscription:
    """A subscription of a non-persistent topic: consumers and a dispatcher, no cursor."""

    persistent = False
    durable = False

    def __init__(self, topic: NonPersistentTopic, name: str, options: SubscriptionOptions) -> None:
        self.topic = topic
        self.name = name
        self.options = options
        self.sub_type: SubType | None = None
        self.consumers: list[Consumer] = []
        self._active: Consumer | None = None
        self._rr_index = 0
        self._selector: StickyKeySelector | None = None
        self._key_shared_mode = 0
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.rate_out = RateMeter()  # msgRateOut / msgThroughputOut over the stats period
        self.msg_drop_counter = 0
        self.unacked_messages = 0

    # ------------------------------------------------------------------ consumers
    def add_consumer(
        self, consumer: Consumer, sub_type: SubType, key_shared_meta: KeySharedMeta | None = None
    ) -> None:
        """Attach ``consumer`` (ConsumerBusyError / ConsumerAssignError as on persistent topics)."""
        if self.consumers:
            if sub_type != self.sub_type:
                raise ConsumerBusyError(f"Subscription {self.name} is of different type")
            if sub_type == SubType.Exclusive:
                raise ConsumerBusyError(
                    f"Exclusive consumer is already connected on subscription {self.name}"
                )
        if sub_type == SubType.Key_Shared:
            meta = key_shared_meta or KeySharedMeta()
            if self._selector is None or not self.consumers:
                self._key_shared_mode = meta.mode
                self._selector = new_selector(
                    meta.mode,
                    use_consistent_hashing=self.options.key_shared_use_consistent_hashing,
                    replica_points=self.options.key_shared_replica_points,
                )
            elif meta.mode != self._key_shared_mode:
                raise ConsumerAssignError("Key_Shared mode does not match the subscription's mode")
            self._selector.add_consumer(consumer, meta.hash_ranges)
        self.sub_type = sub_type
        self.consumers.append(consumer)
        self._update_active_consumer()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self._selector is not None:
            self._selector.remove_consumer(consumer)
        self._update_active_consumer()

    def _update_active_consumer(self) -> None:
        if self.sub_type != SubType.Failover or not self.consumers:
            self._active = self.consumers[0] if self.consumers else None
            return
        active = failover_active_consumer(
            self.consumers, self.topic.partition_index, self.topic.name.full_name
        )
        self._active = active
        for consumer in self.consumers:
            consumer.cnx.send_active_consumer_change(consumer.consumer_id, consumer is active)

    def drop_if_idle(self) -> None:
        """Ask the topic to drop this subscription now if no consumer is left (nothing is kept for it)."""
        self.topic.remove_non_durable_if_idle(self)

    def close_consumers(self) -> None:
        """Disconnect every consumer (broker-initiated CLOSE_CONSUMER); clients reconnect by themselves."""
        for consumer in list(self.consumers):
            consumer.cnx.send_close_consumer(consumer.consumer_id)
            self.remove_consumer(consumer)

    # ------------------------------------------------------------------ acks: no-ops (gotcha 3)
    def ack_individual(self, consumer: Consumer, positions: object) -> None:
        pass

    def ack_batch_index(self, consumer: Consumer, position: Position, ack_set: int) -> None:
        pass

    def ack_cumulative(self, consumer: Consumer, position: Position, ack_set: int | None = None) -> None:
        pass

    def redeliver_unacknowledged(self, consumer: Consumer, positions: object) -> None:
        pass  # nothing is kept to redeliver

    def schedule_dispatch(self) -> None:
        pass  # delivery happens at publish time only

    # ------------------------------------------------------------------ dispatch
    def _target(self, data: memoryview) -> tuple[Consumer | None, int]:
        consumers = self.consumers
        if self.sub_type == SubType.Key_Shared and self._selector is not None:
            count, key_hash = entry_key_info(data)
            consumer = self._selector.select(key_hash)
            return (consumer if consumer is not None and _can_take(consumer) else None), count
        count = entry_num_messages(data)
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            active = self._active
            return (active if active is not None and _can_take(active) else None), count
        n = len(consumers)
        for k in range(n):
            consumer = consumers[(self._rr_index + k) % n]
            if _can_take(consumer):
                self._rr_index = (self._rr_index + k + 1) % n
                return consumer, count
        return None, count

    def send(self, data: memoryview) -> None:
        """Deliver one published entry to a consumer that can take it, or drop it."""
        consumer, count = self._target(data)
        if consumer is None:
            self.msg_drop_counter += count
            return
        consumer.permits -= count
        consumer.msg_out_counter += count
        consumer.bytes_out_counter += len(data)
        self.msg_out_counter += count
        self.bytes_out_counter += len(data)
        consumer.cnx.send_message(
            consumer.consumer_id, NON_PERSISTENT_POSITION, self.topic.partition_index, data, 0
        )


def _can_take(consumer: Consumer) -> bool:
    return consumer.permits > 0 and consumer.cnx.writable


class NonPersistentTopic:
    """A non-persistent topic (or partition): producers and subscriptions, nothing stored."""

    is_persistent = False

    def __init__(
        self,
        name: TopicName,
        *,
        subscription_options: SubscriptionOptions | None = None,
        max_producers: int = 0,
    ) -> None:
        self.name = name
        self.partition_index = name.partition_index
        self.access: ProducerAccess[Producer] = ProducerAccess(name.full_name, max_producers=max_producers)
        self.producers: dict[str, Producer] = self.access.producers
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.dedup = DisabledDeduplication()
        self._options = subscription_options or SubscriptionOptions()
        self.msg_in_counter = 0
        self.counters = TopicCounters()  # stats and /metrics (topic_stats)
        self.last_active = time.monotonic()
        """When (``time.monotonic()`` s) it was created or last lost a producer or subscription: the
        inactive-topic check (``inactive_topics``) drops it once idle that long with neither."""

    def add_producer(self, producer: Producer) -> bool:
        """Register ``producer`` under its access mode; False when it waits for exclusive access."""
        return self.access.add(producer)

    def remove_producer(self, producer: Producer) -> None:
        self.access.remove(producer)
        self.last_active = time.monotonic()

    def publish(
        self,
        data: memoryview,
        callback: PublishCallback,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """Fan ``data`` out to every subscription now (or drop it there); ``callback`` gets (0, 0) on the next
        loop iteration. ``properties`` and ``tag_hash`` (store record fields) do not apply: nothing is stored."""
        for subscription in list(self.subscriptions.values()):
            subscription.send(data)
        asyncio.get_running_loop().call_soon(callback, NON_PERSISTENT_POSITION, None)

    async def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_position: InitialPosition | int,
        start_position: Position | None = None,
    ) -> NonPersistentSubscription:
        """Subscription ``name`` (positions do not apply: only messages published from now on arrive)."""
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = NonPersistentSubscription(self, name, self._options)
            self.subscriptions[name] = subscription
        return subscription

    async def delete_subscription(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            self._count_removed(subscription)
        self.last_active = time.monotonic()

    def remove_non_durable_if_idle(self, subscription: NonPersistentSubscription) -> None:
        if not subscription.consumers and self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            self._count_removed(subscription)
            self.last_active = time.monotonic()

    def _count_removed(self, subscription: NonPersistentSubscription) -> None:
        """Keep what a removed subscription dispatched in the topic's out counters."""
        self.counters.msg_out_removed += subscription.msg_out_counter
        self.counters.bytes_out_removed += subscription.bytes_out_counter

    @property
    def msg_out_counter(self) -> int:
        """Messages dispatched since the topic was loaded (removed subscriptions included)."""
        return self.counters.msg_out_removed + sum(s.msg_out_counter for s in self.subscriptions.values())

    @property
    def bytes_out_counter(self) -> int:
        """Bytes dispatched since the topic was loaded (removed subscriptions included)."""
        return self.counters.bytes_out_removed + sum(s.bytes_out_counter for s in self.subscriptions.values())

    def close(self) -> None:
        """Topic unload or broker shutdown: nothing to cancel (delivery happens at publish time, no timer is
        kept); present so every loaded topic closes the same way."""

    def last_message_id(self) -> tuple[int, int, int]:
        raise NotAllowedError(
            f"GetLastMessageId is not supported on non-persistent topic {self.name.full_name}"
        )

    def stats(self) -> dict[str, object]:
        """TopicStats JSON in Pulsar's admin v2 shape (subset), with ``msgDropCount`` per subscription."""
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
            "storageSize": 0,
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
                    "msgBacklog": 0,
                    "msgDropCount": sub.msg_drop_counter,
                    "msgRateOut": sub.rate_out.msg_rate,
                    "msgThroughputOut": sub.rate_out.throughput,
                    "msgOutCounter": sub.msg_out_counter,
                    "bytesOutCounter": sub.bytes_out_counter,
                    "type": sub.sub_type.name if sub.sub_type is not None else None,
                    "consumers": [
                        {"consumerName": c.consumer_name, "availablePermits": c.permits}
                        for c in sub.consumers
                    ],
                }
                for name, sub in self.subscriptions.items()
            },
            "deduplicationStatus": "Disabled",
        }
