"""Broker-side consumer: one per (connection, consumer_id) on a subscription.

Holds the flow-control permits the client granted (CommandFlow.messagePermits, counted in messages, so a batch
entry costs ``num_messages_in_batch`` permits, reference/pulsar-protocol.md §6.9) and the entries delivered to
it that are not yet acknowledged, so they can be redelivered when it goes away (Pulsar's pendingAcks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from quasar.ledger.position import Position

if TYPE_CHECKING:
    from quasar.broker.subscription import Subscription


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
    ) -> None: ...

    def send_close_consumer(self, consumer_id: int) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    @property
    def remote_address(self) -> str: ...


@dataclass(eq=False, slots=True)
class Consumer:
    """A consumer attached to a subscription.

    ``permits``: messages the client may still receive (may go negative after a batch, as in Pulsar).
    ``pending_acks``: position -> number of messages in that entry, for entries delivered and not yet acked.
    """

    consumer_id: int
    consumer_name: str
    cnx: ConsumerConnection
    subscription: Subscription
    priority_level: int = 0
    permits: int = 0
    pending_acks: dict[Position, int] = field(default_factory=dict)
    connected_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msg_out_counter: int = 0
    bytes_out_counter: int = 0

    @property
    def unacked_messages(self) -> int:
        """Messages delivered to this consumer and not acknowledged yet."""
        return sum(self.pending_acks.values())

    def flow(self, permits: int) -> None:
        """Add ``permits`` (messages) granted by CommandFlow; they accumulate."""
        self.permits += permits
