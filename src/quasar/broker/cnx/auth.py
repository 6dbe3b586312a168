"""Authentication of one binary connection: CONNECT's credentials, the role kept for the connection's
permission checks, and the refresh of expiring credentials (Pulsar ``ServerCnx`` ``handleConnect``,
``handleAuthResponse``, ``refreshAuthenticationCredentials``; reference/security.md §2).

- CONNECT: with authentication on, ``auth_method_name`` picks the provider and ``auth_data`` (or the TLS client
  certificate) is authenticated; a refusal answers ERROR (request id -1) with ServerError AuthenticationError
  and Pulsar's message "Unable to authenticate" (the reason is logged, not sent) and closes the connection.
  With it off the connection has no role (nothing is checked).
- Refresh: a credential that expires (a token with ``exp``) is looked at every
  ``authentication_refresh_check_seconds``. Once expired the broker sends AUTH_CHALLENGE (``auth_data``
  ``refresh``) and waits for AUTH_RESPONSE with fresh credentials of the same method and role; a client that
  did not announce ``supports_auth_refresh``, or has not answered by the next check, is disconnected, as is one
  whose fresh credentials are refused or name another role.

The timer is owned by this object and cancelled by :meth:`ConnectionAuth.close` (called from
``connection_lost``). Nothing here runs on the SEND/MESSAGE/ACK/FLOW paths.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from quasar.protocol import commands
from quasar.protocol.enums import ServerError
from quasar.security.authentication import AuthenticationData, AuthenticationError, AuthenticationResult

if TYPE_CHECKING:
    from quasar.broker.auth import BrokerSecurity
    from quasar.protocol.decoder import Frame
    from quasar.protocol.pb import CommandConnect

__all__ = ["REFRESH", "ConnectionAuth"]

log = logging.getLogger(__name__)

REFRESH = b"refresh"
"""AUTH_CHALLENGE ``auth_data`` asking for fresh credentials (Pulsar ``AuthData.REFRESH_AUTH_DATA``)."""


class AuthPort(Protocol):
    """What the authentication of a connection needs from it."""

    @property
    def remote_address(self) -> str: ...

    @property
    def peer_certificate_der(self) -> bytes | None: ...

    @property
    def protocol_version(self) -> int: ...

    def write(self, frame: bytes) -> None: ...

    def close(self, reason: str) -> None: ...


class ConnectionAuth:
    """The authenticated principal of one connection and its refresh timer (module docstring)."""

    def __init__(self, cnx: AuthPort, security: BrokerSecurity, server_version: str) -> None:
        self._cnx = cnx
        self._security = security
        self._server_version = server_version
        self.result: AuthenticationResult | None = None
        self._supports_refresh = False
        self._pending_challenge = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role(self) -> str | None:
        """The connection's role; None when not authenticated (authentication off)."""
        return self.result.role if self.result is not None else None

    def connect(self, connect: CommandConnect) -> bool:
        """Authenticate CONNECT; False when refused (the error was answered and the connection closed)."""
        service = self._security.authentication
        if service is None:
            return True
        method = connect.auth_method_name if connect.HasField("auth_method_name") else ""
        credentials = AuthenticationData(connect.auth_data, self._cnx.peer_certificate_der)
        try:
            self.result = service.authenticate(method, credentials)
        except AuthenticationError as exc:
            self._refuse(f"Unable to authenticate: {exc}")
            return False
        self._supports_refresh = connect.feature_flags.supports_auth_refresh
        log.debug("%s authenticated as %r with %s", self._cnx.remote_address, self.role, self.result.method)
        if self.result.expires_at is not None:
            self._schedule()
        return True

    def _refuse(self, reason: str) -> None:
        """ERROR AuthenticationError with Pulsar's generic message (the reason, which may say what was wrong
        with the credentials, goes to the broker's log only), then close."""
        self._cnx.write(commands.new_error(-1, ServerError.AuthenticationError, "Unable to authenticate"))
        self._cnx.close(reason)

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._security.refresh_check_s, self._check)

    def _check(self) -> None:
        """Pulsar ``refreshAuthenticationCredentials``: challenge an expired credential, or disconnect."""
        self._timer = None
        result = self.result
        if result is None or result.expires_at is None:
            return  # refreshed with a credential that does not expire: nothing more to watch
        if not result.is_expired():
            self._schedule()
            return
        if not self._supports_refresh:
            self._cnx.close("credentials expired and the client does not support refreshing them")
            return
        if self._pending_challenge:
            self._cnx.close("credentials expired and were not refreshed in time after AUTH_CHALLENGE")
            return
        self._pending_challenge = True
        self._cnx.write(
            commands.new_auth_challenge(
                self._server_version, result.method, REFRESH, self._cnx.protocol_version
            )
        )
        self._schedule()

    def handle_auth_response(self, frame: Frame) -> None:
        """AUTH_RESPONSE: fresh credentials of the connection's method and role, or the connection closes."""
        service = self._security.authentication
        current = self.result
        if service is None or current is None or current.method not in service.providers:
            return  # no authentication, or an anonymous connection: nothing to refresh
        response = frame.command.authResponse.response
        method = response.auth_method_name or current.method
        if method != current.method:
            self._refuse(f"AUTH_RESPONSE method {method!r} differs from the connection's {current.method!r}")
            return
        try:
            fresh = service.authenticate(
                method, AuthenticationData(response.auth_data, self._cnx.peer_certificate_der)
            )
        except AuthenticationError as exc:
            self._refuse(f"Unable to refresh authentication: {exc}")
            return
        if fresh.role != current.role:
            self._refuse(
                f"Principal cannot change during an authentication refresh ({current.role} -> {fresh.role})"
            )
            return
        self.result = fresh
        self._pending_challenge = False
        log.debug("%s refreshed its credentials for role %r", self._cnx.remote_address, fresh.role)

    def close(self) -> None:
        """The connection closed: cancel the refresh timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
