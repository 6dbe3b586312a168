"""Security building blocks of the broker, free of Quasar's other layers (they import only ``quasar.errors``,
the standard library and third-party libraries): TLS server contexts built with the standard ``ssl`` module from
Pulsar's TLS settings and reloaded when the certificate files change (:mod:`quasar.security.tls`);
authentication providers chosen by Pulsar's method names (``token``, ``basic``, ``tls``) and the service that
picks them; the authorization service (super users, tenant admins, namespace, topic and subscription
permissions); key and token helpers for ``quasar tokens``.

Follows Pulsar's broker (reference/security.md §1-3). The broker composes these in ``quasar.broker``.
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
