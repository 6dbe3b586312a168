"""The client's TLS context for ``pulsar+ssl://`` connections, with the official client's options (reference
security.md §1; C++ ``ClientConfiguration``):

* ``tls_trust_certs_file_path``: PEM CA bundle the broker's certificate must chain to (None = the system's
  default CAs);
* ``tls_allow_insecure_connection`` (false): accept any broker certificate (no chain, no host name check);
* ``tls_validate_hostname`` (false, the official Python client's default): the certificate's SAN must match
  the host connected to (CVE-2022-33682: turn it on; Quasar's test certificates carry the right SANs);
* a client certificate is presented in the handshake: an :class:`~quasar.client.auth.Authentication`'s
  (``AuthenticationTLS``), else ``tls_certificate_file_path`` / ``tls_private_key_file_path``.

Standard ``ssl`` module only (the client imports ``quasar.protocol`` alone, DESIGN.md).
"""

from __future__ import annotations

import ssl

from .auth import Authentication

__all__ = ["client_ssl_context"]


def client_ssl_context(
    *,
    trust_certs_file_path: str | None,
    allow_insecure_connection: bool,
    validate_hostname: bool,
    authentication: Authentication | None,
    certificate: tuple[str, str] | None = None,
) -> ssl.SSLContext:
    """A client ``ssl.SSLContext`` for broker connections, reading the files now.

    Raises:
        ValueError: the trust file or the client certificate / key cannot be read or used (the message names
            the option and the file).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        if trust_certs_file_path:
            try:
                context.load_verify_locations(cafile=trust_certs_file_path)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(
                    f"cannot load tls_trust_certs_file_path {trust_certs_file_path!r}: {exc}"
                ) from None
        else:
            context.load_default_certs()
        context.check_hostname = validate_hostname
    if authentication is not None and authentication.tls_certificate() is not None:
        certificate = authentication.tls_certificate()
    if certificate is not None:
        try:
            context.load_cert_chain(*certificate)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot load the client certificate {certificate[0]!r} with key {certificate[1]!r}: {exc}"
            ) from None
    return context
