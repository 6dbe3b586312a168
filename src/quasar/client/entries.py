"""Whole stored entries for bulk readers (a Quasar extension; the Spark connector's executors use it).

A reader created with ``deliver_entries=True`` queues one :class:`StoredEntry` per MESSAGE frame instead of one
:class:`~quasar.client.message.Message` per message: the entry's ``MessageMetadata`` bytes and its payload as
the producer wrote it (a batch stays one ``[u32 size][SingleMessageMetadata][item]`` x n payload), only
decompressed and, for a chunked message, reassembled. No Python object is built per message; the caller
decodes the entries in bulk (``quasar.spark`` turns them into Arrow columns in compiled code).

What stays as for messages: flow control counts messages (a batch of n takes n permits, given back when the
entry is handed out, so ``receiver_queue_size`` bounds the messages in flight); checksums, decompression and
chunk reassembly are the consumer's; a re-subscribe restarts after the last entry handed out. What differs: the
start-id filter works on whole entries (an entry at the start id is delivered whole when the start is
inclusive, else dropped), and the MESSAGE's ``ack_set`` is not applied (a reader's non-durable subscription
has none).
"""

from __future__ import annotations

from typing import Any

from quasar.protocol import MessageId

__all__ = ["EntryDelivery", "EntryFlow", "StoredEntry"]


class EntryFlow:
    """Adapter between the receiver queue's hand-out and a consumer's flow control for whole entries: a
    hand-out gives back one permit per message of the entry and records the entry as the restart point."""

    __slots__ = ("_flow",)

    def __init__(self, flow: Any) -> None:
        self._flow = flow

    def handed_out(self, entry: StoredEntry) -> None:
        self._flow.last_dequeued = entry.message_id()
        self._flow.give_back(entry.num_messages)


class StoredEntry:
    """One received entry, whole.

    Attributes:
        ledger_id, entry_id: the entry's position (signed int64; for a chunked message: its last chunk's, as
            the message path's id). partition: partition index, -1 if the topic is not partitioned.
        metadata: the entry's serialized ``MessageMetadata`` (bytes).
        payload: the uncompressed payload (bytes): a batch payload when ``metadata`` has
            ``num_messages_in_batch``, else the one message's value.
        num_messages: messages in the entry (the batch size, else 1).
        batch_size: ``num_messages_in_batch`` of a batch, 0 when not batched.
        redelivery_count: from CommandMessage. consumer: the consumer that received it (acks go there).
        flow: the :class:`EntryFlow` told when the entry is handed out. entry: the entry itself (the
            receiver queue reads ``item.entry.flow`` / ``item.entry.consumer`` of whatever it queues).
    """

    __slots__ = ("batch_size", "consumer", "entry_id", "flow", "ledger_id", "metadata", "num_messages",
                 "partition", "payload", "redelivery_count")  # fmt: skip

    def __init__(
        self, ledger_id: int, entry_id: int, partition: int, metadata: bytes, payload: bytes,
        batch_size: int, redelivery_count: int, consumer: Any, flow: EntryFlow,
    ) -> None:  # fmt: skip
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.partition = partition
        self.metadata = metadata
        self.payload = payload
        self.batch_size = batch_size
        self.num_messages = batch_size if batch_size > 0 else 1
        self.redelivery_count = redelivery_count
        self.consumer = consumer
        self.flow = flow

    @property
    def entry(self) -> StoredEntry:
        return self

    def message_id(self) -> MessageId:
        """The id of the whole entry (batch index -1)."""
        return MessageId(self.ledger_id, self.entry_id, self.partition)

    def __repr__(self) -> str:
        return (
            f"StoredEntry({self.ledger_id}:{self.entry_id}, {self.num_messages} messages, "
            f"{len(self.payload)} bytes)"
        )


class EntryDelivery:
    """The consumer's entry path when ``deliver_entries`` is set: filter by whole entry, queue a StoredEntry.

    Args:
        consumer: the receiving consumer. flow: its FlowControl. delivery_filter: its DeliveryFilter.
        queue: the ReceiverQueue to deliver into.
    """

    __slots__ = ("_consumer", "_filter", "_flow", "_partition", "_queue", "_raw_flow")

    def __init__(self, consumer: Any, flow: Any, delivery_filter: Any, queue: Any) -> None:
        self._consumer = consumer
        self._flow = flow
        self._raw_flow = EntryFlow(flow)
        self._filter = delivery_filter
        self._queue = queue
        self._partition = consumer.partition

    def deliver(
        self,
        ledger_id: int,
        entry_id: int,
        metadata: Any,
        payload: Any,
        batch_size: int,
        redelivery_count: int,
    ) -> None:
        """Queue the entry (``metadata``: bytes or a parsed MessageMetadata; ``payload`` uncompressed), or drop
        it (its permits given back) when the start-id filter or an ack covers it."""
        if self._filter.filtered(ledger_id, entry_id, -1):
            self._flow.give_back(batch_size if batch_size > 0 else 1)
            return
        if metadata.__class__ is not bytes:
            metadata = metadata.SerializeToString()
        if payload.__class__ is not bytes:
            payload = bytes(payload)
        entry = StoredEntry(
            ledger_id, entry_id, self._partition, metadata, payload, batch_size, redelivery_count,
            self._consumer, self._raw_flow,
        )  # fmt: skip
        self._queue.enqueue_many([entry])
