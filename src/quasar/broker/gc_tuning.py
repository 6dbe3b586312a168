"""The broker process's cyclic garbage collector, tuned for a long-running server.

Why: every entry on the publish path allocates a few short-lived container objects (the pending send, the
futures and callbacks that carry its receipt). With CPython's default threshold (a young collection every 700
net allocations) the collector ran every few dozen entries, and each older-generation pass walked the whole
heap of a running broker (protobuf descriptors, aiohttp, topics, cursors). py-spy put about a third of the
broker's CPU per entry there: with the official client publishing 100 B messages one per SEND, 38 µs per
entry with the defaults against 23 µs tuned (benchmarks/README.md has the runs).

What: after start-up, :func:`tune_gc` collects once and freezes every object that exists then
(``gc.freeze()``, as Instagram does for its long-lived servers: those objects are never scanned again), and
raises the young-generation threshold to ``gc_gen0_threshold`` (``BrokerConfig``; 0 keeps CPython's). Reference
counting still frees every acyclic object at once; only cyclic garbage waits for a collection, and a frozen
object is still freed by reference counting when it is released.

Used by ``quasar standalone`` (the process owner); a broker embedded in another program leaves the
collector as its host set it.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["GEN1_THRESHOLD", "GEN2_THRESHOLD", "tune_gc"]

log = logging.getLogger(__name__)

GEN1_THRESHOLD = 20
"""Young collections between two middle-generation collections (CPython 10)."""
GEN2_THRESHOLD = 100
"""Middle-generation collections between two full ones (CPython 10; a full one also needs the long-lived
objects to have grown by 25 %)."""


def tune_gc(gen0_threshold: int, freeze: bool) -> None:
    """Collect, optionally freeze the survivors, and set the thresholds to ``(gen0_threshold, 20, 100)``.

    Args:
        gen0_threshold: net container allocations between young collections; 0 leaves the thresholds as
            they are.
        freeze: move every object alive now to the permanent generation (``gc.freeze``).
    """
    gc.collect()
    if freeze:
        gc.freeze()
    if gen0_threshold > 0:
        gc.set_threshold(gen0_threshold, GEN1_THRESHOLD, GEN2_THRESHOLD)
    log.info("garbage collector: thresholds %s, %d objects frozen", gc.get_threshold(), gc.get_freeze_count())
