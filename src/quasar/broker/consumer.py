"""Broker-side consumer: one per (connection, consumer_id) on a subscription.

Holds the flow-control permits the client granted (CommandFlow.messagePermits, counted in messages, so a batch
entry costs ``num_messages_in_batch`` permits, reference/pulsar-protocol.md §6.9) and the entries delivered to
it that are not yet acknowledged, so they can be redelivered when it goes away (Pulsar's pendingAcks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from quasar.ledger.position import Position
from quasar.protocol.enums import SubType

__all__ = ["Consumer", "ConsumerConnection", "ConsumerSubscription", "ConsumerTopic"]


class ConsumerConnection(Protocol):
    """What a consumer needs from its connection (ServerCnx implements it)."""

    @property
    def writable(self) -> bool: ...

    def send_message(
        self,
        consumer_id: int,
        position: Position,
        partition: int,
        headers_and_payload: memoryview,
        redelivery_count: int,
        ack_set: list[int] | None = None,
    ) -> None: ...

    def send_close_consumer(self, consumer_id: int) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def send_reached_end_of_topic(self, consumer_id: int) -> None: ...

    @property
    def remote_address(self) -> str: ...


class ConsumerTopic(Protocol):
    """What the consumer commands use of a subscription's topic (``PersistentTopic``, ``NonPersistentTopic``)."""

    @property
    def partition_index(self) -> int: ...

    def last_message_id(self) -> tuple[int, int, int]:
        """(ledger id, entry id, batch index) of the last entry; raises NotAllowedError where there is none
        to tell (non-persistent topics)."""
        ...

    async def delete_subscription(self, name: str) -> None: ...


class ConsumerSubscription(Protocol):
    """What the consumer commands use of any subscription a consumer is attached to (``Subscription``,
    ``NonPersistentSubscription``); persistent-only commands check for ``Subscription`` itself."""

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> ConsumerTopic: ...

    @property
    def consumers(self) -> list[Consumer]: ...

    @property
    def sub_type(self) -> SubType | None: ...

    def schedule_dispatch(self) -> None: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def drop_if_idle(self) -> None:
        """Let the topic drop this subscription now if it is a reader's and no consumer is left."""
        ...

    def close_consumers(self) -> None: ...

    def redeliver_unacknowledged(self, consumer: Consumer, positions: list[Position] | None) -> None: ...


@dataclass(eq=False, slots=True)
class Consumer:
    """A consumer attached to a subscription.

    ``permits``: messages the client may still receive (may go negative after a batch, as in Pulsar).
    ``pending_acks``: position -> messages of that entry still unacknowledged, for entries delivered and not
    yet fully acked; change it only through ``add_pending`` / ``remove_pending`` / ``set_pending`` /
    ``clear_pending`` so ``unacked_messages`` stays exact.
    ``blocked``: dispatch to this consumer is stopped because ``unacked_messages`` reached
    ``max_unacked_messages_per_consumer`` (Pulsar ``blockedConsumerOnUnackedMsgs``); it is lifted once the
    count falls to half the limit.
    """

    consumer_id: int
    consumer_name: str
    cnx: ConsumerConnection
    subscription: ConsumerSubscription
    priority_level: int = 0
    permits: int = 0
    pending_acks: dict[Position, int] = field(default_factory=dict)
    connected_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msg_out_counter: int = 0
    bytes_out_counter: int = 0
    unacked_messages: int = 0
    blocked: bool = False

    def add_pending(self, position: Position, count: int) -> None:
        """Record the delivery of ``count`` unacknowledged messages of the entry at ``position``."""
        previous = self.pending_acks.get(position)
        if previous is not None:
            self.unacked_messages -= previous
        self.pending_acks[position] = count
        self.unacked_messages += count

    def set_pending(self, position: Position, count: int) -> None:
        """Lower the unacknowledged count of a delivered entry (batch-index acks)."""
        previous = self.pending_acks.get(position)
        if previous is not None:
            self.pending_acks[position] = count
            self.unacked_messages += count - previous

    def remove_pending(self, position: Position) -> bool:
        """Forget a delivered entry; returns whether it was pending on this consumer."""
        count = self.pending_acks.pop(position, None)
        if count is None:
            return False
        self.unacked_messages -= count
        return True

    def clear_pending(self) -> None:
        self.pending_acks.clear()
        self.unacked_messages = 0

    def flow(self, permits: int) -> None:
        """Add ``permits`` (messages) granted by CommandFlow; they accumulate."""
        self.permits += permits
