"""Acknowledgements of a single-topic consumer: the :class:`Acknowledger` the consumer owns.

Individual and cumulative acks go through :class:`AckGroupingTracker` and :class:`BatchAcker` (seed 001: a
batch entry is acked once all its items are, unless ``batch_index_ack_enabled`` sends an ``ack_set``; a
cumulative ack in the middle of a batch acks the previous entry); ACK frames are flushed every
``acknowledgements_group_time_ms`` by a timer the acknowledger owns, or at once when the group is full.
Negative acks and ack timeouts go through :class:`NegativeAcksTracker` and :class:`UnackedMessageTracker`;
the consumer collects what is due (:meth:`Acknowledger.pop_due`) and asks for redelivery with
REDELIVER_UNACKNOWLEDGED_MESSAGES (:meth:`Acknowledger.redeliver`: entry ids on Shared/KeyShared, everything
otherwise) after the dead-letter policy took its share.
"""

from __future__ import annotations

import asyncio

from quasar.protocol import MessageId, commands
from quasar.protocol.ack_set import ack_set_words

from .ack_grouping import AckGroupingTracker, BatchAcker
from .client_cnx import ClientCnx
from .codec import encode_ack as _encode_ack
from .config import ConsumerConfig
from .errors import AlreadyClosedError
from .message import Message
from .negative_acks import NegativeAcksTracker, UnackedMessageTracker

__all__ = ["Acknowledger", "message_id_of"]

EntryKey = tuple[int, int]


def message_id_of(message: Message | MessageId) -> MessageId:
    """The id of a Message, or the MessageId itself.

    Raises:
        TypeError: neither a Message nor a MessageId.
    """
    if isinstance(message, Message):
        return message.message_id()
    if isinstance(message, MessageId):
        return message
    raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")


class Acknowledger:
    """Acks, negative acks and ack timeouts of one consumer.

    Args:
        consumer_id: the consumer id of the ACK / REDELIVER commands.
        topic: the consumer's topic (error messages).
        config: ack grouping, batch-index ack, ack receipts, negative-ack delay and backoff.
        shared: Shared / KeyShared subscription (no cumulative acks; redelivery by entry id).
        unacked: the ack-timeout tracker, or None when ``unacked_messages_timeout_ms`` is off.
        ready: set while the consumer is subscribed (acks with receipts wait for it).

    Attributes:
        grouping: the :class:`AckGroupingTracker` (what is acked: duplicate filtering reads it).
        chunk_ids: ids of every chunk of each reassembled chunked message, by the message's id.
    """

    def __init__(
        self,
        consumer_id: int,
        topic: str,
        config: ConsumerConfig,
        *,
        shared: bool,
        unacked: UnackedMessageTracker | None,
        ready: asyncio.Event,
    ) -> None:
        self._consumer_id = consumer_id
        self._topic = topic
        self._config = config
        self._shared = shared
        self._unacked = unacked
        self._ready = ready
        self._loop = asyncio.get_running_loop()
        self._batches = BatchAcker()
        self._nacks = NegativeAcksTracker(
            config.negative_ack_redelivery_delay_ms, config.negative_ack_backoff
        )
        self._batch_index_ack = config.batch_index_ack_enabled
        self._receipts = config.ack_receipt_enabled
        self._timer: asyncio.TimerHandle | None = None
        self._cnx: ClientCnx | None = None
        self._closed = False
        self.grouping = AckGroupingTracker(config.acknowledgements_group_time_ms, config.ack_group_max_size)
        self.chunk_ids: dict[MessageId, list[MessageId]] = {}

    # ------------------------------------------------------------------------------ connection --

    def attach(self, cnx: ClientCnx) -> None:
        """Subscribed on ``cnx``: batch trackers restart (the broker redelivers whole batches) and the acks
        kept while disconnected go out."""
        self._batches.clear()
        self._cnx = cnx
        self.flush()

    def detach(self) -> None:
        """The connection is gone: acks are kept until the next :meth:`attach`."""
        self._cnx = None

    def reset_grouping(self) -> None:
        """After a seek: forget what was acked (messages before the new position come again)."""
        self.grouping = AckGroupingTracker(
            self._config.acknowledgements_group_time_ms, self._config.ack_group_max_size
        )

    def track_batch(self, entry: EntryKey, size: int, unacked: int | None) -> None:
        """A batch of ``size`` items was delivered (``unacked``: bitmap of items still to ack, None = all)."""
        self._batches.track(entry, size, unacked)

    def close(self) -> None:
        """Flush what is pending, cancel the flush timer; later acks raise AlreadyClosedError."""
        self.flush()
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError(f"consumer on {self._topic} is closed")

    # ------------------------------------------------------------------------------------ acks --

    def acknowledge(self, message: Message | MessageId) -> None:
        """Record an individual ack (flushed with the group unless ``ack_receipt_enabled``, see
        :meth:`flush_with_receipt`); a batch entry is acked once all its items are.

        Raises:
            TypeError: not a Message / MessageId. AlreadyClosedError.
        """
        if message.__class__ is Message:
            entry = message.entry.key
            index = message.batch_index
        else:
            message_id = message_id_of(message)
            entry = (message_id.ledger_id, message_id.entry_id)
            index = message_id.batch_index
        if self._closed:
            self._check_open()
        acks = self.grouping
        flush = False
        if self.chunk_ids:
            for chunk in self.chunk_ids.pop(message_id_of(message), ()):
                flush |= acks.add_individual((chunk.ledger_id, chunk.entry_id))
        bitmap = self._batches.ack_index(entry, index) if index >= 0 else 0
        if bitmap:  # items of the batch are still unacked
            if self._batch_index_ack:
                size = self._batches.size(entry)
                flush |= acks.add_individual(entry, ack_set_words(bitmap, size))
        else:
            flush |= acks.add_individual(entry)
            if self._unacked is not None:
                self._unacked.remove(entry)
            self._nacks.remove(entry)
        if self._receipts:
            return
        if flush:
            self.flush()
        elif self._timer is None:
            self.schedule_flush()

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Record a cumulative ack of everything up to and including ``message``.

        Raises:
            TypeError: not a Message / MessageId. AlreadyClosedError.
            ValueError: on a Shared / KeyShared subscription (Pulsar forbids cumulative acks there).
        """
        message_id = message_id_of(message)
        self._check_open()
        if self._shared:
            raise ValueError("acknowledge_cumulative is not allowed on a Shared or KeyShared subscription")
        ledger_id, entry_id, index = message_id.ledger_id, message_id.entry_id, message_id.batch_index
        entry = (ledger_id, entry_id)
        covered: EntryKey | None = entry
        if index >= 0:
            complete, bitmap, size = self._batches.ack_up_to(entry, index)
            if complete:
                flush = self.grouping.add_cumulative(ledger_id, entry_id)
            elif self._batch_index_ack:
                flush = self.grouping.add_cumulative(ledger_id, entry_id, index, ack_set_words(bitmap, size))
                covered = (ledger_id, entry_id - 1)
            else:  # C++ prepareCumulativeAck: ack the previous entry
                covered = (ledger_id, entry_id - 1) if entry_id > 0 else None
                flush = covered is not None and self.grouping.add_cumulative(ledger_id, entry_id - 1)
        else:
            flush = self.grouping.add_cumulative(ledger_id, entry_id)
        if covered is not None:
            self._batches.forget_up_to(covered)
            if self._unacked is not None:
                self._unacked.remove_up_to(covered)
        if self._receipts:
            return
        if flush:
            self.flush()
        else:
            self.schedule_flush()

    def acknowledge_chunks(self, ids: list[MessageId]) -> None:
        """Ack the chunks of a chunked message given up (``auto_ack_oldest_chunked_message_on_queue_full``)."""
        for message_id in ids:
            self.grouping.add_individual((message_id.ledger_id, message_id.entry_id))
        self.schedule_flush()

    def schedule_flush(self) -> None:
        """Flush in ``acknowledgements_group_time_ms`` unless a flush is already scheduled."""
        if self._timer is None:
            delay = self._config.acknowledgements_group_time_ms / 1000
            self._timer = self._loop.call_later(delay, self.flush)

    def flush(self) -> None:
        """Write the pending acks as ACK frames (kept while disconnected: flushed after the reconnect)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cnx = self._cnx
        if cnx is None:
            return
        for ack in self.grouping.flush():
            if any(s is not None for s in ack.ack_sets):
                frame = commands.new_ack(self._consumer_id, ack.entries, ack.ack_type, ack_sets=ack.ack_sets)
            else:  # whole entries only: the compiled encoder (one call for the group)
                frame = _encode_ack(self._consumer_id, int(ack.ack_type), ack.entries)
            cnx.write(frame)

    async def flush_with_receipt(self) -> None:
        """Send the pending acks with request ids and wait for each ACK_RESPONSE (``ack_receipt_enabled``).

        Raises:
            BrokerResponseError: the broker refused an ack. ConnectionClosedError, OperationTimeoutError.
        """
        await self._ready.wait()
        cnx = self._cnx
        assert cnx is not None
        for ack in self.grouping.flush():
            sets = ack.ack_sets if any(s is not None for s in ack.ack_sets) else None
            request_id = cnx.next_request_id()
            frame = commands.new_ack(self._consumer_id, ack.entries, ack.ack_type, request_id, ack_sets=sets)
            await cnx.request(frame, request_id)

    # ------------------------------------------------------------------------ redelivery --

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Schedule the message's entry (every chunk of a chunked message) for redelivery after
        ``negative_ack_redelivery_delay_ms`` (or the backoff of its redelivery count).

        Raises:
            TypeError: not a Message / MessageId. AlreadyClosedError.
        """
        message_id = message_id_of(message)
        self._check_open()
        redelivery_count = message.redelivery_count() if isinstance(message, Message) else 0
        entries = self.chunk_ids.get(message_id) or [message_id]
        for item in entries:
            entry = (item.ledger_id, item.entry_id)
            self._nacks.add(entry, redelivery_count)
            if self._unacked is not None:
                self._unacked.remove(entry)

    def pop_due(self) -> list[EntryKey]:
        """Entries whose negative-ack delay or ack timeout has passed, sorted, each once (they are removed)."""
        due = self._nacks.pop_expired()
        if self._unacked is not None:
            due.extend(self._unacked.pop_expired())
        return sorted(set(due))

    def redeliver(self, entries: list[EntryKey] | None = None) -> None:
        """Send REDELIVER_UNACKNOWLEDGED_MESSAGES: ``entries`` on Shared/KeyShared, else every unacked message.
        The entries' batch state and ack timeouts are forgotten (they come back whole)."""
        for entry in entries or ():
            self._batches.forget(entry)
            if self._unacked is not None:
                self._unacked.remove(entry)
        cnx = self._cnx
        if cnx is None:
            return
        if self._shared and entries:
            cnx.write(commands.new_redeliver_unacknowledged_messages(self._consumer_id, entries))
        else:
            cnx.write(commands.new_redeliver_unacknowledged_messages(self._consumer_id))
