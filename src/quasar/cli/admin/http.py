"""The HTTP side of ``quasar admin``: one ``httpx.Client`` per invocation on the broker's admin REST API.

:class:`AdminSettings` holds what the ``admin`` group's options give (``--admin-url``, ``--auth-token``, TLS
files); :class:`AdminClient` sends requests with ``Authorization: Bearer <token>`` and follows a cluster's
``307`` redirects to the topic's owning broker itself, keeping the credentials (httpx drops
``Authorization`` on a redirect to another origin; ``pulsar-admin`` keeps it, as every broker of a cluster
shares the same authentication). Errors become :class:`AdminApiError` (the server's ``{"reason"}``, exit 1)
or :class:`AdminUnreachableError` (nothing answered, exit 1), both ``click.ClickException``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import click
import httpx

__all__ = [
    "DEFAULT_ADMIN_URL",
    "MAX_REDIRECTS",
    "AdminApiError",
    "AdminClient",
    "AdminSettings",
    "AdminUnreachableError",
]

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
MAX_REDIRECTS = 5
"""Redirect hops followed per request (a cluster redirects once, to the topic's owner)."""

_REDIRECTS = frozenset({301, 302, 307, 308})  # the broker sends 307; the method and body are kept
_NO_BODY: Any = object()


class AdminApiError(click.ClickException):
    """The admin API answered ``status`` >= 400; ``reason`` is its ``{"reason": ...}`` (or the body's text)."""

    def __init__(self, method: str, path: str, status: int, reason: str) -> None:
        super().__init__(f"{method} {path} answered {status}: {reason}")
        self.status = status
        self.reason = reason


class AdminUnreachableError(click.ClickException):
    """No HTTP answer from the admin URL (refused, timed out, TLS handshake failed)."""


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """Connection settings of ``quasar admin`` (Pulsar's ``client.conf`` names in snake_case).

    ``admin_url``: base URL of any broker's admin API (``http://`` or ``https://``); ``auth_token``: a JWT
    sent as ``Authorization: Bearer``; ``tls_trust_certs_file``: PEM file of the CAs to trust (default: the
    system's); ``tls_cert_file`` / ``tls_key_file``: client certificate and key (PEM) for brokers that
    authenticate clients by TLS; ``tls_allow_insecure_connection``: accept any server certificate;
    ``timeout_s``: seconds per request (connect, read and write each)."""

    admin_url: str = DEFAULT_ADMIN_URL
    auth_token: str | None = None
    tls_trust_certs_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_allow_insecure_connection: bool = False
    timeout_s: float = 30.0

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for ``https://`` admin URLs; raises click.UsageError for a key without a
        certificate and click.ClickException for files that cannot be loaded."""
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise click.UsageError("--tls-cert-file and --tls-key-file go together")
        try:
            context = ssl.create_default_context(cafile=self.tls_trust_certs_file)
            if self.tls_cert_file and self.tls_key_file:
                context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise click.ClickException(f"cannot load the TLS files: {exc}") from None
        if self.tls_allow_insecure_connection:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def reason_of(response: httpx.Response) -> str:
    """Pulsar's error text: the JSON body's ``reason`` (or ``message``), else the body text, else the
    HTTP reason phrase."""
    text = response.text.strip()
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("reason", "message"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return text[:500] if text else response.reason_phrase


class AdminClient:
    """Requests to one admin API (``settings.admin_url``); close it (or use it as a context manager)."""

    def __init__(self, settings: AdminSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        """``transport``: httpx's (default: HTTP over the network; tests pass ``httpx.MockTransport``)."""
        self.settings = settings
        headers = {"User-Agent": "quasar-admin"}
        if settings.auth_token:
            headers["Authorization"] = f"Bearer {settings.auth_token}"
        tls = settings.admin_url.lower().startswith("https://") or any(
            (settings.tls_trust_certs_file, settings.tls_cert_file, settings.tls_allow_insecure_connection)
        )
        self._http = httpx.Client(
            headers=headers,
            timeout=settings.timeout_s,
            follow_redirects=False,
            verify=settings.ssl_context() if tls else True,
            transport=transport,
        )

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def url(self, path: str) -> str:
        """``path`` (``/admin/v2/...``) on the admin URL; an absolute URL is kept as it is."""
        if path.startswith(("http://", "https://")):
            return path
        return self.settings.admin_url.rstrip("/") + path

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = _NO_BODY,
        params: Mapping[str, str | int] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        """Send ``method path`` (``body`` as JSON, or raw ``content``), following redirects up to
        :data:`MAX_REDIRECTS` hops with the same method, body and credentials. Returns the final 2xx
        response; raises AdminApiError for an answer >= 400 (or too many redirects), AdminUnreachableError
        when nothing answers."""
        url = self.url(path)
        kwargs: dict[str, Any] = {"params": params}
        if body is not _NO_BODY:
            kwargs["json"] = body
        elif content is not None:
            kwargs["content"] = content
        for _ in range(MAX_REDIRECTS + 1):
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                detail = str(exc) or type(exc).__name__
                raise AdminUnreachableError(f"cannot reach the admin API at {url}: {detail}") from None
            if response.status_code in _REDIRECTS and "location" in response.headers:
                url = urljoin(str(response.url), response.headers["location"])
                kwargs["params"] = None  # the Location carries the query
                continue
            if response.status_code >= 400:
                raise AdminApiError(method, path, response.status_code, reason_of(response))
            return response
        raise AdminApiError(method, path, response.status_code, f"more than {MAX_REDIRECTS} redirects")

    def get_json(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        """The decoded JSON of ``GET path`` (None for an empty answer such as 204)."""
        return _json_of(self.request("GET", path, params=params))

    def send(self, method: str, path: str, body: Any = _NO_BODY, **params: str | int) -> Any:
        """``method path`` with a JSON ``body``; the decoded JSON answer, or None when it has none."""
        return _json_of(self.request(method, path, body=body, params=params or None))


def _json_of(response: httpx.Response) -> Any:
    """The decoded JSON body (None when empty); click.ClickException when the body is not JSON (the URL
    is not a Pulsar admin API)."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise click.ClickException(
            f"{response.request.method} {response.url} answered {response.status_code} with a body that is not"
            f" JSON (is --admin-url a broker's admin API?): {response.text[:200]!r}"
        ) from None
