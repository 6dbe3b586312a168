"""Requests to the name servers of a ``nameserver://`` service URL (RocketMQ's remoting protocol, sans-IO codec
in :mod:`quasar.protocol.remoting`).

* :class:`NameServerCnx`: one connection (an ``asyncio.Protocol``, no reader task); requests are matched to
  responses by opaque; when it ends every pending request fails with :class:`ConnectionClosedError`, and a
  malformed frame from the name server closes it.
* :class:`NameServers`: the list of name servers. A request goes to the one that answered last, and on a
  connection failure or timeout to the next one, each attempt bounded by ``request_timeout_s`` (3 s, RocketMQ's
  ``mqClientApiTimeout``); connections are reopened on demand. When none answers: :class:`ConnectError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from typing import cast

from quasar.protocol import NEED_DATA, RemoteProtocolError
from quasar.protocol.remoting import RemotingCommand, RemotingDecoder, encode_remoting_command

from .errors import ConnectError, ConnectionClosedError

__all__ = ["NameServerCnx", "NameServers"]

log = logging.getLogger("quasar.client")

_OPAQUE_MAX = 2**31 - 1


class NameServerCnx(asyncio.Protocol):
    """One connection to a name server; create it with :meth:`connect`."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._decoder = RemotingDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> NameServerCnx:
        """Open a connection. Raises OSError when it cannot be made."""
        loop = asyncio.get_running_loop()
        _, cnx = await loop.create_connection(lambda: cls(address), address[0], address[1])
        return cnx

    @property
    def is_closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's TCPTransport has asyncio.Transport's methods without subclassing it)
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        host, port = self.address
        error = ConnectionClosedError(
            f"connection to name server {host}:{port} lost" + (f": {exc}" if exc else "")
        )
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        if not self._closed.done():
            self._closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.receive_data(data)
            while (command := self._decoder.next_command()) is not NEED_DATA:
                future = self._pending.pop(command.opaque, None)
                if future is not None and command.is_response and not future.done():
                    future.set_result(command)
        except RemoteProtocolError as exc:
            log.warning("closing the connection to name server %s:%d: %s", *self.address, exc)
            self.close()

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        """Send ``command`` and wait (unbounded: the caller bounds it) for the response with its opaque.

        Raises:
            ConnectionClosedError: the connection is or gets closed.
        """
        if self._transport is None or self._transport.is_closing():
            raise ConnectionClosedError(
                f"connection to name server {self.address[0]}:{self.address[1]} is closed"
            )
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[command.opaque] = future
        try:
            self._transport.write(encode_remoting_command(command))
            return await future
        finally:
            self._pending.pop(command.opaque, None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)


class NameServers:
    """The name servers of a service URL, tried in turn.

    Args:
        addresses: ``(host, port)`` of each name server, in the URL's order.
        request_timeout_s: bound of one attempt at one name server, connect included, seconds.
    """

    def __init__(self, addresses: list[tuple[str, int]], *, request_timeout_s: float = 3.0) -> None:
        if not addresses:
            raise ValueError("at least one name server is needed")
        self.addresses = list(addresses)
        self.request_timeout_s = request_timeout_s
        self._current = 0
        self._opaques = itertools.count(1)
        self._connections: dict[tuple[str, int], NameServerCnx] = {}
        self._locks = {address: asyncio.Lock() for address in self.addresses}
        self._closed = False

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        """Send ``command`` (a fresh opaque is set) to the current name server, then to the next ones on failure.

        Raises:
            ConnectError: no name server answered (the message lists each one's failure).
        """
        failures = []
        count = len(self.addresses)
        for step in range(count):
            index = (self._current + step) % count
            address = self.addresses[index]
            command = dataclasses.replace(command, opaque=next(self._opaques) % _OPAQUE_MAX)
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    cnx = await self._connection(address)
                    response = await cnx.request(command)
            except (OSError, ConnectionClosedError, TimeoutError) as exc:
                reason = (
                    f"no response within {self.request_timeout_s} s" if isinstance(exc, TimeoutError) else exc
                )
                failures.append(f"{address[0]}:{address[1]}: {reason}")
                continue
            self._current = index
            return response
        if self._closed:
            raise ConnectError("the client is closed")
        raise ConnectError("no name server answered: " + "; ".join(failures))

    async def _connection(self, address: tuple[str, int]) -> NameServerCnx:
        if self._closed:
            raise ConnectionClosedError("the client is closed")
        async with self._locks[address]:
            cnx = self._connections.get(address)
            if cnx is None or cnx.is_closed:
                cnx = self._connections[address] = await NameServerCnx.connect(address)
            return cnx

    async def aclose(self) -> None:
        """Close every connection. Safe to call twice."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for cnx in connections:
            cnx.close()
        for cnx in connections:
            await cnx.wait_closed()
