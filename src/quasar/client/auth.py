"""Client authentication, with the official ``pulsar`` client's class names and constructor shapes
(``pulsar.AuthenticationToken``, ``pulsar.AuthenticationBasic``, ``pulsar.AuthenticationTLS``), passed to the
client as ``authentication=``.

What goes on the wire (reference/security.md §2, pulsar-protocol.md §6.1 and §6.25; the C++ client's
``Commands::newConnect`` / ``newAuthResponse``):

* CONNECT carries ``auth_method_name`` (:attr:`Authentication.method_name`) and, when the method has command
  data, ``auth_data`` (:meth:`Authentication.auth_data`): the token itself for ``token``, ``b"user:password"``
  for ``basic``, nothing for ``tls`` (the identity is the client certificate of the TLS handshake,
  :meth:`Authentication.tls_certificate`). Without authentication CONNECT says ``"none"``.
* An AUTH_CHALLENGE from the broker (credentials about to expire; ``auth_data = "refresh"``) is answered with
  AUTH_RESPONSE carrying :meth:`Authentication.auth_data` asked again, so a token supplier is called again and
  a refreshed token goes out.

:func:`authentication_from_params` builds one of these from a plugin name and a parameter string, as the
Java client's ``authPluginClassName`` / ``authParams`` (used by the Spark connector's options).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
    "authentication_from_params",
]


class Authentication:
    """Base of the authentication methods: the method name and the credentials a connection sends."""

    method_name = "none"
    """``auth_method_name`` of CONNECT and AUTH_RESPONSE (Pulsar's provider name: ``token``, ``basic``, ``tls``)."""

    def auth_data(self) -> bytes | None:
        """The ``auth_data`` sent now (called for every CONNECT and every AUTH_CHALLENGE); None = the field is
        left out (a method whose identity travels in the TLS handshake)."""
        return None

    def tls_certificate(self) -> tuple[str, str] | None:
        """``(certificate_path, private_key_path)`` (PEM) presented in the TLS handshake, or None."""
        return None


class AuthenticationToken(Authentication):
    """Token (JWT) authentication, method ``token`` (``pulsar.AuthenticationToken``).

    Args:
        token: the token, or a function returning the current token: called for every new connection and for
            every AUTH_CHALLENGE, so a refreshed token reaches the broker before the old one expires.

    Raises:
        TypeError: ``token`` is neither a str nor callable. ValueError: an empty token.
    """

    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if isinstance(token, str):
            if not token:
                raise ValueError("token must not be empty")
        elif not callable(token):
            raise TypeError(f"token must be a str or a function returning one, got {type(token).__name__}")
        self._token = token

    def auth_data(self) -> bytes:
        """The current token, UTF-8. Raises TypeError / ValueError when the supplier returns no token."""
        token = self._token() if callable(self._token) else self._token
        if not isinstance(token, str) or not token:
            raise ValueError(f"the token supplier returned {token!r}, not a token")
        return token.encode()


class AuthenticationBasic(Authentication):
    """HTTP-basic-style authentication over the binary protocol (``pulsar.AuthenticationBasic``): ``auth_data``
    is ``b"username:password"``.

    Args:
        username / password: the credentials (the username must not contain ``:``, which separates them).
        method: the provider name the broker knows the method by (Pulsar: ``basic``).
        auth_params_string: instead of the three above, the C++ client's JSON
            ``{"username": ..., "password": ..., "method": ...}`` (method optional).

    Raises:
        TypeError: an argument is not a str. ValueError: empty username or method, ``:`` in the username, or
            an ``auth_params_string`` that is not such a JSON object.
    """

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            try:
                params = json.loads(auth_params_string)
                username, password = params["username"], params["password"]
                method = params.get("method", method)
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise ValueError(
                    'auth_params_string must be JSON {"username": ..., "password": ...[, "method": ...]}'
                ) from None
        for name, value in (("username", username), ("password", password), ("method", method)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if not username or not method:
            raise ValueError("username and method must not be empty")
        if ":" in username:
            raise ValueError("username must not contain ':' (it separates username and password)")
        self.username = username
        self._password = password
        self.method_name = method

    def auth_data(self) -> bytes:
        return f"{self.username}:{self._password}".encode()


class AuthenticationTLS(Authentication):
    """TLS client-certificate authentication, method ``tls`` (``pulsar.AuthenticationTLS``): the certificate is
    presented in the TLS handshake (a ``pulsar+ssl://`` service URL), CONNECT carries no ``auth_data``; the
    broker takes the role from the certificate's subject CN.

    Args:
        certificate_path / private_key_path: PEM files (read when the client is created).

    Raises:
        TypeError: a path is not a str / PathLike. ValueError: an empty path.
    """

    method_name = "tls"

    def __init__(self, certificate_path: str | Path, private_key_path: str | Path) -> None:
        for name, value in (("certificate_path", certificate_path), ("private_key_path", private_key_path)):
            if not isinstance(value, (str, Path)):
                raise TypeError(f"{name} must be a str or Path, got {type(value).__name__}")
            if not str(value):
                raise ValueError(f"{name} must not be empty")
        self.certificate_path = str(certificate_path)
        self.private_key_path = str(private_key_path)

    def tls_certificate(self) -> tuple[str, str]:
        return self.certificate_path, self.private_key_path


_PLUGINS = {
    "token": "token",
    "org.apache.pulsar.client.impl.auth.authenticationtoken": "token",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.authenticationbasic": "basic",
    "tls": "tls",
    "org.apache.pulsar.client.impl.auth.authenticationtls": "tls",
}


def _params(text: str) -> dict[str, str]:
    """Java's two forms of ``authParams``: a JSON object, or ``key:value,key:value``."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"authParams is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("authParams JSON must be an object")
        return {str(k): str(v) for k, v in value.items()}
    params: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if not sep:
            raise ValueError(f"authParams entry {part!r} is not key:value")
        params[key.strip()] = value.strip()
    return params


def authentication_from_params(plugin: str, params: str) -> Authentication:
    """An authentication from the Java client's ``authPluginClassName`` and ``authParams``.

    ``plugin``: ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` (or ``token``),
    ``...AuthenticationBasic`` (``basic``), ``...AuthenticationTls`` (``tls``), case-insensitive. ``params`` as
    Java reads them: token ``token:<jwt>``, ``file:///path`` (the token is read from the file at every use)
    or the bare token, or JSON ``{"token": ...}``; basic JSON ``{"userId": ..., "password": ...}`` (or
    ``userId:u,password:p``); tls ``tlsCertFile:/p,tlsKeyFile:/p`` (or JSON with those keys).

    Raises:
        ValueError: an unknown plugin or parameters it cannot use (the message names what is missing).
    """
    kind = _PLUGINS.get(plugin.strip().lower())
    if kind is None:
        raise ValueError(f"unknown authentication plugin {plugin!r}; known: {', '.join(sorted(_PLUGINS))}")
    text = params.strip()
    if kind == "token":
        if text.startswith("{"):
            text = _params(text).get("token", "")
        if text.startswith("token:"):
            text = text[len("token:") :]
        if text.startswith("file://"):
            path = Path(text[len("file://") :])
            return AuthenticationToken(lambda: path.read_text().strip())
        return AuthenticationToken(text)
    values = _params(text)
    if kind == "basic":
        if "userId" not in values or "password" not in values:
            raise ValueError("basic authParams need userId and password")
        return AuthenticationBasic(values["userId"], values["password"])
    if "tlsCertFile" not in values or "tlsKeyFile" not in values:
        raise ValueError("tls authParams need tlsCertFile and tlsKeyFile")
    return AuthenticationTLS(values["tlsCertFile"], values["tlsKeyFile"])
