"""Acknowledgement side of a single-topic consumer (mixed into :class:`~quasar.client.consumer.Consumer`).

Individual and cumulative acks through :class:`AckGroupingTracker` and :class:`BatchAcker` (seed 001: a batch
entry is acked once all its items are, unless ``batch_index_ack_enabled`` sends an ``ack_set``; a cumulative
ack in the middle of a batch acks the previous entry), ACK frames flushed every
``acknowledgements_group_time_ms``; negative acks and ack timeouts through :class:`NegativeAcksTracker` and
:class:`UnackedMessageTracker`, redelivered with REDELIVER_UNACKNOWLEDGED_MESSAGES (entry ids on
Shared/KeyShared, everything otherwise) after the dead-letter policy took its share.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from quasar.protocol import MessageId, commands

from .ack_grouping import ack_set_words
from .message import Message

__all__ = ["ConsumerAcks"]


class ConsumerAcks:
    """Ack, negative-ack and ack-timeout methods of a single-topic consumer."""

    if TYPE_CHECKING:
        _acks: Any
        _batch_acker: Any
        _nacks: Any
        _unacked: Any
        _chunks: Any
        _chunk_ids: dict[MessageId, list[MessageId]]
        _ack_timer: asyncio.TimerHandle | None
        _dead_letter: Any
        _shared: bool
        _state: str
        _cnx: Any
        _ready: asyncio.Event
        _loop: asyncio.AbstractEventLoop
        config: Any
        consumer_id: int

        def _check_open(self) -> None: ...
        def _drop_chunks(self, ids: list[MessageId]) -> None: ...

    @staticmethod
    def _message_id(message: Any) -> MessageId:
        if isinstance(message, Message):
            return message._message_id
        if isinstance(message, MessageId):
            return message
        raise TypeError(f"expected a Message or MessageId, got {type(message).__name__}")

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped; a batch entry is acked once all its items are). With
        ``ack_receipt_enabled`` it waits for the broker's ACK_RESPONSE.

        Raises:
            TypeError: not a Message / MessageId. AlreadyClosedError. BrokerResponseError (receipts only).
        """
        self.acknowledge_nowait(message)
        if self.config.ack_receipt_enabled:
            await self._flush_acks_with_receipt()

    def acknowledge_nowait(self, message: Message | MessageId) -> None:
        """:meth:`acknowledge` without waiting for a receipt (callable from the event loop thread only)."""
        if message.__class__ is Message:
            entry = message._entry.key  # type: ignore[union-attr]
            index = message._index  # type: ignore[union-attr]
        else:
            message_id = self._message_id(message)
            entry = (message_id.ledger_id, message_id.entry_id)
            index = message_id.batch_index
        if self._state in ("closing", "closed"):
            self._check_open()
        acks = self._acks
        flush = False
        if self._chunk_ids:
            for chunk in self._chunk_ids.pop(self._message_id(message), ()):
                flush |= acks.add_individual((chunk.ledger_id, chunk.entry_id))
        bitmap = self._batch_acker.ack_index(entry, index) if index >= 0 else 0
        if bitmap:  # items of the batch are still unacked
            if self.config.batch_index_ack_enabled:
                size = self._batch_acker.size(entry)
                flush |= acks.add_individual(entry, ack_set_words(bitmap, size))
        else:
            flush |= acks.add_individual(entry)
            if self._unacked is not None:
                self._unacked.remove(entry)
            self._nacks.remove(entry)
        if self.config.ack_receipt_enabled:
            return
        if flush:
            self._flush_acks()
        elif self._ack_timer is None:
            self._schedule_ack_flush()

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to and including this one.

        Raises:
            ValueError: on a Shared / KeyShared subscription (Pulsar forbids cumulative acks there).
        """
        self.acknowledge_cumulative_nowait(message)
        if self.config.ack_receipt_enabled:
            await self._flush_acks_with_receipt()

    def acknowledge_cumulative_nowait(self, message: Message | MessageId) -> None:
        """:meth:`acknowledge_cumulative` without waiting for a receipt (event loop thread only)."""
        message_id = self._message_id(message)
        self._check_open()
        if self._shared:
            raise ValueError("acknowledge_cumulative is not allowed on a Shared or KeyShared subscription")
        ledger_id, entry_id, index = message_id.ledger_id, message_id.entry_id, message_id.batch_index
        entry = (ledger_id, entry_id)
        covered: tuple[int, int] | None = entry
        flush = False
        if index >= 0:
            complete, bitmap, size = self._batch_acker.ack_up_to(entry, index)
            if complete:
                flush = self._acks.add_cumulative(ledger_id, entry_id)
            elif self.config.batch_index_ack_enabled:
                flush = self._acks.add_cumulative(ledger_id, entry_id, index, ack_set_words(bitmap, size))
                covered = (ledger_id, entry_id - 1)
            else:  # C++ prepareCumulativeAck: ack the previous entry
                covered = (ledger_id, entry_id - 1) if entry_id > 0 else None
                if covered is not None:
                    flush = self._acks.add_cumulative(ledger_id, entry_id - 1)
        else:
            flush = self._acks.add_cumulative(ledger_id, entry_id)
        if covered is not None:
            self._batch_acker.forget_up_to(covered)
            if self._unacked is not None:
                self._unacked.remove_up_to(covered)
        if self.config.ack_receipt_enabled:
            return
        if flush:
            self._flush_acks()
        else:
            self._schedule_ack_flush()

    def _schedule_ack_flush(self) -> None:
        if self._ack_timer is None:
            delay = self.config.acknowledgements_group_time_ms / 1000
            self._ack_timer = self._loop.call_later(delay, self._flush_acks)

    def _flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        cnx = self._cnx
        if cnx is None:
            return  # kept; flushed after the reconnect
        for ack in self._acks.flush():
            sets = ack.ack_sets if any(s is not None for s in ack.ack_sets) else None
            cnx.write(commands.new_ack(self.consumer_id, ack.entries, ack.ack_type, ack_sets=sets))

    async def _flush_acks_with_receipt(self) -> None:
        await self._ready.wait()
        cnx = self._cnx
        assert cnx is not None
        for ack in self._acks.flush():
            sets = ack.ack_sets if any(s is not None for s in ack.ack_sets) else None
            request_id = cnx.next_request_id()
            frame = commands.new_ack(self.consumer_id, ack.entries, ack.ack_type, request_id, ack_sets=sets)
            await cnx.request(frame, request_id)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery of the message's entry after ``negative_ack_redelivery_delay_ms``."""
        self.negative_acknowledge_nowait(message)

    def negative_acknowledge_nowait(self, message: Message | MessageId) -> None:
        """:meth:`negative_acknowledge` (event loop thread only)."""
        message_id = self._message_id(message)
        self._check_open()
        redelivery_count = message.redelivery_count() if isinstance(message, Message) else 0
        entries = self._chunk_ids.get(message_id) or [message_id]
        for item in entries:
            entry = (item.ledger_id, item.entry_id)
            self._nacks.add(entry, redelivery_count)
            if self._unacked is not None:
                self._unacked.remove(entry)

    async def _timer_loop(self) -> None:
        tick = min(1.0, max(0.01, self.config.negative_ack_redelivery_delay_ms / 3000))
        if self._unacked is not None:
            tick = min(tick, self.config.tick_duration_ms / 1000)
        while True:
            await asyncio.sleep(tick)
            due = self._nacks.pop_expired()
            if self._unacked is not None:
                due.extend(self._unacked.pop_expired())
            if due:
                await self._redeliver(sorted(set(due)))
            expired = self._chunks.expire()
            if expired:
                self._drop_chunks(expired)

    async def _redeliver(self, entries: list[tuple[int, int]]) -> None:
        if self._dead_letter is not None:
            entries = await self._dead_letter.divert(entries)
        for entry in entries:
            self._batch_acker.forget(entry)
        if not entries:
            return
        self.redeliver_unacknowledged_messages(entries)

    def redeliver_unacknowledged_messages(self, entries: list[tuple[int, int]] | None = None) -> None:
        """Send REDELIVER_UNACKNOWLEDGED_MESSAGES: the given entries on Shared/KeyShared, else all unacked."""
        cnx = self._cnx
        if cnx is None:
            return
        if self._shared and entries:
            cnx.write(commands.new_redeliver_unacknowledged_messages(self.consumer_id, entries))
        else:
            cnx.write(commands.new_redeliver_unacknowledged_messages(self.consumer_id))
