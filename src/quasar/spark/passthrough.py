"""Passthrough options of the Spark connector (``quasar.client.*``, ``quasar.reader.*``, ``quasar.producer.*``):
Spark lower-cases option keys, so each table maps a normalised name (no ``_``, ``.``, ``-``; lower case) to the
:mod:`quasar.client` keyword and its type. Names are the official ``pulsar-client``'s, which quasar.client
shares; a few official-only options are accepted, checked and dropped with a log line.
"""

from __future__ import annotations

import logging
from typing import Any

from quasar.client import CompressionType, PartitionsRoutingMode
from quasar.spark.errors import OptionError

__all__ = ["CLIENT_PARAMS", "PRODUCER_PARAMS", "READER_PARAMS", "convert"]

log = logging.getLogger("quasar.spark")


def _norm(name: str) -> str:
    return name.replace("_", "").replace(".", "").replace("-", "").lower()


#: Options of the official client that quasar.client has no use for: accepted (so existing jobs keep
#: working), checked, and dropped with a log line.
_IGNORED = "ignored"

CLIENT_PARAMS = {
    "operationtimeoutseconds": ("operation_timeout_seconds", int),
    "connectiontimeoutms": ("connection_timeout_ms", int),
    "iothreads": ("io_threads", int),  # ignored by quasar.client.Client (one asyncio loop thread)
}
READER_PARAMS = {
    "receiverqueuesize": ("receiver_queue_size", int),
    "readername": ("reader_name", str),
    "subscriptionroleprefix": ("subscription_role_prefix", str),
    "readcompacted": ("is_read_compacted", bool),
    "isreadcompacted": ("is_read_compacted", bool),
}
PRODUCER_PARAMS = {
    "sendtimeoutmillis": ("send_timeout_millis", int),
    "sendtimeoutms": ("send_timeout_millis", int),
    "compressiontype": ("compression_type", CompressionType),
    "maxpendingmessages": ("max_pending_messages", int),
    "maxpendingmessagesacrosspartitions": ("max_pending_messages_across_partitions", (_IGNORED, int)),
    "blockifqueuefull": ("block_if_queue_full", bool),
    "batchingenabled": ("batching_enabled", bool),
    "enablebatching": ("batching_enabled", bool),
    "batchingmaxmessages": ("batching_max_messages", int),
    "batchingmaxallowedsizeinbytes": ("batching_max_allowed_size_in_bytes", int),
    "batchingmaxpublishdelayms": ("batching_max_publish_delay_ms", int),
    "chunkingenabled": ("chunking_enabled", bool),
    "messageroutingmode": ("message_routing_mode", PartitionsRoutingMode),
    "lazystartpartitionedproducers": ("lazy_start_partitioned_producers", (_IGNORED, bool)),
    "batchingtype": ("batching_type", (_IGNORED, ("Default", "KeyBased"))),
}


def _parse(text: str, kind: Any) -> Any:
    """One passthrough value of ``kind`` (bool, int, str, an enum class or a tuple of names); ValueError."""
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return text.lower() == "true"
    if kind is int:
        return int(text)
    if kind is str:
        return text
    names = kind if isinstance(kind, tuple) else tuple(kind.__members__)
    for name in names:
        if name.lower() == text.lower():
            return name if isinstance(kind, tuple) else kind[name]
    raise ValueError(f"expected one of {', '.join(names)}")


def convert(conf: tuple[tuple[str, str], ...], table: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Map passthrough pairs to :mod:`quasar.client` keyword arguments (the official client's names, which
    quasar.client shares); OptionError for unknown keys or bad values. Official-client options quasar.client
    does not have are checked and dropped (logged)."""
    out: dict[str, Any] = {}
    for key, raw in conf:
        entry = table.get(_norm(key))
        if entry is None:
            valid = ", ".join(sorted({prefix + name for name in table}))
            raise OptionError(f"unknown option {prefix + key!r}; valid: {valid}")
        name, kind = entry
        ignored = isinstance(kind, tuple) and kind[0] == _IGNORED
        try:
            value = _parse(str(raw).strip(), kind[1] if ignored else kind)
        except ValueError as exc:
            raise OptionError(f"option {prefix + key!r}: bad value {raw!r}: {exc}") from None
        if ignored:
            log.info("option %s=%s has no equivalent in quasar.client; ignored", prefix + key, value)
        else:
            out[name] = value
    return out
