"""Receipt handles of popped messages: RocketMQ's POP checkpoint text, decoded strictly.

A handle is the broker's ``ExtraInfoUtil`` text (reference rocketmq-grpc.md §6): fields joined by one space,

======  ===================  ==========================================================================
field   RocketMQ name        Quasar value
======  ===================  ==========================================================================
1       startOffset          the entry's queue offset (same as field 8)
2       retrieveTime         when it was handed out, ms since the epoch (a new one per invisible-time change)
3       invisibleTime        ms it stays invisible from ``retrieveTime``
4       reviveQueueId        0
5       topicType            0 (normal; Quasar has no pop-retry topics)
6       brokerName           the broker group (``Broker.name`` of the route)
7       queueId              the partition index (0 for a non-partitioned topic)
8       offset               the entry's queue offset
9       (optional)           the message's index in a Pulsar batch entry (the proxy puts the commit-log
                             offset here; clients never read a handle)
======  ===================  ==========================================================================

Clients treat handles as opaque and send them back on Ack / ChangeInvisibleDuration / forward-to-DLQ.
:func:`decode` accepts only what :func:`ReceiptHandle.encode` produces (8 or 9 fields, canonical decimal
numbers, bounded) and raises :class:`InvalidReceiptHandleError` otherwise; whether a well-formed handle is
*current* (not expired, not superseded, not forged) is the pop engine's check (``PopQueue.lookup``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quasar.errors import QuasarError

__all__ = ["MAX_HANDLE_LENGTH", "InvalidReceiptHandleError", "ReceiptHandle", "decode"]

MAX_HANDLE_LENGTH = 512
"""Longest handle text accepted (an encoded one is well under 200 characters)."""

_NUMBER = re.compile(r"0|[1-9][0-9]{0,18}")
_BROKER_NAME = re.compile(r"[A-Za-z0-9_.:%|-]{1,127}")
_MAX_I64 = (1 << 63) - 1


class InvalidReceiptHandleError(QuasarError, ValueError):
    """A receipt handle that is not one this broker makes (RocketMQ INVALID_RECEIPT_HANDLE, 40013)."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One decoded handle (field table in the module docstring; times in ms)."""

    retrieve_time_ms: int
    invisible_time_ms: int
    broker_name: str
    queue_id: int
    offset: int
    batch_index: int | None = None

    def __post_init__(self) -> None:
        for name in ("retrieve_time_ms", "invisible_time_ms", "queue_id", "offset"):
            value = getattr(self, name)
            if not 0 <= value <= _MAX_I64:
                raise ValueError(f"receipt handle {name} must be in [0, 2**63), not {value}")
        if self.batch_index is not None and not 0 <= self.batch_index <= _MAX_I64:
            raise ValueError(f"receipt handle batch_index must be in [0, 2**63), not {self.batch_index}")
        if not _BROKER_NAME.fullmatch(self.broker_name):
            raise ValueError(f"receipt handle broker name {self.broker_name!r} is not a RocketMQ name")

    @property
    def expires_ms(self) -> int:
        """Wall-clock ms at which the message becomes visible again."""
        return self.retrieve_time_ms + self.invisible_time_ms

    def encode(self) -> str:
        fields = [
            self.offset,
            self.retrieve_time_ms,
            self.invisible_time_ms,
            0,
            0,
            self.broker_name,
            self.queue_id,
            self.offset,
        ]
        if self.batch_index is not None:
            fields.append(self.batch_index)
        return " ".join(str(f) for f in fields)


def decode(text: str) -> ReceiptHandle:
    """Parse a handle made by :meth:`ReceiptHandle.encode`. Raises InvalidReceiptHandleError naming what is
    wrong: too long, not 8 or 9 single-space-separated fields, a number that is not canonical decimal or is
    out of range, a reviveQueueId/topicType other than 0, start offset different from offset, a bad name."""
    if not isinstance(text, str) or not text:
        raise InvalidReceiptHandleError("receipt handle is empty")
    if len(text) > MAX_HANDLE_LENGTH:
        raise InvalidReceiptHandleError(f"receipt handle is longer than {MAX_HANDLE_LENGTH} characters")
    fields = text.split(" ")
    if len(fields) not in (8, 9):
        raise InvalidReceiptHandleError(f"receipt handle has {len(fields)} fields, not 8 or 9")
    numbers = fields[:5] + fields[6:]
    for value in numbers:
        if not _NUMBER.fullmatch(value) or int(value) > _MAX_I64:
            raise InvalidReceiptHandleError(f"receipt handle field {value[:32]!r} is not a valid number")
    start, retrieve, invisible, revive, topic_type = (int(v) for v in fields[:5])
    queue_id, offset = int(fields[6]), int(fields[7])
    if revive != 0 or topic_type != 0:
        raise InvalidReceiptHandleError(
            "receipt handle names a revive queue or retry topic this broker never uses"
        )
    if start != offset:
        raise InvalidReceiptHandleError("receipt handle start offset differs from its offset")
    try:
        return ReceiptHandle(
            retrieve_time_ms=retrieve,
            invisible_time_ms=invisible,
            broker_name=fields[5],
            queue_id=queue_id,
            offset=offset,
            batch_index=int(fields[8]) if len(fields) == 9 else None,
        )
    except ValueError as exc:
        raise InvalidReceiptHandleError(str(exc)) from None
