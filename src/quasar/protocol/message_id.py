"""MessageId: the address of a message, ``(ledger_id, entry_id)`` plus partition and batch position.

Semantics follow the C++ client (``lib/MessageId.cc``, ``MessageIdBuilder.cc``), which the official Python
``pulsar.MessageId`` wraps:

* ordering (``<``) compares ``(ledger_id, entry_id, batch_index)`` and ignores the partition;
* equality compares ``(ledger_id, entry_id, batch_index, partition)``; ``batch_size`` takes no part in
  either;
* the other operators are derived exactly as in C++: ``<=`` is "``<`` or ``==``", ``>`` is "not ``<=``" and
  ``>=`` is "not ``<``" — so two ids that differ only in partition are each ``>`` (and ``>=``) the other, and
  neither ``<`` nor ``<=``. Sorting uses ``<`` only and is unaffected;
* ``MessageId.earliest`` is (-1, -1) and ``MessageId.latest`` is (INT64_MAX, INT64_MAX).

On the wire ``ledgerId``/``entryId`` are ``uint64``; -1 travels as 2^64-1 and is read back as -1 (ids are
treated as signed int64). :meth:`MessageId.serialize` produces the ``MessageIdData`` bytes of the C++
``MessageId::serialize``: ledgerId and entryId always, partition / batch_index only when not -1, batch_size
only when not 0 — so ``pulsar.MessageId.deserialize(MessageId(...).serialize())`` round-trips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from .errors import LocalProtocolError
from .proto.PulsarApi_pb2 import MessageIdData

__all__ = ["EARLIEST", "INT64_MAX", "LATEST", "MessageId"]

INT64_MAX: Final = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_U64_MASK = (1 << 64) - 1


def _to_int64(value: int) -> int:
    """uint64 wire value -> signed int64 (2^64-1 -> -1)."""
    return value - (1 << 64) if value > INT64_MAX else value


@dataclass(frozen=True, slots=True, eq=False)
class MessageId:
    """Message address; see the module docstring for ordering and equality.

    Attributes:
        ledger_id: ledger id (signed int64; -1 in ``EARLIEST``).
        entry_id: entry id within the ledger (signed int64).
        partition: partition index of the topic, -1 when the topic is not partitioned (int32).
        batch_index: index of the message inside a batched entry, -1 when not batched (int32).
        batch_size: number of messages of the batch, 0 when unknown / not batched (int32).

    Raises:
        LocalProtocolError: a field is not an int or out of its int64/int32 range.
    """

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = 0

    def __post_init__(self) -> None:
        for name in ("ledger_id", "entry_id"):
            value = getattr(self, name)
            if type(value) is not int or not _INT64_MIN <= value <= INT64_MAX:
                raise LocalProtocolError(f"MessageId.{name} must be an int64, got {value!r}")
        for name in ("partition", "batch_index", "batch_size"):
            value = getattr(self, name)
            if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
                raise LocalProtocolError(f"MessageId.{name} must be an int32, got {value!r}")

    def _order_key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, self.batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return (
            self.ledger_id == other.ledger_id
            and self.entry_id == other.entry_id
            and self.batch_index == other.batch_index
            and self.partition == other.partition
        )

    def __hash__(self) -> int:
        return hash((self.ledger_id, self.entry_id, self.batch_index, self.partition))

    def __lt__(self, other: MessageId) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() < other._order_key()

    def __le__(self, other: MessageId) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self < other or self == other

    def __gt__(self, other: MessageId) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return not self <= other

    def __ge__(self, other: MessageId) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return not self < other

    def to_pb(self) -> MessageIdData:
        """Return a ``MessageIdData`` (ids as uint64; optional fields set as the C++ serialize does)."""
        data = MessageIdData(ledgerId=self.ledger_id & _U64_MASK, entryId=self.entry_id & _U64_MASK)
        if self.partition != -1:
            data.partition = self.partition
        if self.batch_index != -1:
            data.batch_index = self.batch_index
        if self.batch_size != 0:
            data.batch_size = self.batch_size
        return data

    @classmethod
    def from_pb(cls, data: MessageIdData) -> MessageId:
        """Build from a ``MessageIdData`` (uint64 2^64-1 -> -1; absent partition/batch_index -> -1)."""
        return cls(
            _to_int64(data.ledgerId),
            _to_int64(data.entryId),
            data.partition,
            data.batch_index,
            data.batch_size,
        )

    def serialize(self) -> bytes:
        """The ``MessageIdData`` protobuf bytes, as ``pulsar.MessageId.serialize()`` produces them."""
        return self.to_pb().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes | memoryview) -> MessageId:
        """Parse bytes from :meth:`serialize` or ``pulsar.MessageId.serialize()``.

        Raises:
            LocalProtocolError: the bytes are not a MessageIdData with ledgerId and entryId.
        """
        message = MessageIdData()
        try:
            # protobuf parses any buffer without a copy; types-protobuf's stub says bytes only
            message.ParseFromString(data)  # type: ignore[arg-type]
        except DecodeError as exc:
            raise LocalProtocolError(f"not a serialized MessageId: {exc}") from exc
        if not message.IsInitialized():
            raise LocalProtocolError("serialized MessageId lacks ledgerId or entryId")
        try:
            return cls.from_pb(message)
        except LocalProtocolError as exc:
            raise LocalProtocolError(f"not a serialized MessageId: {exc}") from exc


#: The first message of a topic (C++ ``MessageId::earliest()``).
EARLIEST: Final = MessageId(-1, -1)
#: After the last message of a topic (C++ ``MessageId::latest()``).
LATEST: Final = MessageId(INT64_MAX, INT64_MAX)
