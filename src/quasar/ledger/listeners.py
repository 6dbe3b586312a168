"""EntriesListeners: who is told that a managed ledger confirmed new entries (Pulsar ``ManagedLedgerImpl``'s
waiting cursors and ``notifyCursors``), e.g. a dispatcher that read everything and waits for more."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

__all__ = ["EntriesListeners"]

log = logging.getLogger(__name__)


class EntriesListeners:
    """Callbacks of managed ledger ``name``, called on the event loop after :meth:`notify`, coalesced: at most
    once per loop iteration however often ``notify`` ran (so once per flush round). A callback's exception is
    logged, never raised."""

    __slots__ = ("_callbacks", "_name", "_scheduled")

    def __init__(self, name: str) -> None:
        self._name = name
        self._callbacks: list[Callable[[], None]] = []
        self._scheduled = False

    def add(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after each later :meth:`notify`."""
        self._callbacks.append(callback)

    def remove(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no error if it was not registered)."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def clear(self) -> None:
        """Forget every callback."""
        self._callbacks.clear()

    def notify(self) -> None:
        """Schedule one call of every callback (needs a running loop; a no-op without callbacks)."""
        if self._callbacks and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._call)

    def _call(self) -> None:
        self._scheduled = False
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:
                log.exception("%s: entries listener %r failed", self._name, callback)
