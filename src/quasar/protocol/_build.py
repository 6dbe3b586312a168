"""Shared helpers of the command builders (commands.py, requests.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from .enums import ServerError
from .errors import LocalProtocolError
from .message_id import MessageId
from .proto.PulsarApi_pb2 import KeyValue, MessageIdData
from .proto.PulsarApi_pb2 import ServerError as WireServerError

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

P = ParamSpec("P")
R = TypeVar("R")

_U64_MASK = (1 << 64) - 1
_INT64_MIN = -(1 << 63)


def builder(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn protobuf's ValueError/TypeError for a bad field value into LocalProtocolError."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError) as exc:
            raise LocalProtocolError(f"{fn.__name__}: {exc}") from exc

    return wrapper


def u64(value: int) -> int:
    """A signed int64 id (ledger/entry/request id) as the uint64 wire value: -1 -> 2^64-1."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError(f"{value} is out of the int64 range")
        return value & _U64_MASK
    return value


def wire_error(error: ServerError | int) -> WireServerError.ValueType:
    """``error`` typed as the generated ``ServerError`` value, unchanged: protobuf refuses a code outside the
    enum, or a non-int, when it is assigned to a field (ValueError/TypeError, so LocalProtocolError from a
    builder)."""
    return cast(WireServerError.ValueType, error)


def set_ids(
    target: RepeatedCompositeFieldContainer[MessageIdData], message_ids: Iterable[MessageId | tuple[int, int]]
) -> None:
    """Append ``{ledgerId, entryId}`` entries (nothing else, as the C++ client) to a repeated field."""
    add = target.add
    for message_id in message_ids:
        if isinstance(message_id, MessageId):
            ledger_id, entry_id = message_id.ledger_id, message_id.entry_id
        else:
            ledger_id, entry_id = message_id
        add(ledgerId=u64(ledger_id), entryId=u64(entry_id))


def fill_id(target: MessageIdData, ledger_id: int, entry_id: int) -> None:
    target.ledgerId = u64(ledger_id)
    target.entryId = u64(entry_id)


def key_values(mapping: Mapping[str, str] | None) -> list[KeyValue]:
    return [] if not mapping else [KeyValue(key=k, value=v) for k, v in mapping.items()]
