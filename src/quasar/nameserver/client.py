"""NameServerClient: requests to one name server, matched to responses by opaque (RocketMQ
``NettyRemotingClient.invokeSync`` for one address), used by the broker's registrar and by tests.

* One TCP connection, opened on the first request and again after it is lost (reconnect on demand); concurrent
  requests share it. Each request (connect included) is bounded by ``timeout_s`` ->
  :class:`~quasar.nameserver.errors.NameServerTimeoutError`.
* When the connection ends, every pending request fails with
  :class:`~quasar.nameserver.errors.NameServerConnectionError`; a malformed frame from the server closes it.
* The connection is an ``asyncio.Protocol``: no reader task, nothing left running after :meth:`aclose`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Mapping
from typing import Any, cast

from quasar.protocol import NEED_DATA, RemoteProtocolError
from quasar.protocol.remoting import (
    DEFAULT_MAX_REMOTING_FRAME_SIZE,
    RemotingCommand,
    RemotingDecoder,
    ResponseCode,
    decode_json_object,
    encode_remoting_command,
)

from .errors import NameServerConnectionError, NameServerResponseError, NameServerTimeoutError
from .messages import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    BrokerIdentity,
    DataVersion,
    cluster_info_request,
    query_data_version_request,
    register_broker_request,
    route_request,
    unregister_broker_request,
)

__all__ = ["NameServerClient", "split_address"]

log = logging.getLogger(__name__)

_OPAQUE_MAX = 2**31 - 1


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)`` (IPv6 hosts in brackets).

    Raises:
        ValueError: no port, or a port outside 1..65535.
    """
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"a name server address must be 'host:port', got {address!r}")
    return host.strip("[]"), int(port_text)


class NameServerClient:
    """Requests to the name server at ``address``.

    Args:
        address: ``host:port``.
        timeout_s: default bound of one request, connect included, seconds.
        max_frame_size: largest accepted response frame, bytes (16 MiB).

    Raises:
        ValueError: a bad address or a non-positive timeout.
    """

    def __init__(
        self, address: str, *, timeout_s: float = 3.0, max_frame_size: int = DEFAULT_MAX_REMOTING_FRAME_SIZE
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.address = address
        self.host, self.port = split_address(address)
        self.timeout_s = timeout_s
        self.max_frame_size = max_frame_size
        self._opaques = itertools.count(1)
        self._connection: _ClientConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._closed = False

    @property
    def connected(self) -> bool:
        """True while a connection is open."""
        return self._connection is not None and not self._connection.closed

    async def request(self, command: RemotingCommand, *, timeout_s: float | None = None) -> RemotingCommand:
        """Send ``command`` (its opaque is replaced by a fresh one) and return the response.

        Raises:
            NameServerConnectionError: the connection could not be made or was lost.
            NameServerTimeoutError: no response within ``timeout_s`` (default: the client's).
        """
        if self._closed:
            raise NameServerConnectionError(f"client of name server {self.address} is closed")
        opaque = next(self._opaques) % _OPAQUE_MAX
        command = dataclasses.replace(command, opaque=opaque)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):
                connection = await self._connect()
                return await connection.request(command)
        except TimeoutError:
            raise NameServerTimeoutError(
                f"no response from name server {self.address} within {timeout} s (request code {command.code})"
            ) from None

    async def _connect(self) -> _ClientConnection:
        async with self._connect_lock:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            loop = asyncio.get_running_loop()
            try:
                _, connection = await loop.create_connection(
                    lambda: _ClientConnection(self.address, self.max_frame_size), self.host, self.port
                )
            except OSError as exc:
                raise NameServerConnectionError(
                    f"cannot connect to name server {self.address}: {exc}"
                ) from None
            self._connection = connection
            return connection

    async def aclose(self) -> None:
        """Close the connection (pending requests fail with NameServerConnectionError). Safe to call twice."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
            await connection.wait_closed()

    # ------------------------------------------------------------------------------- typed requests --

    async def register_broker(
        self,
        identity: BrokerIdentity,
        topic_configs: Mapping[str, Mapping[str, Any]],
        version: DataVersion,
        *,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        timeout_s: float | None = None,
    ) -> tuple[str, str]:
        """REGISTER_BROKER; returns ``(master addr, master HA addr)`` (both "" unless ``identity`` is a slave
        whose group has a master).

        Raises:
            NameServerResponseError / NameServerConnectionError / NameServerTimeoutError.
        """
        command = register_broker_request(
            0, identity, topic_configs, version, heartbeat_timeout_ms=heartbeat_timeout_ms
        )
        response = _checked(await self.request(command, timeout_s=timeout_s))
        return response.ext_fields.get("masterAddr", ""), response.ext_fields.get("haServerAddr", "")

    async def query_data_version(
        self, identity: BrokerIdentity, version: DataVersion, *, timeout_s: float | None = None
    ) -> tuple[bool, str, str]:
        """QUERY_DATA_VERSION; returns ``(changed, master addr, master HA addr)``. An unchanged answer is a
        heartbeat; ``changed`` means a full REGISTER_BROKER is due.

        Raises:
            NameServerResponseError / NameServerConnectionError / NameServerTimeoutError.
        """
        response = _checked(
            await self.request(query_data_version_request(0, identity, version), timeout_s=timeout_s)
        )
        ext = response.ext_fields
        return ext.get("changed", "true") != "false", ext.get("masterAddr", ""), ext.get("haServerAddr", "")

    async def unregister_broker(self, identity: BrokerIdentity, *, timeout_s: float | None = None) -> None:
        """UNREGISTER_BROKER.

        Raises:
            NameServerResponseError / NameServerConnectionError / NameServerTimeoutError.
        """
        _checked(await self.request(unregister_broker_request(0, identity), timeout_s=timeout_s))

    async def get_route(self, topic: str, *, timeout_s: float | None = None) -> dict[str, Any] | None:
        """GET_ROUTEINFO_BY_TOPIC: the TopicRouteData (shape in :mod:`quasar.nameserver.routes`), or None when
        the name server has no route (TOPIC_NOT_EXIST).

        Raises:
            NameServerResponseError / NameServerConnectionError / NameServerTimeoutError;
            RemoteProtocolError: the body is not a JSON object.
        """
        response = await self.request(route_request(0, topic), timeout_s=timeout_s)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        return decode_json_object(_checked(response).body, "TopicRouteData")

    async def get_cluster_info(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO: the ClusterInfo ``{"brokerAddrTable", "clusterAddrTable"}``.

        Raises:
            NameServerResponseError / NameServerConnectionError / NameServerTimeoutError;
            RemoteProtocolError: the body is not a JSON object.
        """
        response = _checked(await self.request(cluster_info_request(0), timeout_s=timeout_s))
        return decode_json_object(response.body, "ClusterInfo")


def _checked(response: RemotingCommand) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise NameServerResponseError(response.code, response.remark or "")
    return response


class _ClientConnection(asyncio.Protocol):
    """One connection: pending requests by opaque, failed together when it ends."""

    def __init__(self, address: str, max_frame_size: int) -> None:
        self.address = address
        self._decoder = RemotingDecoder(max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()

    @property
    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's TCPTransport has asyncio.Transport's methods without subclassing it)
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        error = NameServerConnectionError(
            f"connection to name server {self.address} lost" + (f": {exc}" if exc else "")
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
                if future is None or not command.is_response:
                    log.debug(
                        "name server %s sent an unexpected command (code %d)", self.address, command.code
                    )
                elif not future.done():
                    future.set_result(command)
        except RemoteProtocolError as exc:
            log.warning("closing the connection to name server %s: %s", self.address, exc)
            self.close()

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        if self._transport is None or self._transport.is_closing():
            raise NameServerConnectionError(f"connection to name server {self.address} is closed")
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
