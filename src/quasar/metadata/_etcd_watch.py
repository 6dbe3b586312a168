"""The watch of one :class:`~quasar.metadata.etcd.EtcdMetadataStore`: ONE etcd watch stream over the store's key
prefix, kept up by an owned task.

The stream is driven directly on aetcd's channel (``WatchStub``), not through aetcd's ``Watcher``: that one
leaves its gRPC stream to be finished after the client is closed, and gRPC's asyncio poller then drops the
completions queued behind one whose event loop is gone, which can hang a later loop. Here :meth:`PrefixWatch.close`
asks etcd to cancel the watch and lets the task read etcd's answer, so no read is pending when the stream is
cancelled; the task then waits for its final status. Only when etcd does not answer (it is down or frozen) is the
task cancelled in the middle of a read.

The watch starts at the revision after the one the store was opened at and, when the stream breaks (etcd
restarted, the connection dropped, a keep-alive ping went unanswered), is created again from the revision after
the last one delivered, so every change is delivered once and in etcd's order. Progress notifications (empty
responses from a synced watch) advance that revision too, so a quiet watch does not fall behind compaction. If
etcd compacted revisions the watch had not seen, they are skipped with a warning (their changes are lost to
the listeners, as in every etcd client).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from quasar.metadata._etcd_session import FAILURES, EtcdConnection, failure_kind, finish_call

__all__ = ["PrefixWatch"]

log = logging.getLogger(__name__)

_RETRY_S = (0.05, 1.0)  # first and longest pause before creating a broken watch again


class _Compacted(Exception):
    def __init__(self, revision: int) -> None:
        super().__init__(f"compacted up to revision {revision}")
        self.revision = revision


class PrefixWatch:
    """Calls ``deliver(event)`` (an etcd ``mvccpb.Event``: ``type`` PUT 0 / DELETE 1, ``kv``) on the event loop
    for every change of a key starting with ``prefix``, from revision ``after + 1`` on."""

    def __init__(
        self, conn: EtcdConnection, prefix: bytes, after: int, deliver: Callable[[Any], None]
    ) -> None:
        self._conn = conn
        self._prefix = prefix
        self.revision = after  # the last revision delivered (or known to hold nothing for us)
        self._deliver = deliver
        self._task: asyncio.Task[None] | None = None
        self._call: Any = None  # the stream in use, once its watch is created
        self._watch_id: int | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"quasar-etcd-watch:{self._prefix!r}"
        )

    async def close(self) -> None:
        """Stop the task (see the module docstring); the stream is finished when this returns."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        call, watch_id = self._call, self._watch_id
        if call is not None and watch_id is not None and not call.done():
            cancel = rpc.WatchRequest(cancel_request=rpc.WatchCancelRequest(watch_id=watch_id))
            try:
                await asyncio.wait_for(call.write(cancel), self._conn.timeout_s)
                await asyncio.wait({task}, timeout=self._conn.timeout_s)
            except (*FAILURES, asyncio.InvalidStateError) as exc:  # the stream may finish meanwhile
                log.debug("cancelling the etcd watch: %s", exc)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def _run(self) -> None:
        pause = _RETRY_S[0]
        while not self._stopping:
            try:
                await self._stream()
            except _Compacted as exc:
                log.warning(
                    "etcd compacted revisions %d..%d before the watch on %r saw them: their changes are not notified",
                    self.revision + 1, exc.revision - 1, self._prefix.decode(errors="replace"),
                )  # fmt: skip
                self.revision = max(self.revision, exc.revision - 1)
                continue
            except FAILURES as exc:
                if self._stopping:
                    return
                kind = failure_kind(exc)
                log.info("etcd watch on %s broke (%s: %s); resuming after revision %d", self._conn.endpoint, kind,
                         exc, self.revision)  # fmt: skip
                if kind != "failed":
                    self._conn.failed(rotate=True)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_S[1])

    async def _stream(self) -> None:
        """One stream: create the watch, deliver until the stream ends or fails (raises), finish it."""
        client = self._conn.client
        await client.connect()
        call = rpc.WatchStub(client.channel).Watch(metadata=client.metadata)
        try:
            create = rpc.WatchCreateRequest(
                key=self._prefix,
                range_end=prefix_range_end(self._prefix),
                start_revision=self.revision + 1,
                progress_notify=True,
            )
            timeout = self._conn.timeout_s
            await asyncio.wait_for(call.write(rpc.WatchRequest(create_request=create)), timeout)
            while not self._stopping:
                response = await call.read()
                if response is grpc.aio.EOF:
                    raise ConnectionError("etcd ended the watch stream")
                self._conn.answered()
                if response.compact_revision:
                    raise _Compacted(int(response.compact_revision))
                if response.canceled:
                    if self._stopping:  # etcd's answer to close(): no read is pending now
                        return
                    raise ConnectionError(
                        f"etcd cancelled the watch: {response.cancel_reason or 'no reason'}"
                    )
                if response.created:
                    self._call, self._watch_id = call, int(response.watch_id)
                if response.events:
                    for event in response.events:
                        self.revision = max(self.revision, int(event.kv.mod_revision))
                        self._deliver(event)
                elif not response.created:  # a progress notification: nothing for us up to this revision
                    self.revision = max(self.revision, int(response.header.revision))
        finally:
            self._call = self._watch_id = None
            await finish_call(call)
