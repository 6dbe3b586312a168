"""Reader: a non-durable Exclusive subscription named ``reader-<10 hex>`` that starts at a message id
(C++ ``ReaderImpl``; reference/pulsar-protocol.md §6.8, §8.3). The broker starts the cursor at the given id
(inclusive); the client drops the id itself unless ``start_message_id_inclusive``. Each read is acked
cumulatively (as the C++ reader). ``has_message_available`` compares GET_LAST_MESSAGE_ID with the last id
handed out.
"""

from __future__ import annotations

from typing import Any

from quasar.protocol import EARLIEST, LATEST, MessageId, SubType

from .consumer import Consumer
from .entries import StoredEntry
from .message import Message
from .multi_consumer import MultiTopicsConsumer

__all__ = ["Reader"]


class Reader:
    """Reads a topic (or every partition of a partitioned topic) from a start message id."""

    def __init__(
        self, consumer: Consumer | MultiTopicsConsumer, start_message_id: MessageId, inclusive: bool
    ) -> None:
        self._consumer = consumer
        self._start = start_message_id
        self._inclusive = inclusive

    @property
    def topic(self) -> str:
        """The topic read."""
        return self._consumer.topic

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message (``timeout_millis`` as ``Consumer.receive``)."""
        message = await self._consumer.receive(timeout_millis)
        child = message.entry.consumer
        if child.config.consumer_type == SubType.Exclusive:
            await child.acknowledge_cumulative(message)
        return message

    async def read_batch(self, max_num_messages: int = 100, timeout_millis: int = 100) -> list[Message]:
        """Up to ``max_num_messages`` messages in one call: waits up to ``timeout_millis`` ms for the first, then
        takes what is already queued; ``[]`` when nothing came in time. A Quasar extension (the official reader
        reads one message per call) for scans such as the Spark connector's. Acked as :meth:`read_next` does,
        cumulatively, once per partition at its last message of the batch. Raises ValueError for a bad count."""
        messages = await self._consumer.batch_receive(max_num_messages, timeout_millis)
        acked: set[int] = set()
        for message in reversed(messages):
            child = message.entry.consumer
            if id(child) not in acked:
                acked.add(id(child))
                if child.config.consumer_type == SubType.Exclusive:
                    await child.acknowledge_cumulative(message)
        return messages

    async def read_entries(self, max_entries: int = 100, timeout_millis: int = 100) -> list[StoredEntry]:
        """Up to ``max_entries`` whole entries of a reader created with ``deliver_entries=True``
        (:mod:`quasar.client.entries`): waits up to ``timeout_millis`` ms for the first, then takes what is
        queued; ``[]`` when nothing came in time. The last one is acknowledged cumulatively (as
        :meth:`read_batch`). Raises ValueError for a bad count, TypeError on a reader of messages."""
        entries: list[Any] = await self._consumer.batch_receive(max_entries, timeout_millis)
        if entries:
            last = entries[-1]
            if not isinstance(last, StoredEntry):
                raise TypeError("read_entries needs a reader created with deliver_entries=True")
            child = last.consumer
            if child.config.consumer_type == SubType.Exclusive:
                await child.acknowledge_cumulative(last.message_id())
        return entries

    async def has_message_available(self) -> bool:
        """True when a message is queued or the topic has messages after the last one read."""
        if self._consumer.queue:
            return True
        children = [self._consumer] if isinstance(self._consumer, Consumer) else self._consumer.consumers
        for child in children:
            if await self._child_has_more(child):
                return True
        return False

    async def _child_has_more(self, child: Consumer) -> bool:
        last = await child.get_last_message_id()
        if last.ledger_id < 0 or last.entry_id < 0:
            return False
        last_key = (last.ledger_id, last.entry_id, last.batch_index)
        dequeued = child.last_dequeued
        if dequeued is not None:
            return last_key > (dequeued.ledger_id, dequeued.entry_id, dequeued.batch_index)
        start = child.start_message_id or self._start
        if start == EARLIEST:
            return True
        if start == LATEST:
            return self._inclusive
        start_key = (start.ledger_id, start.entry_id, start.batch_index)
        return last_key > start_key or (self._inclusive and last_key >= start_key)

    async def seek(self, target: MessageId | int) -> None:
        """Move the reader to a message id or a publish time (int, ms since the epoch)."""
        await self._consumer.seek(target)

    async def close(self) -> None:
        """Close the reader (its non-durable subscription goes away)."""
        await self._consumer.close()

    def is_connected(self) -> bool:
        """True while the reader's consumer(s) are connected."""
        return self._consumer.is_connected

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        return await self.read_next()
