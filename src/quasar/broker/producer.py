"""Broker-side producer: receives CommandSend entries and answers with receipts in send order.

Pulsar's ``Producer.publishMessage``: each SEND is one entry (a whole client batch, never unpacked here), which
is appended to the topic's managed ledger; the SEND_RECEIPT carries the (ledgerId, entryId) of that entry.
Receipts go out strictly in the order the SENDs arrived (the C++ client closes the connection on a receipt
for a later sequence id, reference/pulsar-protocol.md §6.7), so completions are queued per producer and
released from the head.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from quasar.broker.errors import BrokerError, PersistenceError
from quasar.errors import QuasarError
from quasar.ledger.position import Position

if TYPE_CHECKING:
    from quasar.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


class ProducerConnection(Protocol):
    """What a producer needs from its connection (ServerCnx implements it)."""

    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None: ...

    def send_send_error(self, producer_id: int, sequence_id: int, error: int, message: str) -> None: ...


@dataclass(slots=True)
class _PendingSend:
    sequence_id: int
    highest_sequence_id: int
    future: asyncio.Future[Position]


@dataclass(eq=False, slots=True)
class Producer:
    """A producer attached to a topic. ``producer_name`` is unique per topic."""

    producer_id: int
    producer_name: str
    topic: PersistentTopic
    cnx: ProducerConnection
    user_provided_name: bool
    _pending: deque[_PendingSend] = field(default_factory=deque)
    msg_in_counter: int = 0
    bytes_in_counter: int = 0
    closed: bool = False

    def publish(
        self, sequence_id: int, highest_sequence_id: int, num_messages: int, data: memoryview
    ) -> None:
        """Append one entry (``data`` = the SEND's bytes after the command, stored verbatim) and schedule its
        receipt. ``num_messages`` counts the messages in the entry (for stats)."""
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(data)
        future = asyncio.ensure_future(self.topic.publish(data))
        self._pending.append(_PendingSend(sequence_id, highest_sequence_id, future))
        future.add_done_callback(self._on_persisted)

    def _on_persisted(self, _future: asyncio.Future[Position]) -> None:
        while self._pending and self._pending[0].future.done():
            op = self._pending.popleft()
            if self.closed:
                continue
            exc = op.future.exception()
            if exc is None:
                self.cnx.send_receipt(
                    self.producer_id, op.sequence_id, op.highest_sequence_id, op.future.result()
                )
                continue
            if isinstance(exc, BrokerError):
                code, text = exc.server_error, str(exc)
            elif isinstance(exc, QuasarError):
                code, text = PersistenceError.server_error, f"failed to persist entry: {exc}"
            else:
                log.error("unexpected error persisting entry of %s", self.producer_name, exc_info=exc)
                code, text = PersistenceError.server_error, "internal error while persisting entry"
            self.cnx.send_send_error(self.producer_id, op.sequence_id, code, text)

    @property
    def pending_count(self) -> int:
        return len(self._pending)
