"""The name server's asyncio service: the remoting protocol on one port, a read-only HTTP view on another.

:class:`NameServer` (RocketMQ ``NamesrvController`` + ``DefaultRequestProcessor``) serves REGISTER_BROKER,
UNREGISTER_BROKER, QUERY_DATA_VERSION, GET_ROUTEINFO_BY_TOPIC and GET_BROKER_CLUSTER_INFO from one
:class:`~quasar.nameserver.routes.RouteInfoManager` (shapes in :mod:`.messages` and :mod:`.routes`).

* Each connection is an ``asyncio.Protocol`` driving a sans-IO
  :class:`~quasar.protocol.remoting.RemotingDecoder`; requests are answered in order, synchronously (the tables
  are in memory). When the peer stops reading, reading from it pauses until its responses drained.
* A request whose header or body has the wrong shape gets SYSTEM_ERROR with the reason in ``remark``; an
  unknown request code gets REQUEST_CODE_NOT_SUPPORTED; the connection stays. A malformed or oversized frame
  (above ``max_frame_size``, 16 MiB by default) closes that connection only, with the reason logged.
* No configuration is accepted over the wire: there is no UPDATE_NAMESRV_CONFIG / PUT_KV_CONFIG (the
  CVE-2023-33246 / CVE-2023-37582 lesson: unauthenticated configuration updates led to remote code execution).
  Every setting comes from the command line.
* When a connection closes, every broker registered on it is removed at once (RocketMQ
  ``BrokerHousekeepingService``); an owned task scans for silent brokers every ``scan_interval_s`` (10 s).
* :meth:`NameServer.stop` closes the listeners and every connection, and cancels and awaits the owned tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import cast

from aiohttp import web

from quasar.protocol import NEED_DATA, RemoteProtocolError
from quasar.protocol.remoting import (
    DEFAULT_MAX_REMOTING_FRAME_SIZE,
    RemotingCommand,
    RemotingDecoder,
    RequestCode,
    ResponseCode,
    decode_json_object,
    encode_json,
    encode_remoting_command,
)

from .errors import InvalidRequestError
from .http_view import build_http_app
from .messages import DataVersion, parse_broker_key, parse_register_broker, parse_topic
from .routes import RouteInfoManager

__all__ = ["NameServer"]

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, "_Connection"], RemotingCommand]


class NameServer:
    """A name server: the route port and the HTTP view over one :class:`RouteInfoManager`.

    Args:
        host: address to bind (both ports).
        port: remoting port; 0 = any free port (RocketMQ's default is 9876).
        http_port: HTTP view port; 0 = any free port; None = no HTTP view.
        routes: the route tables; a new :class:`RouteInfoManager` by default.
        scan_interval_s: seconds between scans for silent brokers (RocketMQ 4.x: 10).
        max_frame_size: largest accepted remoting frame, bytes (16 MiB).

    Raises:
        ValueError: a port outside 0..65535, a non-positive interval or a frame limit below 1 KiB.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 9876,
        http_port: int | None = 9877,
        routes: RouteInfoManager | None = None,
        scan_interval_s: float = 10.0,
        max_frame_size: int = DEFAULT_MAX_REMOTING_FRAME_SIZE,
    ) -> None:
        for name, value in (("port", port), ("http_port", http_port if http_port is not None else 0)):
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in 0..65535, got {value}")
        if scan_interval_s <= 0:
            raise ValueError(f"scan_interval_s must be > 0, got {scan_interval_s}")
        if max_frame_size < 1024:
            raise ValueError(f"max_frame_size must be at least 1024 bytes, got {max_frame_size}")
        self.host = host
        self.routes = routes if routes is not None else RouteInfoManager()
        self.scan_interval_s = scan_interval_s
        self.max_frame_size = max_frame_size
        self._port = port
        self._http_port = http_port
        self._server: asyncio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._connections: set[_Connection] = set()
        self._handlers: dict[int, Handler] = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_cluster_info,
        }

    # ------------------------------------------------------------------------------------------ life --

    @property
    def port(self) -> int:
        """The bound remoting port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the name server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def address(self) -> str:
        """``host:port`` of the remoting listener: what brokers and ``nameserver://`` URLs name."""
        return f"{self.host}:{self.port}"

    @property
    def http_url(self) -> str | None:
        """``http://host:port`` of the HTTP view, or None without one."""
        if self._runner is None:
            return None
        return f"http://{self.host}:{self._runner.addresses[0][1]}"

    @property
    def connection_count(self) -> int:
        """Open remoting connections."""
        return len(self._connections)

    async def start(self) -> None:
        """Bind both listeners and start the scan task.

        Raises:
            OSError: a port could not be bound (nothing is left running).
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self._port, reuse_address=True
        )
        try:
            if self._http_port is not None:
                self._runner = web.AppRunner(build_http_app(self.routes), access_log=None)
                await self._runner.setup()
                await web.TCPSite(self._runner, self.host, self._http_port, reuse_address=True).start()
        except BaseException:
            await self.stop()
            raise
        self._scan_task = loop.create_task(self._scan_loop(), name="nameserver-scan-not-active-broker")
        log.info("name server listening on %s (HTTP view %s)", self.address, self.http_url or "off")

    async def stop(self) -> None:
        """Close the listeners and every connection; cancel and await the scan task. Safe to call twice."""
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
            self._scan_task = None
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                self.routes.scan_not_active_broker()
            except Exception:  # a bug in one scan must not end the expiry of later ones
                log.exception("scan for inactive brokers failed")

    # -------------------------------------------------------------------------------------- requests --

    def handle(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand | None:
        """The response to ``command`` (None for a oneway request or a stray response)."""
        if command.is_response:
            log.debug("ignoring a response (code %d) sent to the name server", command.code)
            return None
        handler = self._handlers.get(command.code)
        if handler is None:
            response = command.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {command.code} is not supported",
            )
        else:
            try:
                response = handler(command, connection)
            except (InvalidRequestError, RemoteProtocolError) as exc:
                log.warning("bad request (code %d) from %s: %s", command.code, connection.peer, exc)
                response = command.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
            except Exception:  # one request's bug answers SYSTEM_ERROR, never kills the server
                log.exception("request (code %d) from %s failed", command.code, connection.peer)
                response = command.response(ResponseCode.SYSTEM_ERROR, remark="internal error")
        return None if command.is_oneway else response

    def _register_broker(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand:
        result = self.routes.register_broker(parse_register_broker(command), connection)
        ext = {}
        if result.master_addr:
            ext = {"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr}
        return command.response(ext_fields=ext)

    def _unregister_broker(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand:
        self.routes.unregister_broker(parse_broker_key(command))
        return command.response()

    def _query_data_version(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand:
        key = parse_broker_key(command)
        version = DataVersion.from_json(decode_json_object(command.body, "QUERY_DATA_VERSION body"))
        changed, held = self.routes.query_data_version(key, version, connection)
        ext = {"changed": "true" if changed else "false"}
        if key.broker_id != 0:
            master, ha = self.routes.master_of(key.broker_name)
            if master:
                ext.update(masterAddr=master, haServerAddr=ha)
        body = encode_json(held.to_json()) if held is not None else b""
        return command.response(ext_fields=ext, body=body)

    def _get_route(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand:
        topic = parse_topic(command)
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return command.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        return command.response(body=encode_json(route))

    def _get_cluster_info(self, command: RemotingCommand, connection: _Connection) -> RemotingCommand:
        return command.response(body=encode_json(self.routes.get_all_cluster_info()))


class _Connection(asyncio.Protocol):
    """One remoting connection to the name server (its identity is the channel of the brokers it carries)."""

    def __init__(self, server: NameServer) -> None:
        self.server = server
        self.peer = "?"
        self._decoder = RemotingDecoder(server.max_frame_size)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's TCPTransport has asyncio.Transport's methods without subclassing it)
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.server._connections.add(self)  # noqa: SLF001 - the server's own connection registry

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)  # noqa: SLF001 - the server's own connection registry
        self._transport = None
        self.server.routes.on_channel_destroy(self)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        out: list[bytes] = []
        try:
            self._decoder.receive_data(data)
            while (command := self._decoder.next_command()) is not NEED_DATA:
                response = self.server.handle(command, self)
                if response is not None:
                    out.append(encode_remoting_command(response))
        except RemoteProtocolError as exc:
            log.warning("closing the connection from %s: %s", self.peer, exc)
            if out:
                transport.writelines(out)
            transport.close()
            return
        if out:
            transport.writelines(out)

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
