"""Reading a metadata subtree at once, and following changes to it made anywhere in the cluster.

Broker-side tables that are loaded once and then read from memory (admin resources, topic placement, live
brokers) share two needs: read every value at a fixed depth below a root (:func:`read_tree`), and apply the
changes other brokers make through a shared store (etcd) as they happen (:class:`PathFollower`), as Pulsar's
``MetadataCache`` does with its store's notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from quasar.metadata import (
    GetResult,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    decode_segment,
    encode_segment,
)

log = logging.getLogger(__name__)

__all__ = ["PathFollower", "join_path", "read_tree", "split_path"]


def join_path(root: str, *names: str) -> str:
    """``root`` followed by each of ``names`` as one percent-encoded segment."""
    return "/".join((root, *map(encode_segment, names)))


def split_path(root: str, path: str) -> tuple[str, ...] | None:
    """The decoded segments of ``path`` below ``root``, or None when ``path`` is not below it."""
    prefix = root + "/"
    if not path.startswith(prefix):
        return None
    return tuple(decode_segment(segment) for segment in path[len(prefix) :].split("/"))


async def read_tree(metadata: MetadataStore, root: str, depth: int) -> dict[tuple[str, ...], GetResult]:
    """Every value exactly ``depth`` levels below ``root``, keyed by the decoded segment names (children of
    one level are listed concurrently, then every value is read concurrently). Raises the port's
    ``MetadataStoreError``."""
    levels: list[tuple[str, ...]] = [()]
    for _ in range(depth):
        children = await asyncio.gather(*(metadata.get_children(join_path(root, *names)) for names in levels))
        levels = [
            (*names, decode_segment(child))
            for names, kids in zip(levels, children, strict=True)
            for child in kids
        ]
    results = await asyncio.gather(*(metadata.get(join_path(root, *names)) for names in levels))
    return {names: result for names, result in zip(levels, results, strict=True) if result is not None}


PathHandler = Callable[[str, GetResult | None], None]
"""Called with a changed path below the followed root and its current value (None: deleted)."""


class PathFollower:
    """Re-reads every path below ``root`` that a notification says was created, modified or deleted, and
    hands the current value to ``handler`` (on the event loop, in notification order, one read at a time).

    The reads run in ONE owned task (started by :meth:`start`, cancelled by :meth:`stop`); paths notified
    again while queued are read once. A failed read (store unreachable) is retried every ``retry_s`` seconds
    until it succeeds, so a transient outage delays updates but never loses them; ``resync`` (called after
    the store reconnects) is then awaited so changes missed during the outage are picked up.
    """

    def __init__(
        self,
        metadata: MetadataStore,
        root: str,
        handler: PathHandler,
        *,
        resync: Callable[[], Awaitable[None]] | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self._metadata = metadata
        self._prefix = root + "/"
        self._handler = handler
        self._resync = resync
        self._retry_s = retry_s
        self._queued: dict[str, None] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._resync_wanted = False

    def start(self) -> None:
        """Register with the store and start the reader task."""
        self._metadata.register_listener(self._on_notification)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"follow:{self._prefix}")

    async def stop(self) -> None:
        """Cancel the reader task (pending paths are dropped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def request_resync(self) -> None:
        """Run the ``resync`` callback in the reader task (e.g. after a SESSION_REESTABLISHED)."""
        self._resync_wanted = True
        self._wakeup.set()

    def _on_notification(self, notification: Notification) -> None:
        if notification.type is NotificationType.CHILDREN_CHANGED:
            return
        if notification.path.startswith(self._prefix):
            self._queued.pop(notification.path, None)
            self._queued[notification.path] = None
            self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._resync_wanted and self._resync is not None:
                self._resync_wanted = False
                await self._retrying(self._resync)
            while self._queued:
                path = next(iter(self._queued))
                del self._queued[path]
                result = await self._retrying(lambda path=path: self._metadata.get(path))  # type: ignore[misc]
                try:
                    self._handler(path, result)
                except Exception:  # a broken handler must not stop the follower
                    log.exception("metadata change of %s could not be applied", path)

    async def _retrying(self, call: Callable[[], Awaitable[GetResult | None]]) -> GetResult | None:
        while True:
            try:
                return await call()
            except MetadataStoreError as exc:
                log.warning("metadata read failed (%s); retrying in %.1f s", exc, self._retry_s)
                await asyncio.sleep(self._retry_s)
