"""Authentication: credentials in, a role out, chosen by Pulsar's method name (reference/security.md §2).

:class:`AuthenticationService` holds the configured providers (``quasar.security.providers``) by method name
and ``anonymous_user_role``. It follows Pulsar's ``AuthenticationService``:

- binary protocol (CONNECT, AUTH_RESPONSE): the provider named by ``auth_method_name`` authenticates
  ``auth_data``; a name no provider has (``"none"`` included, what the official client sends without
  authentication) gets ``anonymous_user_role`` when it is set, else :class:`AuthenticationError`
  ("No anonymous role, and no authentication provider configured"). A provider that refuses the credentials
  is final: there is no fall-back to the anonymous role.
- HTTP (``Authorization: Bearer <jwt>`` -> ``token``, ``Authorization: Basic <base64 user:password>`` ->
  ``basic``, else the TLS client certificate -> ``tls``): with an ``X-Pulsar-Auth-Method-Name`` header only
  that provider is tried; otherwise each configured provider in turn, the first success wins; when all fail
  the anonymous role applies if set (Pulsar ``authenticateHttpRequest``), else the last refusal is raised.

Every result carries the role and the credential's expiry (``expires_at``: epoch seconds, None = never), which
the broker uses to refresh binary connections (AUTH_CHALLENGE).
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from quasar.errors import QuasarError

__all__ = [
    "AuthenticationData",
    "AuthenticationError",
    "AuthenticationProvider",
    "AuthenticationResult",
    "AuthenticationService",
]

ANONYMOUS_METHOD = "none"


class AuthenticationError(QuasarError):
    """Credentials missing, malformed, expired or refused; the message says why (never the secret itself).
    The broker answers ServerError AuthenticationError (binary) or HTTP 401."""


@dataclass(frozen=True, slots=True)
class AuthenticationData:
    """What a client presented: ``data`` (CONNECT/AUTH_RESPONSE ``auth_data``: a compact JWT for ``token``,
    ``user:password`` for ``basic``, empty for ``tls``) and the DER client certificate of a TLS connection."""

    data: bytes = b""
    peer_certificate_der: bytes | None = None


@dataclass(frozen=True, slots=True)
class AuthenticationResult:
    """An authenticated principal: its ``role``, the ``method`` that authenticated it, and ``expires_at``
    (epoch seconds, None = the credential does not expire)."""

    role: str
    method: str
    expires_at: float | None = None

    def is_expired(self, now: float | None = None) -> bool:
        """Whether the credential has expired at ``now`` (epoch seconds; default: the current time)."""
        return self.expires_at is not None and (time.time() if now is None else now) >= self.expires_at


class AuthenticationProvider(Protocol):
    """One authentication method (Pulsar ``AuthenticationProvider``)."""

    @property
    def method_name(self) -> str:
        """Pulsar's method name: ``token``, ``basic`` or ``tls``."""
        ...

    def authenticate(self, credentials: AuthenticationData) -> AuthenticationResult:
        """The principal of ``credentials``; raises :class:`AuthenticationError` when refused."""
        ...


class AuthenticationService:
    """The configured providers by method name, and the anonymous role (module docstring).

    Args:
        providers: the providers, at most one per method name.
        anonymous_user_role: the role of clients without (known) credentials; "" = none (refused).

    Raises:
        ValueError: two providers with the same method name.
    """

    def __init__(self, providers: Sequence[AuthenticationProvider], anonymous_user_role: str = "") -> None:
        by_name: dict[str, AuthenticationProvider] = {}
        for provider in providers:
            if provider.method_name in by_name:
                raise ValueError(f"two authentication providers for method {provider.method_name!r}")
            by_name[provider.method_name] = provider
        self.providers: Mapping[str, AuthenticationProvider] = by_name
        self.anonymous_user_role = anonymous_user_role

    def authenticate(self, method: str, credentials: AuthenticationData) -> AuthenticationResult:
        """Binary protocol: authenticate with the provider of ``method`` (module docstring). Raises
        :class:`AuthenticationError`."""
        provider = self.providers.get(method)
        if provider is None:
            return self._anonymous(method)
        return provider.authenticate(credentials)

    def _anonymous(self, method: str) -> AuthenticationResult:
        if self.anonymous_user_role:
            return AuthenticationResult(self.anonymous_user_role, ANONYMOUS_METHOD)
        if method and method != ANONYMOUS_METHOD:
            raise AuthenticationError(
                f"No authentication provider for method {method!r}, and no anonymous role"
            )
        raise AuthenticationError("No anonymous role, and no authentication provider configured")

    def authenticate_http(
        self,
        authorization: str | None,
        peer_certificate_der: bytes | None = None,
        method_header: str | None = None,
    ) -> AuthenticationResult:
        """HTTP: authenticate the ``Authorization`` header value and/or the client certificate (module
        docstring). Raises :class:`AuthenticationError`."""
        candidates = [method_header] if method_header else list(self.providers)
        refusals: dict[str, AuthenticationError] = {}
        for method in candidates:
            provider = self.providers.get(method)
            if provider is None:
                refusals[method] = AuthenticationError(f"No authentication provider for method {method!r}")
                continue
            try:
                credentials = _http_credentials(method, authorization, peer_certificate_der)
                return provider.authenticate(credentials)
            except AuthenticationError as exc:
                refusals[method] = exc
        if self.anonymous_user_role:
            return AuthenticationResult(self.anonymous_user_role, ANONYMOUS_METHOD)
        # report the refusal of the method the request meant (its Authorization scheme), not the last tried
        scheme = (authorization or "").strip().partition(" ")[0].lower()
        meant = {"bearer": "token", "basic": "basic"}.get(scheme, "tls" if peer_certificate_der else "")
        if method_header:
            meant = method_header
        if meant in refusals:
            raise refusals[meant]
        raise AuthenticationError("no credentials (Authorization: Bearer / Basic, or a client certificate)")


def _http_credentials(method: str, authorization: str | None, cert: bytes | None) -> AuthenticationData:
    """The provider ``method``'s credentials from an HTTP request; raises AuthenticationError when absent."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    scheme = scheme.lower()
    if method == "token":
        if scheme != "bearer" or not value.strip():
            raise AuthenticationError("Authentication required: no 'Authorization: Bearer' token")
        return AuthenticationData(value.strip().encode())
    if method == "basic":
        if scheme != "basic" or not value.strip():
            raise AuthenticationError("Authentication required: no 'Authorization: Basic' credentials")
        try:
            return AuthenticationData(base64.b64decode(value.strip(), validate=True))
        except (binascii.Error, ValueError):
            raise AuthenticationError("malformed 'Authorization: Basic' value (not base64)") from None
    return AuthenticationData(b"", cert)
