"""The client certificate of an admin request that came over the HTTPS listener (for TLS authentication)."""

from __future__ import annotations

from aiohttp import web

from quasar.security import peer_certificate_der as _from_ssl_object

__all__ = ["peer_certificate_der"]


def peer_certificate_der(request: web.Request) -> bytes | None:
    """DER bytes of the client certificate the HTTPS handshake of ``request``'s connection verified; None for a
    request on the plain HTTP listener, or when the client gave no certificate (or none was asked for: see
    ``quasar.security.tls`` for when the broker asks)."""
    transport = request.transport
    if transport is None:  # the connection is already gone
        return None
    return _from_ssl_object(transport.get_extra_info("ssl_object"))
