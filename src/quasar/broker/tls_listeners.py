"""The broker's TLS listeners: the Pulsar binary protocol on ``pulsar+ssl://`` (``broker_service_port_tls``)
and the admin REST API on ``https://`` (``web_service_port_tls``), both TLS from the first byte and served by
the same ``ServerCnx`` / admin application as the plain listeners, with one
:class:`~quasar.security.ReloadingServerContext`. This object owns the certificate refresh task (a check every
``tls_cert_refresh_check_duration_sec``) and cancels it in :meth:`TlsListeners.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from aiohttp import web

from quasar.broker.config import BrokerConfig
from quasar.security import ReloadingServerContext

__all__ = ["TlsListeners"]


class TlsListeners:
    """The configured TLS listeners of one broker (either may be off: its port setting is None).

    Args:
        config: the broker's settings; the certificate, key and trust files are read now.

    Raises:
        TlsConfigError: a file cannot be used (see :func:`quasar.security.build_server_context`).
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.context = ReloadingServerContext(config.tls_settings())
        self.port = 0  # bound ports (0 while the listener is off or not bound yet)
        self.admin_port = 0
        self._socket: socket.socket | None = None
        self._admin_socket: socket.socket | None = None
        self._server: asyncio.base_events.Server | None = None
        self._refresh: asyncio.Task[None] | None = None

    def bind(self, bind: Callable[[str, int], socket.socket]) -> None:
        """Bind the configured listeners on ``config.host`` with ``bind(host, port)`` (not serving yet)."""
        config = self.config
        if config.broker_service_port_tls is not None:
            self._socket = bind(config.host, config.broker_service_port_tls)
            self.port = self._socket.getsockname()[1]
        if config.web_service_port_tls is not None:
            self._admin_socket = bind(config.host, config.web_service_port_tls)
            self.admin_port = self._admin_socket.getsockname()[1]

    async def serve(self, protocol_factory: Callable[[], asyncio.Protocol]) -> None:
        """Serve the binary protocol on the ``pulsar+ssl://`` listener (when on) with ``protocol_factory`` and
        start the certificate refresh task."""
        if self._socket is not None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                protocol_factory, sock=self._socket, ssl=self.context.context
            )
        self._refresh = asyncio.create_task(
            self.context.run(self.config.tls_cert_refresh_check_duration_sec), name="broker-tls-cert-refresh"
        )

    async def serve_admin(self, runner: web.AppRunner) -> None:
        """Serve ``runner``'s admin application on the ``https://`` listener (when on)."""
        if self._admin_socket is not None:
            await web.SockSite(runner, self._admin_socket, ssl_context=self.context.context).start()

    async def close(self) -> None:
        """Cancel the refresh task and stop accepting on the binary TLS listener (the HTTPS one closes with
        the admin runner); :meth:`wait_closed` waits for the listener to be gone."""
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
            self._refresh = None
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()
