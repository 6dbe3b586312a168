"""OpSendMsg (one SEND in flight, seed 000 / Java ``ProducerImpl.OpSendMsg``) and topic-name validation
shared by the producers and the client."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from quasar.protocol import InvalidTopicNameError, MessageId, TopicName

__all__ = ["OpSendMsg", "full_topic", "message_id"]


class OpSendMsg:
    """One SEND in flight: its encoded frame and the futures it resolves.

    Attributes:
        sequence_id / highest_sequence_id: first and last sequence id it covers.
        num_messages: messages in the entry (1, or the batch size). frame: the encoded SEND.
        futures: one per message (batch), or one on the last chunk; None = nobody waits.
        permits: messages to release from ``max_pending_messages`` on completion.
        created: monotonic seconds (send timeout).
    """

    __slots__ = (
        "created",
        "frame",
        "futures",
        "highest_sequence_id",
        "num_messages",
        "permits",
        "sequence_id",
    )

    def __init__(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        frame: bytes,
        futures: list[asyncio.Future[Any] | None],
        permits: int,
    ) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.num_messages = num_messages
        self.frame = frame
        self.futures = futures
        self.permits = permits
        self.created = time.monotonic()


def full_topic(topic: Any) -> TopicName:
    """Validate and expand a topic name (``"t"`` -> ``persistent://public/default/t``).

    Raises:
        TypeError: not a str. ValueError: not a valid Pulsar topic name.
    """
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__}")
    try:
        return TopicName.parse(topic)
    except InvalidTopicNameError as exc:
        raise ValueError(f"topic: {exc}") from None


_new = object.__new__
_set = object.__setattr__


def message_id(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1, batch_size: int = 0
) -> MessageId:
    """A :class:`MessageId` built without re-validating fields that come from a decoded frame (ids already
    int64 / int32), for the per-message receive and receipt paths."""
    mid = _new(MessageId)
    _set(mid, "ledger_id", ledger_id)
    _set(mid, "entry_id", entry_id)
    _set(mid, "partition", partition)
    _set(mid, "batch_index", batch_index)
    _set(mid, "batch_size", batch_size)
    return mid
