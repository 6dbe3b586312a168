"""Listener registry of one store: delivers notifications on the event loop, never inside a backend call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from quasar.metadata.port import Notification, SessionEvent

__all__ = ["Notifier"]

log = logging.getLogger(__name__)


class Notifier:
    """Holds the change and session listeners of one store; a listener that raises is logged and skipped."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[Notification], None]] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []

    def register(self, listener: Callable[[Notification], None]) -> None:
        if not callable(listener):
            raise TypeError(f"a metadata listener is callable, got {listener!r}")
        self._listeners.append(listener)

    def register_session(self, listener: Callable[[SessionEvent], None]) -> None:
        if not callable(listener):
            raise TypeError(f"a session listener is callable, got {listener!r}")
        self._session_listeners.append(listener)

    def clear(self) -> None:
        self._listeners.clear()
        self._session_listeners.clear()

    def schedule(self, loop: asyncio.AbstractEventLoop, events: Sequence[Notification]) -> None:
        """Deliver ``events`` in order on ``loop`` (from the loop's own thread)."""
        if events and self._listeners:
            loop.call_soon(self.dispatch, list(events))

    def schedule_threadsafe(self, loop: asyncio.AbstractEventLoop, events: Sequence[Notification]) -> None:
        """Deliver ``events`` in order on ``loop`` from another thread (dropped when the loop is closed)."""
        if events and self._listeners:
            try:
                loop.call_soon_threadsafe(self.dispatch, list(events))
            except RuntimeError:  # the loop is closed: nobody is left to notify
                log.debug("metadata notifications dropped: event loop closed")

    def schedule_session(self, loop: asyncio.AbstractEventLoop, event: SessionEvent) -> None:
        """Deliver the session ``event`` on ``loop`` (from the loop's own thread)."""
        if self._session_listeners:
            loop.call_soon(self.dispatch_session, event)

    def dispatch_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:  # a listener's bug must not stop the others
                log.exception("metadata session listener %r failed on %s", listener, event)

    def dispatch(self, events: Sequence[Notification]) -> None:
        for event in events:
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:  # a listener's bug must not stop the others
                    log.exception("metadata listener %r failed on %s", listener, event)
