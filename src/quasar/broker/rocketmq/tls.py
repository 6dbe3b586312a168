"""TLS for the RocketMQ gRPC endpoint: gRPC server credentials from the broker's TLS settings (Pulsar's names,
``quasar.security.TlsSettings``: ``tls_certificate_file_path``, ``tls_key_file_path``,
``tls_trust_certs_file_path``, ``tls_require_trusted_client_cert_on_connect``).

The RocketMQ proxy accepts TLS and plaintext on one port; gRPC's Python server cannot, so Quasar serves TLS on
its own port (``rocketmq_port_tls``), as Pulsar pairs 6650 with 6651. The credentials are gRPC's *dynamic*
ones: before each handshake gRPC asks :class:`_CertificateFetcher` for a newer configuration, which re-reads
the files only when one changed (size, mtime, inode), so a renewed certificate is served without a restart,
as the broker's other TLS listeners do. A file that cannot be read then keeps the previous configuration
(logged). ``tls_protocols`` / ``tls_ciphers`` do not apply: gRPC's TLS stack (BoringSSL) negotiates TLS 1.2+
with its own cipher list.
"""

from __future__ import annotations

import logging
import os
import threading

import grpc

from quasar.security import TlsSettings

__all__ = ["server_credentials"]

log = logging.getLogger(__name__)


def _state(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino


class _CertificateFetcher:
    """gRPC's certificate configuration fetcher (called on gRPC's threads, hence the lock)."""

    def __init__(self, settings: TlsSettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._states = self._file_states()
        self.initial = self._configuration()

    def _file_states(self) -> tuple[tuple[int, int, int] | None, ...]:
        return tuple(_state(path) for path in self._settings.files)

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        settings = self._settings
        with open(settings.key_file_path, "rb") as key, open(settings.certificate_file_path, "rb") as cert:
            pair = (key.read(), cert.read())
        roots = None
        if settings.trust_certs_file_path:
            with open(settings.trust_certs_file_path, "rb") as trust:
                roots = trust.read()
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=roots)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            states = self._file_states()
            if states == self._states:
                return None
            try:
                configuration = self._configuration()
            except OSError as exc:
                log.warning(
                    "RocketMQ TLS: cannot reload the certificate files, keeping the old ones: %s", exc
                )
                return None
            self._states = states
            log.info("RocketMQ TLS: certificate files reloaded")
            return configuration


def server_credentials(settings: TlsSettings) -> grpc.ServerCredentials:
    """gRPC server credentials serving ``settings``' certificate (reloaded when its files change), asking
    clients for a certificate chaining to the trust file when ``require_trusted_client_cert_on_connect``.
    Raises OSError when a file cannot be read now."""
    fetcher = _CertificateFetcher(settings)
    return grpc.dynamic_ssl_server_credentials(
        fetcher.initial,
        fetcher,
        require_client_authentication=settings.require_trusted_client_cert_on_connect,
    )
