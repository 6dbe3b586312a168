"""OpSendMsg (one SEND in flight, seed 000 / Java ``ProducerImpl.OpSendMsg``), the waiters it completes, and
topic-name validation shared by the producers and the client.

A *waiter* is what learns the outcome of one message: None (nobody), an ``asyncio.Future`` (``send_async`` of
the asyncio API; resolved with the MessageId or failed with the error) or a callable
``callback(error, message_id)`` (the blocking facade's ``send_async``; called on the event loop thread with
``(None, MessageId)`` or ``(ClientError, None)``; an exception it raises is logged and dropped).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from quasar.protocol import InvalidTopicNameError, MessageId, TopicName

__all__ = ["OpSendMsg", "complete_waiter", "fail_waiter", "full_topic", "message_id"]

log = logging.getLogger("quasar.client")

Future = asyncio.Future


class OpSendMsg:
    """One SEND in flight: its encoded frame and the waiters it completes.

    Attributes:
        sequence_id / highest_sequence_id: first and last sequence id it covers.
        num_messages: messages in the entry (1, or the batch size). frame: the encoded SEND.
        waiters: one per message (batch), or one on the last chunk (see the module docstring).
        permits: messages to release from ``max_pending_messages`` on completion.
        created: monotonic seconds (send timeout).
    """

    __slots__ = (
        "created",
        "frame",
        "highest_sequence_id",
        "num_messages",
        "permits",
        "sequence_id",
        "waiters",
    )

    def __init__(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        frame: bytes,
        waiters: list[Any],
        permits: int,
    ) -> None:
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.num_messages = num_messages
        self.frame = frame
        self.waiters = waiters
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


def complete_waiter(waiter: Any, result: MessageId) -> None:
    """Hand ``result`` to a waiter (a done future is left alone)."""
    if waiter.__class__ is Future:
        if not waiter.done():
            waiter.set_result(result)
        return
    try:
        waiter(None, result)
    except Exception:
        log.exception("send_async callback failed")


def fail_waiter(waiter: Any, error: BaseException) -> None:
    """Hand ``error`` to a waiter (None and done futures are left alone)."""
    if waiter is None:
        return
    if waiter.__class__ is Future:
        if not waiter.done():
            waiter.set_exception(error)
        return
    try:
        waiter(error, None)
    except Exception:
        log.exception("send_async callback failed")


_new = object.__new__
_set_ledger_id = MessageId.__dict__["ledger_id"].__set__
_set_entry_id = MessageId.__dict__["entry_id"].__set__
_set_partition = MessageId.__dict__["partition"].__set__
_set_batch_index = MessageId.__dict__["batch_index"].__set__
_set_batch_size = MessageId.__dict__["batch_size"].__set__


def message_id(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1, batch_size: int = 0
) -> MessageId:
    """A :class:`MessageId` built without re-validating fields that come from a decoded frame (ids already
    int64 / int32), for the per-message receive and receipt paths (slot descriptors set directly)."""
    mid = _new(MessageId)
    _set_ledger_id(mid, ledger_id)
    _set_entry_id(mid, entry_id)
    _set_partition(mid, partition)
    _set_batch_index(mid, batch_index)
    _set_batch_size(mid, batch_size)
    return mid
