"""Positions in a topic partition, the offset JSON kept in Spark's checkpoint, and ``startingOffsets`` parsing.

A Pulsar message id is ``(ledgerId, entryId, batchIndex)``; ``batchIndex`` is -1 for a message that was not
sent in a batch. Ledger ids grow, entry ids restart at 0 in each ledger, so ids are ordered by the tuple,
with -1 as batch index meaning "the whole entry".

**Position.** The connector's offsets are *consumed-through* positions: ``Position(L, E, B)`` means every
message up to and including id ``(L, E, B)`` has been read, so a range ``(start, end]`` holds the messages
with ``start < id <= end``. Ordering key: ``(L, E, B)`` with ``B = -1`` sorting after every batch index of
entry ``E`` (:data:`ENTRY_END`), so ``(L, E, -1)`` is "through the end of entry E". ``Position(-1, -1, -1)``
(:data:`EARLIEST`) is "before the first message". A message id ``m`` given by a user as a *first message to
read* becomes :func:`position_before` ``(m)``: ``(L, E, B - 1)`` for ``B > 0``, else ``(L, E - 1, -1)``.

**Offset JSON** (what ``initialOffset``/``latestOffset`` return; Spark stores it verbatim in
``<checkpoint>/offsets/<batchId>`` and compares offsets *as JSON text*, so every dict is built in sorted key
order)::

    {"from": {...}, "initial": true, "positions": {"persistent://t/n/topic-partition-0": "12:7:-1", ...}}

| key         | present                        | meaning                                                      |
|-------------|--------------------------------|--------------------------------------------------------------|
| positions   | always                         | topic partition (full name) -> ``"L:E:B"`` consumed through  |
| initial     | only in ``initialOffset()``    | marks the start of batch 0, which Spark recomputes on replay |
| from        | only in the end of batch 0     | the start batch 0 really had (see below)                    |

Spark logs only *end* offsets and calls ``initialOffset()`` again when batch 0 is replayed after a restart, so a
``latest`` or timestamp start would be resolved anew and silently skip data (reference/spark.md §0.5). The end
of batch 0 therefore carries its own start under ``from``; when ``partitions(start, end)`` sees a start marked
``initial`` and an end with ``from``, it reads from ``from``: the first batch is replayed exactly.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from quasar.spark.errors import OptionError

__all__ = [
    "EARLIEST",
    "ENTRY_END",
    "Offset",
    "Position",
    "StartSpec",
    "normalize_topic",
    "parse_offsets_option",
    "partition_index",
    "position_before",
]

#: Sort value of batch index -1 ("the whole entry"): after every real batch index.
ENTRY_END = 1 << 31

_POSITION_TEXT = re.compile(r"^(-?\d+):(-?\d+)(?::(-?\d+))?$")
_PARTITION_SUFFIX = re.compile(r"^(.*)-partition-(\d+)$")


@dataclass(frozen=True, slots=True)
class Position:
    """Consumed-through position ``(ledger_id, entry_id, batch_index)`` in one topic partition (see module doc)."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    @property
    def key(self) -> tuple[int, int, int]:
        """Ordering key: batch index -1 sorts after every batch index of the same entry."""
        return (self.ledger_id, self.entry_id, self.batch_index if self.batch_index >= 0 else ENTRY_END)

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id < 0

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str, *, what: str = "position") -> Position:
        """Parse ``"L:E"`` or ``"L:E:B"``; raises OptionError naming ``what`` otherwise."""
        match = _POSITION_TEXT.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise OptionError(f"{what}: {text!r} is not a message position 'ledgerId:entryId[:batchIndex]'")
        ledger, entry, batch = match.groups()
        if int(ledger) < 0:
            return EARLIEST
        return cls(int(ledger), int(entry), int(batch) if batch is not None else -1)


EARLIEST = Position(-1, -1, -1)


def position_before(ledger_id: int, entry_id: int, batch_index: int) -> Position:
    """The consumed-through position just before message id ``(ledger_id, entry_id, batch_index)``."""
    if ledger_id < 0:
        return EARLIEST
    if batch_index > 0:
        return Position(ledger_id, entry_id, batch_index - 1)
    return Position(ledger_id, entry_id - 1, -1)


def normalize_topic(name: str, *, what: str = "topic") -> str:
    """``name`` as a full ``persistent://tenant/namespace/topic`` name (Pulsar's short forms default to
    ``public/default``); raises OptionError for an empty name, another domain or a wrong number of parts."""
    text = name.strip()
    rest = text
    if "://" in text:
        domain, rest = text.split("://", 1)
        if domain != "persistent":
            raise OptionError(f"{what}: {name!r} is not a persistent:// topic")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    if len(parts) != 3 or not all(parts):
        raise OptionError(
            f"{what}: {name!r} is not 'name', 'tenant/namespace/name' or 'persistent://tenant/namespace/name'"
        )
    return "persistent://" + "/".join(parts)


def partition_index(topic: str) -> tuple[str, int]:
    """``(parent topic, partition index)`` of a full topic name; index -1 for a non-partitioned name."""
    match = _PARTITION_SUFFIX.match(topic)
    if match is None:
        return topic, -1
    return match.group(1), int(match.group(2))


@dataclass(frozen=True, slots=True)
class Offset:
    """A streaming offset: consumed-through positions per topic partition (see the module doc)."""

    positions: dict[str, Position]
    initial: bool = False
    start_of_first_batch: dict[str, Position] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores; every level is in sorted key order."""
        out: dict[str, Any] = {}
        if self.start_of_first_batch is not None:
            out["from"] = {tp: str(p) for tp, p in sorted(self.start_of_first_batch.items())}
        if self.initial:
            out["initial"] = True
        out["positions"] = {tp: str(p) for tp, p in sorted(self.positions.items())}
        return out

    @classmethod
    def from_json(cls, value: Any) -> Offset:
        """Parse a dict produced by :meth:`to_json` (or its ``json.dumps`` text)."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise OptionError(f"offset {value!r} is not JSON: {exc.msg}") from None
        if not isinstance(value, dict) or not isinstance(value.get("positions"), dict):
            raise OptionError(f"offset {value!r} is not a quasar offset (no 'positions' object)")

        def positions(raw: dict[str, Any]) -> dict[str, Position]:
            return {str(tp): Position.parse(p, what=f"offset of {tp}") for tp, p in raw.items()}

        start = value.get("from")
        return cls(
            positions(value["positions"]),
            initial=bool(value.get("initial", False)),
            start_of_first_batch=positions(start) if isinstance(start, dict) else None,
        )


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where one topic or topic partition starts or ends, as a user wrote it: ``kind`` is ``earliest``,
    ``latest``, ``time`` (``value`` = publish time in ms) or ``position`` (``value`` = a consumed-through
    :class:`Position`)."""

    kind: str
    value: Any = None


def _message_id_spec(spec: Any, where: str) -> StartSpec:
    """A per-partition JSON value of ``startingOffsets``/``endingOffsets`` as a StartSpec.

    Accepted: ``"earliest"``, ``"latest"``, -2 / -1 (Kafka's earliest/latest), ``"L:E[:B]"`` (the message to
    start at), ``{"ledgerId": L, "entryId": E, "batchIndex": B}``, the serialized MessageId of the
    ``messageId`` column as a list of byte values (pulsar-spark's form) or as base64 text ``"b64:..."``.
    """
    if spec in ("earliest", -2):
        return StartSpec("earliest")
    if spec in ("latest", -1):
        return StartSpec("latest")
    if isinstance(spec, str) and spec.startswith("b64:"):
        try:
            spec = list(base64.b64decode(spec[4:], validate=True))
        except (binascii.Error, ValueError) as exc:
            raise OptionError(f"{where}: {spec!r} is not valid base64: {exc}") from None
    if isinstance(spec, list):
        try:
            raw = bytes((b + 256) % 256 for b in spec)
        except TypeError:
            raise OptionError(f"{where}: a message id byte list must hold integers") from None
        return StartSpec("message_id_bytes", raw)
    if isinstance(spec, str):
        match = _POSITION_TEXT.match(spec.strip())
        if match is None:
            raise OptionError(
                f"{where}: {spec!r} is neither 'earliest', 'latest' nor a message id 'ledgerId:entryId[:batchIndex]'"
            )
        ledger, entry, batch = match.groups()
        return StartSpec(
            "position", position_before(int(ledger), int(entry), int(batch) if batch is not None else -1)
        )
    if isinstance(spec, dict):
        try:
            ledger, entry = int(spec["ledgerId"]), int(spec["entryId"])
            batch = int(spec.get("batchIndex", -1))
        except (KeyError, TypeError, ValueError):
            raise OptionError(
                f"{where}: a message id object needs integer 'ledgerId' and 'entryId'"
            ) from None
        return StartSpec("position", position_before(ledger, entry, batch))
    raise OptionError(f"{where}: unsupported value {spec!r}")


def parse_offsets_option(name: str, text: str) -> StartSpec | dict[str, StartSpec]:
    """Parse ``startingOffsets``/``endingOffsets``: ``earliest``, ``latest``, or a JSON object mapping a topic
    (all its partitions) or a topic partition (``...-partition-N``) to a message id spec (see
    :func:`_message_id_spec`). Topic names are normalized to full names.

    Raises:
        OptionError: not ``earliest``/``latest`` and not a JSON object of valid specs; the message names
            ``name`` and the offending key.
    """
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return StartSpec(stripped.lower())
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"{name}: {text!r} is neither 'earliest', 'latest' nor JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(value, dict) or not value:
        raise OptionError(f"{name}: expected a non-empty JSON object topic -> message id, got {text!r}")
    return {
        normalize_topic(str(topic), what=name): _message_id_spec(spec, f"{name}[{topic!r}]")
        for topic, spec in value.items()
    }
