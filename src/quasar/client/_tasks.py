"""Owned background tasks (trio-nursery style): every task the client starts belongs to one TaskOwner, which
cancels and awaits them all on ``aclose``; an exception of a task is logged, never lost silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("quasar.client")


class TaskOwner:
    """A set of tasks owned by one object (connection, producer, consumer, client)."""

    __slots__ = ("_closed", "_name", "_tasks")

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Start ``coro`` as a task owned by this owner.

        Raises:
            RuntimeError: the owner is closed (the coroutine is closed, not leaked).
        """
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self._name}: cannot start a task after close")
        task = asyncio.get_running_loop().create_task(coro, name=name or self._name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: task %s failed", self._name, task.get_name(), exc_info=task.exception())

    def cancel(self) -> None:
        """Cancel every task (without waiting)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()

    async def aclose(self) -> None:
        """Cancel every task and wait for them to finish."""
        self.cancel()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
