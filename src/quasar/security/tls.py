"""TLS for the broker's listeners, with the standard ``ssl`` module and Pulsar's settings (broker.conf names in
snake_case; reference/security.md §1).

* :class:`TlsSettings` holds ``tls_certificate_file_path`` / ``tls_key_file_path`` (PEM certificate chain and
  private key), ``tls_trust_certs_file_path`` (PEM CA bundle that client certificates must chain to),
  ``tls_allow_insecure_connection``, ``tls_require_trusted_client_cert_on_connect``, ``tls_protocols`` and
  ``tls_ciphers``; it checks the values (not the files) when built.
* :func:`build_server_context` turns them into a server ``ssl.SSLContext``, reading the files.
* :class:`ReloadingServerContext` is what a listener is given: its ``context`` serves every handshake with the
  newest certificate, key and trust files. :meth:`ReloadingServerContext.check` rebuilds the context when a
  file's modification time, size or inode changed (Pulsar's ``tlsCertRefreshCheckDurationSec`` check, run by
  an owned task of the broker through :meth:`ReloadingServerContext.run`); a rebuild that fails (a file
  missing, half written, a key that does not match) keeps the previous context and logs why, and is tried
  again at the next check. Connections already open keep their session.

Client certificates (Pulsar's Netty server behaviour as far as ``ssl`` allows):

=========================================  ===============================================================
settings                                   handshake
=========================================  ===============================================================
require_trusted_client_cert_on_connect     a client certificate signed by a CA of the trust file is required
trust file, not insecure                   a client certificate is asked for, optional; one that is given
                                           must chain to the trust file (else the handshake fails)
no trust file, or allow_insecure           no client certificate is asked for
=========================================  ===============================================================

Pulsar with ``tlsAllowInsecureConnection`` accepts an untrusted client certificate and still reads it; Python's
``ssl`` module verifies every certificate it asks for and has no verify callback, so here insecure mode does not
ask for one (TLS authentication then needs a trust file and insecure mode off).

``tls_protocols`` takes Java's names (``TLSv1.3``, ``TLSv1.2``, ``TLSv1.1``, ``TLSv1``) and sets the lowest and
highest version allowed. ``tls_ciphers`` takes OpenSSL cipher names (``ECDHE-RSA-AES128-GCM-SHA256``), which
restrict TLS 1.2 and older; Java's IANA names (``TLS_ECDHE_RSA_WITH_...``) select nothing in OpenSSL and are
refused with that explanation; TLS 1.3 suites stay OpenSSL's defaults (``ssl`` cannot restrict them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from dataclasses import dataclass

from quasar.security.errors import TlsConfigError

__all__ = [
    "TLS_PROTOCOLS",
    "ReloadingServerContext",
    "TlsSettings",
    "build_server_context",
    "peer_certificate_der",
]

log = logging.getLogger(__name__)

#: Java's protocol names (Pulsar's ``tlsProtocols`` values) -> ``ssl.TLSVersion``.
TLS_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    """Pulsar's TLS settings of one broker (see the module docstring for what each does).

    Raises:
        TlsConfigError: no certificate or key path, an unknown protocol name, an empty cipher name, or
            ``require_trusted_client_cert_on_connect`` without a trust file.
    """

    certificate_file_path: str
    key_file_path: str
    trust_certs_file_path: str = ""
    allow_insecure_connection: bool = False
    require_trusted_client_cert_on_connect: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.certificate_file_path or not self.key_file_path:
            raise TlsConfigError(
                "a TLS listener needs tls_certificate_file_path and tls_key_file_path (PEM certificate chain"
                " and private key)"
            )
        unknown = [p for p in self.protocols if p not in TLS_PROTOCOLS]
        if unknown:
            raise TlsConfigError(f"tls_protocols: unknown {unknown}; known: {sorted(TLS_PROTOCOLS)}")
        if any(not isinstance(c, str) or not c.strip() for c in self.ciphers):
            raise TlsConfigError(
                f"tls_ciphers: every entry must be a non-empty cipher name, got {self.ciphers}"
            )
        if self.require_trusted_client_cert_on_connect and not self.trust_certs_file_path:
            raise TlsConfigError(
                "tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path (the CA bundle"
                " client certificates must chain to)"
            )

    @property
    def files(self) -> tuple[str, ...]:
        """The files the context is built from (certificate, key, and the trust file when set)."""
        paths = (self.certificate_file_path, self.key_file_path, self.trust_certs_file_path)
        return tuple(p for p in paths if p)


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server ``ssl.SSLContext`` for ``settings``, reading the certificate, key and trust files now.

    Raises:
        TlsConfigError: a file is missing or unreadable, not PEM, the key does not match the certificate, or
            ``tls_ciphers`` / ``tls_protocols`` select nothing; the message names the setting and the file.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if settings.protocols:
        versions = sorted(TLS_PROTOCOLS[p] for p in settings.protocols)
        try:
            context.minimum_version, context.maximum_version = versions[0], versions[-1]
        except (ValueError, ssl.SSLError) as exc:
            raise TlsConfigError(f"tls_protocols {list(settings.protocols)}: {exc}") from None
    if settings.ciphers:
        for name in settings.ciphers:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
            except ssl.SSLError:
                raise TlsConfigError(
                    f"tls_ciphers: {name!r} selects no cipher; give OpenSSL names such as"
                    " 'ECDHE-RSA-AES128-GCM-SHA256' (Java's IANA names are not OpenSSL's)"
                ) from None
        context.set_ciphers(":".join(settings.ciphers))
    try:
        context.load_cert_chain(settings.certificate_file_path, settings.key_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot load tls_certificate_file_path {settings.certificate_file_path!r} with tls_key_file_path"
            f" {settings.key_file_path!r}: {_reason(exc)}"
        ) from None
    if settings.trust_certs_file_path:
        try:
            context.load_verify_locations(cafile=settings.trust_certs_file_path)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot load tls_trust_certs_file_path {settings.trust_certs_file_path!r}: {_reason(exc)}"
            ) from None
    if settings.require_trusted_client_cert_on_connect:
        context.verify_mode = ssl.CERT_REQUIRED
    elif settings.trust_certs_file_path and not settings.allow_insecure_connection:
        context.verify_mode = ssl.CERT_OPTIONAL
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def peer_certificate_der(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> bytes | None:
    """The DER bytes of the certificate the peer presented and the handshake verified, or None (a plain
    connection, or no certificate asked for or given). ``ssl_object`` is a transport's
    ``get_extra_info("ssl_object")``."""
    if ssl_object is None:
        return None
    try:
        return ssl_object.getpeercert(binary_form=True)
    except ValueError:  # the handshake has not completed
        return None


def _file_state(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class ReloadingServerContext:
    """A server TLS context whose certificate, key and trust files are re-read when they change.

    ``context`` is the ``ssl.SSLContext`` to hand to ``create_server``: its SNI callback (called on every
    handshake, with or without SNI) moves the handshake onto the newest context built by :meth:`check`.

    Args:
        settings: the TLS settings; the files are read now.

    Raises:
        TlsConfigError: as :func:`build_server_context` (at start a bad file is a configuration error).
    """

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._states = self._file_states()
        self.context = build_server_context(settings)
        self.context.sni_callback = self._select
        self._current = self.context
        self.reloads = 0  # successful reloads so far

    def _file_states(self) -> tuple[tuple[int, int, int] | None, ...]:
        return tuple(_file_state(path) for path in self.settings.files)

    def _select(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        current = self._current
        if current is not context:
            ssl_object.context = current

    def check(self) -> bool:
        """Rebuild the context if a file changed (modification time, size or inode); True when a new context
        now serves new handshakes. A failed rebuild keeps the previous context, logs the reason as a warning,
        and is retried at the next check."""
        states = self._file_states()
        if states == self._states:
            return False
        try:
            context = build_server_context(self.settings)
        except TlsConfigError as exc:
            log.warning(
                "TLS certificate files changed but cannot be reloaded; keeping the previous ones: %s", exc
            )
            return False
        self._current = context
        self._states = states
        self.reloads += 1
        log.info("TLS certificate files reloaded: %s", ", ".join(self.settings.files))
        return True

    async def run(self, interval_s: float) -> None:
        """Call :meth:`check` every ``interval_s`` seconds, forever (the owner cancels the task)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.check()
            except Exception:  # an owned task must not die silently; the next check tries again
                log.exception("checking the TLS certificate files failed")
