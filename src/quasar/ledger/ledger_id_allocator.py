"""LedgerIdAllocator: per-broker unique ledger ids, reserved durably in blocks (a hi/lo counter).

Pulsar gets ledger ids from BookKeeper's ledger-id generator in the metadata store; here the metadata store
holds one counter, ``/ledger-ids/next`` = the first id not yet reserved (a JSON int). A block of
``block_size`` ids is reserved by writing ``next + block_size`` with compare-and-set on the counter's version
*before* any id of the block is handed out, so an id is never used twice, even after a crash or with two
allocators on one store (a crash only leaves a gap, as BookKeeper ids have gaps too).

Rollover needs a ledger id synchronously, in call order, on the loop thread, so :meth:`allocate` never waits
and never touches the metadata store: it hands out the next id of a block reserved earlier. The first block
is reserved by :meth:`start`; once half of the current block is used (``refill_at``), the next block is
reserved by a background task the allocator owns. Should the current block run out before that reservation
lands (more than ``block_size / 2`` rollovers within one metadata round trip, or a failing metadata store),
:meth:`allocate` returns None and the managed ledger keeps writing to its current ledger and rolls over at a
later add: a rollover is delayed, never the event loop. :meth:`allocate_async` waits for a reservation (used
when a new managed ledger is created, which awaits the metadata store anyway).

A block that runs out before the next one lands makes the next reservations four times larger (up to
:data:`MAX_BLOCK_SIZE` ids): after a restart every loaded topic's first publish starts a new ledger, so 10,000
topics publishing at once need 10,000 ids within a few metadata round trips, and a fixed block of 1,000 left
most of those rollovers delayed, each retried at every later add. Ids are 64-bit and gaps are harmless
(BookKeeper's have them too), so a larger block costs nothing but ids left unused at the next restart.
"""

from __future__ import annotations

import asyncio
import logging
import time

from quasar.ledger.errors import ManagedLedgerAlreadyClosedError, MetadataError, metadata_errors
from quasar.ledger.paths import LEDGER_ID_COUNTER_PATH
from quasar.metadata.errors import BadVersionError
from quasar.metadata.port import MetadataStore, decode_json, encode_json

__all__ = ["LedgerIdAllocator"]

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 8
MAX_BLOCK_SIZE = 65_536
"""Most ids one reservation takes once blocks grew (see the module docstring)."""
_RETRY_AFTER_FAILURE_S = 1.0


class LedgerIdAllocator:
    """Hands out increasing ledger ids (>= 1), unique per metadata store.

    ``metadata``: the metadata port. ``block_size``: ids reserved per metadata write (> 0). ``refill_at``:
    fraction of the current block used when the next block is reserved in the background (0 < x <= 1).
    One allocator serves every managed ledger of a broker (the factory owns it); ``close()`` cancels its
    background reservation.
    """

    def __init__(self, metadata: MetadataStore, *, block_size: int = 1000, refill_at: float = 0.5) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        if not 0 < refill_at <= 1:
            raise ValueError(f"refill_at must be in (0, 1], got {refill_at}")
        self._metadata = metadata
        self._block_size = block_size
        self._refill_at = refill_at
        self._next = 0
        self._limit = 0  # first id not in the current block
        self._block_start = 0
        self._refill_from = 0  # the id from which the next block is reserved in the background
        self._grown_in = -1  # the block (its start) that ran out and made blocks grow
        self._spare: tuple[int, int] | None = None  # the next block, reserved and not yet in use
        self._refill: asyncio.Task[None] | None = None
        self._retry_at = 0.0  # monotonic time before which a failed refill is not retried
        self._closed = False

    @property
    def available(self) -> int:
        """Ids that :meth:`allocate` can hand out without waiting (current block plus a reserved spare)."""
        spare = self._spare[1] - self._spare[0] if self._spare is not None else 0
        return self._limit - self._next + spare

    async def start(self) -> None:
        """Reserve the first block unless ids are already reserved (so calling it again is cheap). Raises
        ``MetadataError``."""
        if self.available == 0:
            refill = self._refill
            if refill is not None:  # a background reservation is under way: its block will do
                await asyncio.wait({refill})
            if self.available == 0:
                await self._reserve()
        self._take_spare_if_exhausted()

    def allocate(self) -> int | None:
        """The next ledger id, or None when no reserved id is left (a reservation is then under way: retry at
        a later rollover). Never waits; starts the background reservation of the next block when the current
        one is ``refill_at`` used."""
        self._take_spare_if_exhausted()
        if self._next >= self._limit:
            if self._grown_in != self._block_start and self._block_size < MAX_BLOCK_SIZE:
                self._grown_in = self._block_start  # once per block that ran out
                self._block_size = min(MAX_BLOCK_SIZE, self._block_size * 4)
            self._start_refill()
            return None
        ledger_id = self._next
        self._next += 1
        if self._spare is None and self._next >= self._refill_from:
            self._start_refill()
        return ledger_id

    async def allocate_async(self) -> int:
        """The next ledger id, waiting for a reservation when none is left. Raises ``MetadataError``,
        ``ManagedLedgerAlreadyClosedError`` after :meth:`close`."""
        while True:
            ledger_id = self.allocate()
            if ledger_id is not None:
                return ledger_id
            refill = self._refill
            if refill is not None:  # wait without cancelling it if we are cancelled; it logs its errors
                await asyncio.wait({refill})
            if self._next >= self._limit and self._spare is None:
                await self._reserve()  # raises when the metadata store keeps failing

    async def close(self) -> None:
        """Cancel the background reservation (its block, if written, is simply never used). Idempotent."""
        self._closed = True
        refill, self._refill = self._refill, None
        if refill is not None:
            refill.cancel()
            await asyncio.gather(refill, return_exceptions=True)

    # ------------------------------------------------------------------ internals
    def _take_spare_if_exhausted(self) -> None:
        if self._next >= self._limit and self._spare is not None:
            (self._next, self._limit), self._spare = self._spare, None
            self._use_block(self._next, self._limit)

    def _use_block(self, start: int, limit: int) -> None:
        self._block_start = start
        self._refill_from = start + max(1, int((limit - start) * self._refill_at))

    def _start_refill(self) -> None:
        if self._refill is not None or self._closed or time.monotonic() < self._retry_at:
            return
        self._refill = asyncio.get_running_loop().create_task(self._refill_once(), name="ledger-id-refill")

    async def _refill_once(self) -> None:
        try:
            await self._reserve()
        except MetadataError as exc:
            self._retry_at = time.monotonic() + _RETRY_AFTER_FAILURE_S
            log.error("cannot reserve ledger ids (rollovers wait until a block is reserved): %s", exc)
        finally:
            self._refill = None

    async def _reserve(self) -> None:
        """Reserve one block with compare-and-set on the counter and keep it as the spare (or the current
        block when the current one is used up)."""
        if self._closed:
            raise ManagedLedgerAlreadyClosedError("the ledger id allocator is closed")
        for _ in range(_CAS_ATTEMPTS):
            with metadata_errors("cannot read the ledger id counter"):
                stored = await self._metadata.get(LEDGER_ID_COUNTER_PATH)
                value = None if stored is None else decode_json(LEDGER_ID_COUNTER_PATH, stored.value)
            if value is not None and (type(value) is not int or value < 1):
                raise MetadataError(f"malformed ledger id counter {value!r} under {LEDGER_ID_COUNTER_PATH}")
            known = self._spare[1] if self._spare is not None else self._limit
            start = max(value or 1, known, 1)
            limit = start + self._block_size
            expected = -1 if stored is None else stored.stat.version
            with metadata_errors("cannot reserve ledger ids"):
                try:
                    await self._metadata.put(LEDGER_ID_COUNTER_PATH, encode_json(limit), expected)
                except BadVersionError:
                    continue  # another allocator reserved a block meanwhile: read again
            if self._spare is None and self._next >= self._limit:
                self._next, self._limit = start, limit
                self._use_block(start, limit)
            elif self._spare is None or self._spare[1] <= start:
                self._spare = (start, limit)
            return
        raise MetadataError("cannot reserve ledger ids: the counter kept changing under compare-and-set")
