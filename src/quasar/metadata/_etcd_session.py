"""The connection and the session of one :class:`~quasar.metadata.etcd.EtcdMetadataStore`.

:class:`EtcdConnection` holds one ``aetcd.Client`` per endpoint and runs every RPC through :meth:`~EtcdConnection.call`:
a bounded timeout, the next endpoint when one refuses the connection, and every aetcd / gRPC error turned into a
:class:`~quasar.metadata.errors.MetadataStoreError` subclass (:class:`MetadataStoreUnavailableError` naming the
endpoints tried when etcd cannot be reached). It also tracks reachability: the first call that cannot reach etcd
reports CONNECTION_LOST, the first one answered after that RECONNECTED.

:class:`LeaseSession` is the session (Pulsar's etcd backend: one lease per session): a lease granted at open,
kept alive by an owned task every TTL/3, revoked at close. The session is lost when etcd answers a keep-alive
with TTL 0 (the lease expired or was revoked) or when no keep-alive was answered for a whole TTL (counted from
the sending of the last answered one, so the store gives up no later than etcd can expire the lease). Then the
store reports SESSION_LOST, refuses ephemeral puts, and as soon as etcd answers revokes the old lease (so its
ephemeral keys are gone even if etcd never expired it, e.g. it was paused) and grants a new one:
SESSION_REESTABLISHED. Owners re-create their ephemeral paths then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aetcd
import grpc
from aetcd import rpc

from quasar.metadata.errors import (
    MetadataStoreClosedError,
    MetadataStoreError,
    MetadataStoreUnavailableError,
)
from quasar.metadata.port import SessionEvent

__all__ = ["FAILURES", "EtcdConnection", "LeaseSession", "failure_kind", "finish_call", "parse_endpoint"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: gRPC channel options: reconnect quickly after etcd comes back (gRPC's default backoff grows to 120 s), and
#: find a dead connection under a long-lived watch by HTTP/2 pings (etcd refuses pings more often than 5 s).
#: (Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the minimum connect timeout, 20 s by default; set
#: low, a connection attempt on a loaded machine fails before etcd's SETTINGS frame arrives.)
CHANNEL_OPTIONS: dict[str, int] = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.http2.max_pings_without_data": 0,
    # a keys-only listing of a large tree may pass gRPC's default 4 MiB
    "grpc.max_receive_message_length": 256 * 1024 * 1024,
}

#: What an aetcd or gRPC call may raise besides CancelledError (aetcd wraps most gRPC errors in ClientError
#: subclasses; the streams this package drives itself raise grpc.aio.AioRpcError).
FAILURES = (aetcd.ClientError, grpc.RpcError, grpc.aio.BaseError, OSError, TimeoutError)
_FAILURES = FAILURES


def failure_kind(exc: BaseException) -> str:
    """``"refused"`` (etcd not reachable: UNAVAILABLE), ``"timeout"`` (no answer in time) or ``"failed"``
    (etcd answered with an error, or a local failure)."""
    if isinstance(exc, aetcd.ConnectionFailedError):
        return "refused"
    if isinstance(exc, aetcd.ConnectionTimeoutError | aetcd.WatchTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        if code == grpc.StatusCode.UNAVAILABLE:
            return "refused"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "timeout"
    return "failed"


async def finish_call(call: Any) -> None:
    """Cancel a gRPC stream call if it is still running and wait (briefly) for its final status, so none of
    its completions is left for the event loop after the caller returns (gRPC's asyncio poller drops the
    events queued behind one whose loop is closed: a later loop could then wait for ever)."""
    if not call.done():
        call.cancel()
    with contextlib.suppress(*FAILURES, asyncio.CancelledError):
        await asyncio.wait_for(call.code(), 1.0)


async def keep_alive_once(client: Any, lease_id: int) -> int:
    """Send one keep-alive for ``lease_id`` on a stream of its own and return the TTL etcd answers (0: the
    lease is gone). The stream is read to its end (etcd ends it after our half-close) before returning, so
    nothing of it is left for the event loop (aetcd's ``refresh_lease`` leaves it open)."""
    await client.connect()
    call = client.leasestub.LeaseKeepAlive(metadata=client.metadata)
    try:
        await call.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
        await call.done_writing()
        reply = await call.read()
        ttl = 0 if reply is grpc.aio.EOF else int(reply.TTL)
        for _ in range(16):  # etcd answers one reply per request: EOF comes next
            if await call.read() is grpc.aio.EOF:
                break
        await call.code()
        return ttl
    finally:
        await finish_call(call)


def parse_endpoint(text: str) -> tuple[str, int]:
    """``"host:port"`` / ``"[v6]:port"`` / ``"host"`` (port 2379) as ``(host, port)``; ValueError otherwise."""
    text = text.strip()
    host, port = text, "2379"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"not an etcd endpoint: {text!r}")
        port = rest[1:] or port
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an etcd endpoint is host:port with a port in 1..65535, got {text!r}")
    return host, int(port)


class EtcdConnection:
    """One aetcd client per endpoint; see the module docstring. ``on_reachable(bool)`` is called (on the event
    loop) when reachability changes."""

    def __init__(
        self,
        endpoints: Sequence[tuple[str, int]],
        *,
        timeout_s: float,
        on_reachable: Callable[[bool], None],
    ) -> None:
        self.endpoints = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in endpoints]
        self.timeout_s = timeout_s
        self._clients: list[Any] = [
            aetcd.Client(host, port, timeout=timeout_s, options=CHANNEL_OPTIONS) for host, port in endpoints
        ]
        self._current = 0
        self._on_reachable = on_reachable
        self.reachable = True
        self.closed = False

    @property
    def client(self) -> Any:
        """The aetcd client of the endpoint in use."""
        return self._clients[self._current]

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._current]

    def _set_reachable(self, reachable: bool) -> None:
        if reachable != self.reachable and not self.closed:
            self.reachable = reachable
            self._on_reachable(reachable)

    def failed(self, *, rotate: bool) -> None:
        """Record that etcd could not be reached outside :meth:`call` (the watch stream broke)."""
        if rotate:
            self._current = (self._current + 1) % len(self._clients)
        self._set_reachable(False)

    def answered(self) -> None:
        """Record that etcd answered outside :meth:`call`."""
        self._set_reachable(True)

    def _check_open(self) -> None:
        if self.closed:
            raise MetadataStoreClosedError("etcd metadata store is closed")

    async def call(
        self, what: str, fn: Callable[[Any], Awaitable[T]], *, timeout_s: float | None = None
    ) -> T:
        """``await fn(client)`` on the endpoint in use, within ``timeout_s`` (default: the operation timeout),
        trying the next endpoint when one refuses the connection.

        Raises:
            MetadataStoreUnavailableError: no endpoint accepted the call, or the one asked did not answer in
                time (then a write may or may not have been applied).
            MetadataStoreClosedError: the store was closed (before or during the call).
            MetadataStoreError: etcd refused the request (its message says why).
        """
        self._check_open()
        budget = self.timeout_s if timeout_s is None else timeout_s
        refused: list[str] = []
        count = len(self._clients)
        for step in range(count):
            index = (self._current + step) % count
            endpoint = self.endpoints[index]
            try:
                result = await asyncio.wait_for(fn(self._clients[index]), budget)
            except _FAILURES as exc:
                self._check_open()
                kind = failure_kind(exc)
                if kind == "refused":  # not connected / connection refused: try the next endpoint
                    refused.append(f"{endpoint} ({_detail(exc)})")
                    continue
                if kind == "timeout":
                    self._current = (index + 1) % count  # the next call asks another member first
                    self._set_reachable(False)
                    raise MetadataStoreUnavailableError(
                        f"etcd {what}: no answer from {endpoint} within {budget:g} s (endpoints "
                        f"{', '.join(self.endpoints)}); a write may or may not have been applied"
                    ) from exc
                self._set_reachable(True)  # etcd answered, with an error
                raise MetadataStoreError(f"etcd {what} failed at {endpoint}: {_detail(exc)}") from exc
            self._current = index
            self._set_reachable(True)
            return result
        self._check_open()
        self._set_reachable(False)
        raise MetadataStoreUnavailableError(f"etcd {what}: no endpoint reachable, tried {'; '.join(refused)}")

    async def close(self) -> None:
        """Close every client (in-flight calls fail with :class:`MetadataStoreClosedError`). Idempotent."""
        self.closed = True
        for client in self._clients:
            try:
                await asyncio.wait_for(client.close(), self.timeout_s)
            except FAILURES as exc:
                log.debug("closing the etcd client: %s", exc)


def _detail(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class LeaseSession:
    """The lease of one store session and its keep-alive task; see the module docstring.

    Args:
        conn: the store's connection.
        ttl_s: requested lease TTL in whole seconds (etcd may raise it to its minimum, 2 s by default).
        emit: called on the event loop with SESSION_LOST / SESSION_REESTABLISHED.
    """

    def __init__(self, conn: EtcdConnection, ttl_s: int, emit: Callable[[SessionEvent], None]) -> None:
        self._conn = conn
        self.ttl_s = ttl_s
        self._emit = emit
        self.lease_id: int | None = None
        self.lost = False
        self._refreshed_at = 0.0  # monotonic time the last answered keep-alive (or grant) was sent
        self._failing = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        """Grant the lease and start the keep-alive task."""
        await self._grant()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="quasar-etcd-keepalive")

    def lease_for_ephemeral(self) -> int:
        """The lease to attach an ephemeral key to; raises :class:`MetadataStoreError` while the session is lost."""
        if self.lost or self.lease_id is None:
            raise MetadataStoreError(
                "the etcd session (lease) was lost: ephemeral paths can be created again after SESSION_REESTABLISHED"
            )
        return self.lease_id

    def check_now(self) -> None:
        """Send a keep-alive at once (a put found the lease gone)."""
        self._wake.set()

    async def _grant(self) -> None:
        sent = time.monotonic()
        lease = await self._conn.call("lease grant", lambda client: client.lease(self.ttl_s))
        self.lease_id = int(lease.id)
        self.ttl_s = max(1, int(lease.ttl))
        self._refreshed_at = sent

    @property
    def _interval_s(self) -> float:
        healthy = self.ttl_s / 3
        return min(healthy, 0.5) if self._failing or self.lost else healthy

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                if self.lost:
                    await self._reestablish()
                else:
                    await self._refresh()
            except MetadataStoreClosedError:
                return
            except MetadataStoreUnavailableError as exc:  # counted by _refresh; retried at the next tick
                self._failing = True
                log.debug("etcd session keep-alive: %s", exc)
            except MetadataStoreError as exc:  # etcd answered with an error: try again at the next tick
                self._failing = True
                log.warning("etcd session keep-alive: %s", exc)

    async def _refresh(self) -> None:
        lease_id = self.lease_id
        if lease_id is None:  # only while lost, and then _reestablish runs instead
            return
        deadline = self._refreshed_at + self.ttl_s
        sent = time.monotonic()
        budget = max(0.05, min(self._conn.timeout_s, deadline - sent))
        try:
            ttl = await self._conn.call(
                "lease keep-alive", lambda client: keep_alive_once(client, lease_id), timeout_s=budget
            )
        except MetadataStoreUnavailableError as exc:
            self._failing = True
            if time.monotonic() >= deadline:
                self._declare_lost(f"no keep-alive answered for {self.ttl_s} s ({exc})")
            return
        self._failing = False
        if ttl <= 0:
            self._declare_lost("etcd says the lease expired or was revoked")
            self._wake.set()  # re-establish at once
        else:
            self._refreshed_at = sent

    def _declare_lost(self, reason: str) -> None:
        self.lost = True
        log.warning("etcd session lost (lease %s): %s", self.lease_id, reason)
        self._emit(SessionEvent.SESSION_LOST)

    async def _reestablish(self) -> None:
        old = self.lease_id
        if old is not None:
            try:  # its keys go now, even if etcd never expired it (it was paused, or our clock ran ahead)
                await self._conn.call("lease revoke", lambda client: client.revoke_lease(old))
            except MetadataStoreUnavailableError:
                self._failing = True
                return
            except MetadataStoreError as exc:  # "requested lease not found": already expired
                log.debug("revoking lost lease %s: %s", old, exc)
            self.lease_id = None
        await self._grant()
        self.lost = False
        self._failing = False
        log.info("etcd session re-established with lease %s", self.lease_id)
        self._emit(SessionEvent.SESSION_REESTABLISHED)

    async def close(self) -> None:
        """Stop the keep-alive task and revoke the lease (so the session's ephemeral keys vanish at once); when
        etcd cannot be reached the lease expires after its TTL instead."""
        task, self._task = self._task, None
        if (
            task is not None
        ):  # let a keep-alive in flight finish (a cancelled gRPC stream leaves events behind)
            self._stopping = True
            self._wake.set()
            await asyncio.wait({task}, timeout=self._conn.timeout_s)
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        lease_id, self.lease_id = self.lease_id, None
        if lease_id is None or self._conn.closed:
            return
        try:
            await self._conn.call("lease revoke", lambda client: client.revoke_lease(lease_id))
        except MetadataStoreError as exc:
            log.warning("closing the etcd store: lease %s not revoked (%s); it expires in %s s", lease_id, exc,
                        self.ttl_s)  # fmt: skip
