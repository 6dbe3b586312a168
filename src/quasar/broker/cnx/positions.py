"""Consumer-side rules that turn wire message ids into cursor moves: reader start positions, SEEK targets and
acknowledgements (CommandAck with batch-index ack sets, PIP-54).

Pure functions over a topic's managed ledger and a subscription; the consumer command family calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from quasar.broker.dispatchers import entry_num_messages
from quasar.broker.errors import BrokerError, NotAllowedError
from quasar.broker.key_shared import KeySharedMeta
from quasar.ledger.position import Position
from quasar.protocol.ack_set import INT64_MAX, ack_set_bits, to_int64
from quasar.protocol.enums import AckType, InitialPosition, ServerError

if TYPE_CHECKING:
    from quasar.broker.consumer import Consumer
    from quasar.broker.subscription import Subscription, SubscriptionTopic
    from quasar.ledger.managed_ledger import ManagedLedger
    from quasar.protocol.pb import CommandAck, CommandSeek, MessageIdData
    from quasar.protocol.pb import KeySharedMeta as KeySharedMetaData

__all__ = ["apply_ack", "key_shared_meta_of", "position_of", "reader_start", "seek_target"]


def position_of(message_id: MessageIdData) -> Position:
    """Position of a MessageIdData (uint64 on the wire read as signed int64: earliest arrives as -1, -1)."""
    return Position(to_int64(message_id.ledgerId), to_int64(message_id.entryId))


def key_shared_meta_of(meta: KeySharedMetaData) -> KeySharedMeta:
    """The broker's view of CommandSubscribe.keySharedMeta."""
    return KeySharedMeta(
        meta.keySharedMode, tuple((r.start, r.end) for r in meta.hashRanges), meta.allowOutOfOrderDelivery
    )


def reader_start(ledger: ManagedLedger, start: Position, initial_position: int) -> Position:
    """Where a reader's non-durable cursor starts (Pulsar NonDurableCursorImpl): (-1,-1) = first entry; an id
    past the last entry = after the last (or the first entry when ``initial_position`` is Earliest); an id
    before the first entry = the first entry."""
    if start.ledger_id < 0 or start.entry_id < 0:
        return ledger.first_position
    last = ledger.last_confirmed_entry
    if start > last or start.ledger_id >= INT64_MAX:
        if initial_position == InitialPosition.Earliest:
            return ledger.first_position
        return ledger.next_valid_position(last)
    if start < ledger.first_position:
        return ledger.first_position
    return start


def seek_target(topic: SubscriptionTopic, cmd: CommandSeek) -> Position:
    """The position a SEEK moves the cursor to: the message id (clamped to the first entry / the position
    after the last), or the first entry published at or after ``message_publish_time`` (ms). Raises
    BrokerError (MetadataError, as Pulsar) when the SEEK carries neither."""
    ledger = topic.ledger
    if cmd.HasField("message_id"):
        target = position_of(cmd.message_id)
        if target.ledger_id < 0 or target.entry_id < 0:
            return ledger.first_position
        if target > ledger.last_confirmed_entry:
            return ledger.next_valid_position(ledger.last_confirmed_entry)
        return target
    if cmd.HasField("message_publish_time"):
        return topic.find_position_by_publish_time(cmd.message_publish_time)
    raise BrokerError(
        "Message id and message publish time were not present", server_error=ServerError.MetadataError
    )


def apply_ack(subscription: Subscription, consumer: Consumer, cmd: CommandAck) -> None:
    """Apply one CommandAck of ``consumer``. A message id whose ack_set still has bits set is a batch-index
    ack (PIP-54): bit i set = index i not yet acknowledged.

    The work is linear in the ack set's length and bounded by the entry's batch size before anything is
    converted: the first batch-index ack of an entry may carry at most ``ceil(batch_size / 64)`` words (the
    Java client's ``BitSet.toLongArray`` of the batch), a longer one raises ``NotAllowedError``; a later one
    is cut to the words of the set the cursor still holds (the bits past it are acknowledged already).
    Raises the cursor's errors for positions that name no entry."""
    whole: list[Position] = []
    partial: list[tuple[Position, int]] = []
    cursor = subscription.cursor
    for message_id in cmd.message_id:
        position = position_of(message_id)
        words: Sequence[int] = message_id.ack_set
        if words and any(words):
            stored = cursor.batch_ack_set(position)
            if stored is not None:
                words = words[: (stored.bit_length() + 63) // 64]
            else:
                count = _batch_size(subscription, consumer, position)
                allowed = (count + 63) // 64 if count is not None else 1  # no entry: the cursor refuses it
                if len(words) > allowed and count is not None:
                    raise NotAllowedError(
                        f"ack_set of {len(words)} words for a batch of {count} messages at {position}"
                    )
                words = words[:allowed]
            partial.append((position, ack_set_bits(words)))
        else:
            whole.append(position)
    if int(cmd.ack_type) == AckType.Cumulative:
        if partial and (not whole or partial[-1][0] > max(whole)):
            subscription.ack_cumulative(consumer, partial[-1][0], partial[-1][1])
        elif whole:
            subscription.ack_cumulative(consumer, max(whole))
        return
    if whole:
        subscription.ack_individual(consumer, whole)
    for position, bits in partial:
        subscription.ack_batch_index(consumer, position, bits)


def _batch_size(subscription: Subscription, consumer: Consumer, position: Position) -> int | None:
    """Messages in the entry at ``position`` before any of them was acknowledged: the count delivered to
    ``consumer``, else ``num_messages_in_batch`` of the stored entry; None when there is no such entry.
    Raises MalformedFrameError for a damaged entry."""
    count = consumer.pending_acks.get(position)
    if count is not None:
        return count
    entry = subscription.topic.ledger.get_entry(position)
    return None if entry is None else entry_num_messages(entry.data)
