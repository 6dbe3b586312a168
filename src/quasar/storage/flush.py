"""Flush services: when the commit log and the consume queues reach the disk (RocketMQ ``CommitLog`` inner
``GroupCommitService`` / ``FlushRealTimeService`` and ``DefaultMessageStore.FlushConsumeQueueService``; A7).

- ``SYNC_FLUSH`` (Quasar's default): :class:`GroupCommitService`. The event loop appends records and submits a
  request "flushed up to offset X" per put (a callback on the publish path, ``submit_callback``: no future
  per entry; or a future, ``submit``); a thread fdatasyncs the commit log once for everything written so far,
  then posts the flushed offset back with ONE ``loop.call_soon_threadsafe`` per flush round, and the loop
  releases every waiter the offset covers. Many appends, one fsync. A waiter whose deadline
  (``sync_flush_timeout_ms``) passes gets ``FLUSH_DISK_TIMEOUT``. All waiters are resolved on the loop thread
  in submission order, so they complete in commit log offset order.
- ``ASYNC_FLUSH``: :class:`PeriodicFlushService` fdatasyncs every ``flush_interval_ms`` when at least
  ``flush_least_pages`` pages are dirty, and thoroughly (any dirty byte) every 10 s; puts are PUT_OK at once.
- Consume queues are derived data: a :class:`PeriodicFlushService` flushes them every second and thoroughly
  every minute, writing the checkpoint on thorough rounds.

A failed round makes the store refuse writes, except when it failed for want of a file descriptor (EMFILE /
ENFILE: the directory fsync of a new file, the checkpoint): that step did not run and nothing past it was
reported flushed (:meth:`MappedFile.flush <quasar.storage.mapped_file.MappedFile.flush>` moves its flushed
position after the directory fsync), so the round is retried; SYNC_FLUSH waiters wait for it or time out.

fsync never runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import functools
import logging
import threading
import time
from collections.abc import Callable

from quasar.storage.errors import transient_reason
from quasar.storage.status import PutStatus

log = logging.getLogger(__name__)

FlushCallback = Callable[[PutStatus], None]
FlushLatencyObserver = Callable[[float], None]
"""``observer(seconds)``: told, on the event loop thread, how long one group commit round's fdatasync took."""
"""``callback(status)``: what a SYNC_FLUSH waiter is told, on the loop thread (PUT_OK, FLUSH_DISK_TIMEOUT,
UNKNOWN_ERROR after a failed flush, SERVICE_NOT_AVAILABLE at close)."""


def _resolve(future: asyncio.Future[PutStatus], status: PutStatus) -> None:
    if not future.done():
        future.set_result(status)


def _call(callback: FlushCallback, status: PutStatus) -> None:
    """Run one waiter's callback; a failing one is logged and the others still run."""
    try:
        callback(status)
    except Exception:  # a waiter's bug must not strand the waiters queued behind it (logged)
        log.exception("group commit: a flush callback failed")


GROUP_COMMIT_WAIT_S = 0.010
"""The group commit thread wakes at least every 10 ms (RocketMQ ``GroupCommitService.run``)."""
FLUSH_THOROUGH_INTERVAL_S = 10.0
"""RocketMQ ``flushCommitLogThoroughInterval``: an async flush of any amount at least every 10 s."""
OPEN_FILES_LOG_INTERVAL_S = 1.0
"""A flush round retried for too many open files is logged at most this often."""


class FlushDiskType(enum.Enum):
    """RocketMQ ``FlushDiskType``. Quasar defaults to SYNC_FLUSH: a receipt means the entry is on disk."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class ServiceThread:
    """A named daemon thread with a stop event and a wake-up event (RocketMQ ``ServiceThread``).

    An exception escaping ``run`` is logged and handed to ``on_error``; it never dies silently.
    """

    def __init__(self, name: str, on_error: Callable[[BaseException], None]) -> None:
        self.name = name
        self._on_error = on_error
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop the thread and wait for it (blocking: call it off the event loop)."""
        self._stopped.set()
        self._wakeup.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                log.error("%s did not stop within %.0f s", self.name, timeout_s)

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            log.exception("%s failed", self.name)
            self._on_error(exc)

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class OpenFilesRetries:
    """Counts and logs flush rounds that failed for want of a process resource, a file descriptor (EMFILE /
    ENFILE) or memory (ENOMEM), which the flush services retry instead of refusing writes; one error line per
    second at most."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._log_after = 0.0
        self.count = 0
        """Rounds retried (statistics, tests)."""

    def retry(self, exc: BaseException) -> bool:
        """True (counted and logged) when ``exc`` is transient (errno in ``TRANSIENT_ERRNOS``): the caller
        retries the round."""
        reason = transient_reason(exc)
        if reason is None:
            return False
        self.count += 1
        now = time.monotonic()
        if now >= self._log_after:
            self._log_after = now + OPEN_FILES_LOG_INTERVAL_S
            log.error("%s: %s, the flush is retried (%d so far): %s", self._name, reason, self.count, exc)
        return True


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH group commit. ``flush()`` fdatasyncs whatever of the commit log is dirty (no syscall when
    nothing is) and returns the flushed offset, which may also have been advanced by another flusher.

    Loop side (:meth:`submit`, the expiry timer, the flushed callback) runs on the event loop passed to
    :meth:`start_on`. After a failed flush every pending and later waiter gets ``UNKNOWN_ERROR`` and the
    thread stops (``on_error`` is told, so the store can refuse writes); a flush that failed for too many open
    files is retried instead (:class:`OpenFilesRetries`).
    """

    def __init__(
        self,
        flush: Callable[[], int],
        *,
        sync_flush_timeout_ms: int,
        on_error: Callable[[BaseException], None],
        name: str = "quasar-group-commit",
    ) -> None:
        super().__init__(name, on_error)
        self._flush = flush
        self._timeout_s = sync_flush_timeout_ms / 1000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._requests: collections.deque[tuple[int, float, FlushCallback]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._flushed_offset = 0
        """Highest flushed offset the loop has been told about (loop thread only)."""
        self._failed = False
        self.flush_rounds = 0
        """Rounds that advanced the flushed offset (statistics)."""
        self.open_files_retries = OpenFilesRetries(name)
        self.latency_observer: FlushLatencyObserver | None = None
        """Told the duration of each round that advanced the flushed offset (loop thread; metrics)."""

    def start_on(self, loop: asyncio.AbstractEventLoop, flushed_offset: int) -> None:
        """Bind to ``loop`` (where waiters live) and start the thread; ``flushed_offset`` is already
        durable."""
        self._loop = loop
        self._flushed_offset = flushed_offset
        self.start()

    # -- loop thread -----------------------------------------------------------------------------------------

    def submit(self, next_offset: int) -> asyncio.Future[PutStatus]:
        """A future resolved with PUT_OK once an fdatasync covers ``next_offset`` (the end of the record),
        with FLUSH_DISK_TIMEOUT after ``sync_flush_timeout_ms``, or UNKNOWN_ERROR after a failed flush. Loop
        thread only.
        """
        loop = self._started_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        if self._failed:
            future.set_result(PutStatus.UNKNOWN_ERROR)
        elif next_offset <= self._flushed_offset:
            future.set_result(PutStatus.PUT_OK)
        else:
            self._enqueue(loop, next_offset, functools.partial(_resolve, future))
        return future

    def submit_callback(self, next_offset: int, callback: FlushCallback) -> None:
        """:meth:`submit` without a future: ``callback(status)`` runs once on the loop thread, never before this
        returns (an offset already flushed is answered with ``call_soon``). Callbacks run in submission order,
        so in commit log offset order. Loop thread only."""
        loop = self._started_loop()
        if self._failed:
            loop.call_soon(callback, PutStatus.UNKNOWN_ERROR)
        elif next_offset <= self._flushed_offset:
            loop.call_soon(callback, PutStatus.PUT_OK)
        else:
            self._enqueue(loop, next_offset, callback)

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            raise RuntimeError("group commit service not started")
        return loop

    def _enqueue(self, loop: asyncio.AbstractEventLoop, next_offset: int, callback: FlushCallback) -> None:
        deadline = loop.time() + self._timeout_s
        self._requests.append((next_offset, deadline, callback))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        self.wakeup()

    def _on_flushed(self, flushed_offset: int, seconds: float = -1.0) -> None:
        observer = self.latency_observer
        if seconds >= 0 and observer is not None:
            observer(seconds)
        if flushed_offset > self._flushed_offset:
            self._flushed_offset = flushed_offset
        requests = self._requests
        while requests and requests[0][0] <= flushed_offset:
            _call(requests.popleft()[2], PutStatus.PUT_OK)

    def _expire(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        requests = self._requests
        while requests and requests[0][1] <= now:
            _call(requests.popleft()[2], PutStatus.FLUSH_DISK_TIMEOUT)
        self._timer = loop.call_at(requests[0][1], self._expire) if requests else None

    def _on_failed(self) -> None:
        self._failed = True
        self._fail_all(PutStatus.UNKNOWN_ERROR)

    def _fail_all(self, status: PutStatus) -> None:
        while self._requests:
            _call(self._requests.popleft()[2], status)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def finish(self, flushed_offset: int) -> None:
        """At close, on the loop thread after the final flush: release covered waiters, fail the rest with
        SERVICE_NOT_AVAILABLE (nothing is left uncovered after a successful final flush)."""
        self._on_flushed(flushed_offset)
        self._fail_all(PutStatus.SERVICE_NOT_AVAILABLE)

    @property
    def pending(self) -> int:
        """Waiters not resolved yet."""
        return len(self._requests)

    # -- flush thread ----------------------------------------------------------------------------------------

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(callback, *args)

    def run(self) -> None:
        posted = self._flushed_offset  # durable at start: an idle first round is not a round that synced
        while not self._stopped.is_set():
            self._wakeup.wait(GROUP_COMMIT_WAIT_S)
            self._wakeup.clear()
            started = time.perf_counter()
            try:
                flushed = self._flush()
            except Exception as exc:  # any failure: nothing more may be acknowledged as durable
                if self.open_files_retries.retry(exc):
                    self._stopped.wait(GROUP_COMMIT_WAIT_S)  # waiters wait for the retry, or time out
                    continue
                log.error("group commit: fdatasync failed, refusing further writes", exc_info=True)
                self._on_error(exc)  # first: the store refuses writes before any waiter learns of the failure
                self._post(self._on_failed)
                return
            if flushed != posted:  # synced by us, or by another flusher (checkpoint round, close)
                self.flush_rounds += 1
                posted = flushed
                self._post(self._on_flushed, flushed, time.perf_counter() - started)


class PeriodicFlushService(ServiceThread):
    """Calls ``action(least_pages)`` every ``interval_ms`` and with ``least_pages=0`` ("thorough") at least
    every ``thorough_interval_ms`` (RocketMQ ``FlushRealTimeService`` / ``FlushConsumeQueueService``). An
    OSError from the action (any exception) is logged and reported to ``on_error``, and the service stops,
    except a transient error (EMFILE / ENFILE / ENOMEM), retried at the next round (:class:`OpenFilesRetries`).
    """

    def __init__(
        self,
        name: str,
        action: Callable[[int], object],
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_error: Callable[[BaseException], None],
    ) -> None:
        super().__init__(name, on_error)
        self._action = action
        self._interval_s = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough_interval_s = thorough_interval_ms / 1000
        self.flush_rounds = 0
        self.open_files_retries = OpenFilesRetries(name)

    def run(self) -> None:
        last_thorough = time.monotonic()
        while not self._stopped.is_set():
            self._stopped.wait(self._interval_s)
            if self._stopped.is_set():
                return
            least_pages = self._least_pages
            now = time.monotonic()
            thorough = now - last_thorough >= self._thorough_interval_s
            if thorough:
                least_pages = 0
            try:
                self._action(least_pages)
            except Exception as exc:  # any failure but too many open files: the store stops accepting writes
                if self.open_files_retries.retry(exc):
                    continue  # a thorough round stays due
                log.error("%s: flush failed, refusing further writes", self.name, exc_info=True)
                self._on_error(exc)
                return
            if thorough:
                last_thorough = now
            self.flush_rounds += 1
