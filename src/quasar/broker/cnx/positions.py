"""Consumer-side rules that turn wire message ids into cursor moves: reader start positions, SEEK targets and
acknowledgements (CommandAck with batch-index ack sets, PIP-54).

Pure functions over a topic's managed ledger and a subscription; the consumer command family calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    ack (PIP-54): bit i set = index i not yet acknowledged. Raises ``NotAllowedError`` for an ack_set longer
    than the delivered batch needs, and the cursor's errors for positions that name no entry."""
    whole: list[Position] = []
    partial: list[tuple[Position, int]] = []
    for message_id in cmd.message_id:
        position = position_of(message_id)
        if message_id.ack_set and any(message_id.ack_set):
            if subscription.cursor.batch_ack_set(position) is None:
                # first batch-index ack of this entry: the set must fit the delivered batch
                count = consumer.pending_acks.get(position)
                words = len(message_id.ack_set)
                if count is not None and words > (count + 63) // 64:
                    raise NotAllowedError(
                        f"ack_set of {words} words for a batch of {count} messages at {position}"
                    )
            partial.append((position, ack_set_bits(message_id.ack_set)))
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
