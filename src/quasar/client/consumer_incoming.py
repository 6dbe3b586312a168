"""Which received messages a consumer drops before delivery (seed 001 ``isDuplicate``; C++ ``ConsumerImpl``
start-message-id filter): :class:`DeliveryFilter`, owned by the consumer.

* Before the start id (readers, and after ``seek``): a message whose ``(ledger, entry, batch index)`` is below
  the start id is dropped, and so is the start id itself unless ``start_message_id_inclusive`` (a start id
  without batch index stands for its whole entry). After a re-subscribe the start is the id handed out last.
* Already acknowledged: covered by the last cumulative ack, or by a pending individual ack of the whole entry.
* A batch item whose bit is clear in the MESSAGE's ``ack_set`` was acked before (batch-index acks).

For a batch the decision is made once per entry when it can be (no start id, and the entry lies beyond the
last cumulative ack); :meth:`DeliveryFilter.batch_filter` then returns None (keep all) or a filter that drops
all items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from quasar.protocol import EARLIEST, MessageId

from .ack_grouping import AckGroupingTracker

__all__ = ["DeliveryFilter"]


class _Acks(Protocol):
    grouping: AckGroupingTracker


class _Dequeued(Protocol):
    last_dequeued: MessageId | None


def _skip_all(index: int) -> bool:
    return False


class DeliveryFilter:
    """Drops messages before the start id and messages already acknowledged.

    Args:
        acks: the consumer's acknowledger (its ``grouping`` tracker says what is acked; a seek replaces it).
        flow: the consumer's flow control (its ``last_dequeued`` is the restart point of a reader).
        start_message_id: the start id (readers), or None.
        start_inclusive: deliver the start id itself.

    Attributes:
        start_message_id: the start id, replaced by a seek (None after a seek by publish time).
    """

    __slots__ = ("_acks", "_flow", "_inclusive", "start_message_id")

    def __init__(
        self, acks: _Acks, flow: _Dequeued, start_message_id: MessageId | None, start_inclusive: bool
    ) -> None:
        self._acks = acks
        self._flow = flow
        self._inclusive = start_inclusive
        self.start_message_id = start_message_id

    def batch_filter(
        self, ledger_id: int, entry_id: int, unacked: int | None
    ) -> Callable[[int], bool] | None:
        """``keep(index)`` for the items of a batch, or None when all are kept; ``unacked`` is the bitmap of the
        MESSAGE's ``ack_set`` (None: every item unacked)."""
        per_item = (self._flow.last_dequeued or self.start_message_id) is not None
        acks = self._acks.grouping
        if not per_item and acks.active:
            cumulative = acks.last_cumulative
            if cumulative is None or (ledger_id, entry_id) > cumulative[:2]:
                if acks.is_duplicate(ledger_id, entry_id):
                    return _skip_all
            else:
                per_item = True
        if not per_item and unacked is None:
            return None
        filtered = self.filtered

        def keep(index: int) -> bool:
            if unacked is not None and not (unacked >> index) & 1:
                return False
            return not per_item or not filtered(ledger_id, entry_id, index)

        return keep

    def filtered(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """True when the message is dropped (batch index -1: not a batch item)."""
        last_dequeued = self._flow.last_dequeued
        start = last_dequeued or self.start_message_id
        if start is not None and start != EARLIEST and start.ledger_id >= 0:
            key = (ledger_id, entry_id, batch_index)
            start_key = (start.ledger_id, start.entry_id, start.batch_index)
            inclusive = self._inclusive and last_dequeued is None
            if key < start_key or (key == start_key and not inclusive):
                return True
            if start.batch_index < 0 and key[:2] == start_key[:2] and not inclusive:
                return True
        return self._acks.grouping.is_duplicate(ledger_id, entry_id, batch_index)
