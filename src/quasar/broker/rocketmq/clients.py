"""The client registry: one :class:`ClientRecord` per RocketMQ client id (the ``x-mq-client-id`` header,
``host@pid@index@time`` for the official clients), as the proxy keys every per-client state by it.

A record holds what the client said in Telemetry (client type, its ``Settings``, a consumer's group), its
Telemetry stream (:class:`TelemetrySession`, so the broker can push commands such as transaction checks), and
the broker-side resources made for it (``resources``: e.g. the producers SendMessage attached to topic
partitions; anything with a ``close()``). The registry owns them: a record goes, its resources closed, on
NotifyClientTermination, when its Telemetry stream ends, and when the client has not called for
``idle_timeout_s`` (RocketMQ's channel expiry; the sweeper task is owned by the registry, started by
:meth:`start` and cancelled by :meth:`stop`). At most ``max_clients`` records exist (TOO_MANY_REQUESTS past
it), so a flood of made-up client ids cannot grow the broker without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from quasar.broker.rocketmq.status import Code, RocketMQError

__all__ = ["ClientRecord", "ClientRegistry", "ClientResource", "TelemetrySession"]

log = logging.getLogger(__name__)

DEFAULT_MAX_CLIENTS = 10_000
MAX_STREAMS_PER_CLIENT = 4
"""Telemetry streams one client id may hold open at once (the py client opens one per endpoint object it
knows, the access point and the route's, often the same broker); past it the oldest is ended."""


class ClientResource(Protocol):
    """Something made for one client that must be released when the client goes."""

    def close(self) -> None: ...


class TelemetrySession:
    """One client's open Telemetry stream: :meth:`send` writes a ``TelemetryCommand`` to it (writes are
    serialized: gRPC allows one outstanding write per stream); :meth:`receive` reads the next command;
    :meth:`end` ends the stream from the broker's side (the client went, or opened more than
    :data:`MAX_STREAMS_PER_CLIENT` streams: the oldest ends), so one client id cannot pile streams up."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._lock = asyncio.Lock()
        self.closed = False
        self._ended: asyncio.Future[None] | None = None  # made by the first receive (it needs the loop)

    def end(self) -> None:
        """Mark the stream closed and wake its pending :meth:`receive` (which returns None)."""
        self.closed = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    async def receive(self, commands: AsyncIterator[Any], timeout_s: float | None) -> Any:
        """The next command of ``commands`` (the stream's request iterator); None when the client ended the
        stream or :meth:`end` was called. Raises TimeoutError when none came within ``timeout_s`` (None =
        wait as long as it takes)."""
        if self.closed:
            return None
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        read = asyncio.ensure_future(anext(commands, None))
        try:
            done, _ = await asyncio.wait({read, self._ended}, timeout=timeout_s, return_when=FIRST_COMPLETED)
        finally:
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await read
        if read in done:
            return read.result()
        if self._ended.done():
            return None
        raise TimeoutError(f"no Telemetry command within {timeout_s} s")

    async def send(self, command: Any) -> bool:
        """Write ``command``; False when the stream is closed (nothing written)."""
        if self.closed:
            return False
        async with self._lock:
            try:
                await self._context.write(command)
            except Exception as exc:  # noqa: BLE001 - the stream went away; the reader side cleans up
                log.debug("telemetry write failed: %s", exc)
                self.closed = True
                return False
        return True


@dataclass(slots=True, eq=False)
class ClientRecord:
    """One client: ``client_type`` (``ClientType`` value, 0 until Telemetry said), ``settings`` (its last
    ``Settings``, None until then), ``group`` (a consumer's group, "" otherwise), ``telemetry`` (its newest
    open stream, the one commands are pushed on), ``streams`` (every open one, oldest first), ``resources``
    (by name), ``last_seen`` (``time.monotonic()`` of its last call)."""

    client_id: str
    client_type: int = 0
    settings: Any = None
    group: str = ""
    telemetry: TelemetrySession | None = None
    streams: list[TelemetrySession] = field(default_factory=list)
    resources: dict[str, ClientResource] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)

    def close_resources(self) -> None:
        resources, self.resources = self.resources, {}
        for resource in resources.values():
            try:
                resource.close()
            except Exception:  # one failing resource must not keep the others open
                log.exception("closing a resource of RocketMQ client %s failed", self.client_id)


class ClientRegistry:
    """The clients of one RocketMQ listener, by client id (module docstring)."""

    def __init__(
        self,
        *,
        idle_timeout_s: float = 120.0,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clients: dict[str, ClientRecord] = {}
        self.idle_timeout_s = idle_timeout_s
        self.max_clients = max_clients
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._clients

    def get(self, client_id: str) -> ClientRecord | None:
        return self._clients.get(client_id)

    def touch(self, client_id: str) -> ClientRecord:
        """The record of ``client_id`` (created when new), marked seen now. Raises RocketMQError
        TOO_MANY_REQUESTS when ``max_clients`` records exist already."""
        record = self._clients.get(client_id)
        if record is None:
            if len(self._clients) >= self.max_clients:
                self.expire()
                if len(self._clients) >= self.max_clients:
                    raise RocketMQError(
                        Code.TOO_MANY_REQUESTS, f"too many RocketMQ clients ({self.max_clients}); retry later"
                    )
            record = ClientRecord(client_id)
            self._clients[client_id] = record
        record.last_seen = self._clock()
        return record

    def remove(self, client_id: str, reason: str) -> ClientRecord | None:
        """Drop ``client_id``: close its resources and end its Telemetry stream. Returns the record, None when
        there was none."""
        record = self._clients.pop(client_id, None)
        if record is not None:
            log.debug("RocketMQ client %s removed: %s", client_id, reason)
            for stream in record.streams:
                stream.end()
            record.close_resources()
        return record

    def expire(self) -> int:
        """Drop the clients idle for ``idle_timeout_s`` whose Telemetry stream is not open; returns how many."""
        deadline = self._clock() - self.idle_timeout_s
        idle = [
            r.client_id
            for r in self._clients.values()
            if r.last_seen < deadline and (r.telemetry is None or r.telemetry.closed)
        ]
        for client_id in idle:
            self.remove(client_id, "idle")
        return len(idle)

    def records(self) -> list[ClientRecord]:
        return list(self._clients.values())

    # ------------------------------------------------------------------ owned sweeper
    def start(self) -> None:
        """Start the owned task dropping idle clients (every ``idle_timeout_s / 4``, at least 1 s)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="rocketmq-client-sweeper")

    async def _sweep(self) -> None:
        period = max(self.idle_timeout_s / 4, 1.0)
        while True:
            await asyncio.sleep(period)
            try:
                self.expire()
            except Exception:  # the owned task must not die silently
                log.exception("expiring idle RocketMQ clients failed")

    async def stop(self) -> None:
        """Cancel the sweeper and drop every client (their resources closed)."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        for client_id in list(self._clients):
            self.remove(client_id, "listener stopped")
