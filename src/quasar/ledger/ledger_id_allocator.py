"""LedgerIdAllocator: per-broker unique ledger ids, reserved durably in blocks (a hi/lo counter).

Pulsar gets ledger ids from BookKeeper's ledger-id generator in the metadata store; here the metadata store
holds one counter key, ``/ledger-ids/next`` = the first id not yet reserved. The allocator reserves
``block_size`` ids at a time by writing ``next + block_size`` *before* handing out any id of the block, so an
id is never used twice, even after a crash (a crash only leaves a gap, as BookKeeper ids have gaps too).
Allocation is then an in-memory increment: rollover needs a ledger id synchronously, in call order, on the
loop thread. Only the first allocation and one in every ``block_size`` write to the metadata store (a small
blocking write, once per block).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from quasar.errors import QuasarError
from quasar.ledger.errors import MetadataError

__all__ = ["LEDGER_ID_COUNTER_KEY", "LedgerIdAllocator"]

LEDGER_ID_COUNTER_KEY = "/ledger-ids/next"


class LedgerIdAllocator:
    """Hands out increasing ledger ids (>= 1), unique per metadata store.

    ``metadata``: a ``quasar.storage.metadata.MetadataStore`` (or anything with ``get`` / ``put``).
    ``block_size``: ids reserved per metadata write. Raises ``MetadataError`` when the reservation fails.
    One allocator must serve every managed ledger of a metadata store (the factory owns it).
    """

    def __init__(self, metadata: Any, *, block_size: int = 1000) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self._metadata = metadata
        self._block_size = block_size
        self._next = 0
        self._limit = 0  # first id not reserved by this allocator

    def allocate(self) -> int:
        """The next ledger id; reserves a new block first when the current one is used up."""
        if self._next >= self._limit:
            self._reserve()
        ledger_id = self._next
        self._next += 1
        return ledger_id

    def _reserve(self) -> None:
        try:
            stored = self._metadata.get(LEDGER_ID_COUNTER_KEY)
        except KeyError:
            stored = None
        except (QuasarError, OSError, sqlite3.Error) as exc:
            raise MetadataError(f"cannot read the ledger id counter: {exc}") from exc
        if stored is not None and (type(stored) is not int or stored < 1):
            raise MetadataError(f"malformed ledger id counter {stored!r} under {LEDGER_ID_COUNTER_KEY}")
        start = max(stored or 1, self._limit, 1)
        limit = start + self._block_size
        try:
            self._metadata.put(LEDGER_ID_COUNTER_KEY, limit)
        except (QuasarError, OSError, sqlite3.Error) as exc:
            raise MetadataError(f"cannot reserve ledger ids: {exc}") from exc
        self._next, self._limit = start, limit
