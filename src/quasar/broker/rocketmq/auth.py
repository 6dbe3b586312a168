"""Authentication of RocketMQ clients against the broker's providers (issue 16's settings,
``quasar.broker.auth``), and the role every handler checks permissions with.

What a RocketMQ 5 client presents: every call carries ``authorization: MQv2-HMAC-SHA1 Credential=<ak>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(sk, x-mq-date-time)>`` (reference rocketmq-grpc.md §1),
and over TLS possibly a client certificate. The HMAC proves knowledge of ``sk`` only to a server that holds
``sk`` in clear, which none of Quasar's providers does (tokens are verified by key, htpasswd keeps hashes). So:

- ``token`` provider: the client puts its Pulsar token (a JWT) in the **access key**,
  ``Credentials(ak=<jwt>, sk=<anything>)``; the JWT is verified as a Pulsar client's would be (signature,
  expiry, audience) and its subject is the role. The signature is not checked (the token is the secret, sent as
  a Pulsar client sends it in CONNECT; use the TLS port to keep it private on the wire).
- ``tls`` provider: a call over the TLS port with a client certificate and no access key authenticates by the
  certificate (its CN is the role).
- otherwise the anonymous role when ``anonymous_user_role`` is set, else UNAUTHORIZED. ``basic`` credentials
  cannot be carried (the password never leaves the client, only its HMAC): UNAUTHORIZED with that reason.

Results are cached per credential (bounded, until the credential expires), so a JWT is verified once per client
rather than on every call. With authentication off there is no role (None) and nothing is checked, as for
Pulsar clients.
"""

from __future__ import annotations

import re
import ssl
from collections import OrderedDict
from typing import Any

from quasar.broker.auth import BrokerSecurity
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.security.authentication import (
    AuthenticationData,
    AuthenticationError,
    AuthenticationResult,
    AuthenticationService,
)

__all__ = ["RocketMQAuthenticator", "access_key"]

_CREDENTIAL = re.compile(r"Credential=([^,\s]*)")
MAX_CACHED = 4096
"""Credentials whose authentication result is kept at most (oldest dropped first)."""


def access_key(authorization: str) -> str:
    """The ``Credential=<ak>`` of an ``MQv2-HMAC-SHA1`` authorization header ("" when none)."""
    match = _CREDENTIAL.search(authorization)
    return match.group(1) if match else ""


def _peer_certificate_der(context: Any) -> bytes | None:
    try:
        pems = context.auth_context().get("x509_pem_cert")
    except Exception:  # noqa: BLE001 - a context without transport details
        return None
    if not pems:
        return None
    try:
        return ssl.PEM_cert_to_DER_cert(pems[0].decode())
    except (ValueError, UnicodeDecodeError):
        return None


class RocketMQAuthenticator:
    """The role of a RocketMQ call (module docstring); ``security`` is the broker's (read on every call, so
    the composition root may set it after this is built)."""

    def __init__(self, service: Any) -> None:
        self._service = service
        self._cache: OrderedDict[tuple[str, bytes | None], AuthenticationResult] = OrderedDict()

    @property
    def security(self) -> BrokerSecurity:
        security: BrokerSecurity = self._service.security
        return security

    def role(self, context: Any) -> str | None:
        """The call's role; None when authentication is off. Raises RocketMQError UNAUTHORIZED."""
        authentication = self.security.authentication
        if authentication is None:
            return None
        authorization = ""
        for item in context.invocation_metadata() or ():
            if item[0] == "authorization" and isinstance(item[1], str):
                authorization = item[1]
                break
        ak = access_key(authorization)
        cert = None if ak else _peer_certificate_der(context)
        key = (ak, cert)
        cached = self._cache.get(key)
        if cached is not None and not cached.is_expired():
            return cached.role
        try:
            result = self._authenticate(authentication, ak, cert)
        except AuthenticationError as exc:
            raise RocketMQError(Code.UNAUTHORIZED, str(exc)) from None
        if ak or cert:
            self._cache[key] = result
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return result.role

    @staticmethod
    def _authenticate(
        authentication: AuthenticationService, ak: str, cert: bytes | None
    ) -> AuthenticationResult:
        providers = authentication.providers
        if ak:
            if "token" not in providers:
                raise AuthenticationError(
                    "RocketMQ clients authenticate with a token as access key (the broker has no token"
                    " provider) or a TLS client certificate; basic credentials cannot be carried by their"
                    " HMAC signature"
                )
            return providers["token"].authenticate(AuthenticationData(ak.encode()))
        if cert is not None and "tls" in providers:
            return providers["tls"].authenticate(AuthenticationData(b"", peer_certificate_der=cert))
        return authentication.authenticate("none", AuthenticationData())
