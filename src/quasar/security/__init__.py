"""Transport security shared by the broker's listeners: TLS server contexts built with the standard ``ssl``
module from Pulsar's TLS settings, reloaded when the certificate files change (:mod:`quasar.security.tls`).

Imports only :mod:`quasar.errors` and the standard library (an import-linter contract in pyproject.toml).
"""

from quasar.security.errors import SecurityError, TlsConfigError
from quasar.security.tls import (
    ReloadingServerContext,
    TlsSettings,
    build_server_context,
    peer_certificate_der,
)

__all__ = [
    "ReloadingServerContext",
    "SecurityError",
    "TlsConfigError",
    "TlsSettings",
    "build_server_context",
    "peer_certificate_der",
]
