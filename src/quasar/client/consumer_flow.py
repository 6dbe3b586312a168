"""Flow control of a single-topic consumer (reference/pulsar-protocol.md §6.9; C++ ``ConsumerImpl``
``increaseAvailablePermits``) and the bookkeeping of each message handed to the application.

* After SUBSCRIBE the consumer sends FLOW(``receiver_queue_size``) (:meth:`FlowControl.attach`). Every message
  handed to the application, and every message dropped before it got there, gives one permit back; once half
  the receiver queue is given back, one FLOW with all of them goes out. A receiver queue of 0 sends FLOW(1)
  whenever a receive finds nothing queued instead.
* A hand-out also starts the message's ack timeout (:class:`UnackedMessageTracker`) and, for a non-durable
  consumer (a reader), records the id handed out last, from which a re-subscribe restarts.
"""

from __future__ import annotations

from quasar.protocol import MessageId, commands

from .client_cnx import ClientCnx
from .message import Message
from .negative_acks import UnackedMessageTracker

__all__ = ["FlowControl"]


class FlowControl:
    """Flow permits of one consumer.

    Args:
        consumer_id: the consumer id of the FLOW commands.
        receiver_queue_size: ``ConsumerConfig.receiver_queue_size`` (0 = one FLOW(1) per empty receive).
        unacked: the ack-timeout tracker, or None when ``unacked_messages_timeout_ms`` is off.
        track_last_dequeued: remember the id of the message handed out last (non-durable consumers).

    Attributes:
        permits: permits given back and not yet sent in a FLOW.
        last_dequeued: id of the message handed out last (None before the first, or when not tracked).
    """

    __slots__ = ("_cnx", "_consumer_id", "_plain", "_queue_size", "_refill", "_track_last", "_unacked",
                 "last_dequeued", "permits")  # fmt: skip

    def __init__(
        self,
        consumer_id: int,
        receiver_queue_size: int,
        *,
        unacked: UnackedMessageTracker | None,
        track_last_dequeued: bool,
    ) -> None:
        self._consumer_id = consumer_id
        self._queue_size = receiver_queue_size
        self._refill = max(1, receiver_queue_size // 2)
        self._unacked = unacked
        self._track_last = track_last_dequeued
        #: a hand-out only counts a permit: no ack timeout, nothing to remember, a receiver queue
        self._plain = not track_last_dequeued and unacked is None and receiver_queue_size > 0
        self._cnx: ClientCnx | None = None
        self.permits = 0
        self.last_dequeued: MessageId | None = None

    def attach(self, cnx: ClientCnx) -> None:
        """Subscribed on ``cnx``: permits start from zero and FLOW(``receiver_queue_size``) goes out."""
        self._cnx = cnx
        self.permits = 0
        if self._queue_size > 0:
            cnx.write_now(commands.new_flow(self._consumer_id, self._queue_size))

    def detach(self) -> None:
        """The connection is gone: permits keep counting and go out after the next :meth:`attach`."""
        self._cnx = None

    def forget_last_dequeued(self) -> None:
        """After a seek: the next re-subscribe starts at the sought position, not after the last hand-out."""
        self.last_dequeued = None

    def handed_out(self, message: Message) -> None:
        """The application has ``message``: a permit back, its ack timeout starts, its id is remembered."""
        if self._plain:
            permits = self.permits + 1
            if permits >= self._refill:
                self.give_back(1)
            else:
                self.permits = permits
            return
        if self._track_last:
            self.last_dequeued = message.message_id()
        if self._unacked is not None:
            self._unacked.add(message.entry.key)
        self.give_back(1)

    def give_back(self, count: int) -> None:
        """``count`` messages left the receiver queue (handed out or dropped): FLOW once half of it is free."""
        if self._queue_size == 0:
            return
        self.permits += count
        if self.permits >= self._refill:
            cnx = self._cnx
            if cnx is not None:
                cnx.write_now(commands.new_flow(self._consumer_id, self.permits))
                self.permits = 0

    def on_empty_receive(self) -> None:
        """A receive found nothing queued: a zero-queue consumer asks for one message (FLOW(1))."""
        if self._queue_size == 0 and self._cnx is not None:
            self._cnx.write_now(commands.new_flow(self._consumer_id, 1))
