"""The authentication providers, by Pulsar method name (reference/security.md §2):

- :class:`TokenProvider` (``token``, Pulsar ``AuthenticationProviderToken``): a compact JWT verified with PyJWT
  against a secret key (HS256) or a public key (``token_public_alg``: RS256 default, RS384/RS512, ES256/
  ES384/ES512, PS256/PS384/PS512). The accepted algorithm is the configured one only, never the token header's
  (CVE-2021-22160: ``alg: none`` is always refused). ``exp`` is enforced when present; with
  ``audience_claim`` set the token's claim must equal, or as a list contain, ``audience``. The role is the
  ``auth_claim`` claim (default ``sub``), a non-empty string.
- :class:`BasicProvider` (``basic``, Pulsar ``AuthenticationProviderBasic``): ``user:password`` checked
  against an htpasswd file with passlib. Accepted hashes are those Pulsar accepts (commons-codec ``Crypt``
  and ``Md5Crypt.apr1Crypt``): DES crypt, ``$1$`` MD5, ``$5$`` SHA-256, ``$6$`` SHA-512 and ``$apr1$``;
  bcrypt, SHA-1 and plaintext entries are refused.
- :class:`TlsProvider` (``tls``, Pulsar ``AuthenticationProviderTls``): the role is the subject common name
  of the client certificate the TLS handshake verified (DER bytes, parsed with ``cryptography``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography import x509
from cryptography.x509.oid import NameOID
from passlib.apache import HtpasswdFile
from passlib.context import CryptContext

from quasar.security.authentication import AuthenticationData, AuthenticationError, AuthenticationResult
from quasar.security.keys import KeyFormatError, load_public_key, read_key

__all__ = ["PUBLIC_KEY_ALGORITHMS", "BasicProvider", "TlsProvider", "TokenProvider"]

log = logging.getLogger(__name__)

PUBLIC_KEY_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")
"""``token_public_alg`` values (Pulsar's ``tokenPublicAlg`` accepts the JJWT RSA and EC algorithms)."""

MAX_TOKEN_BYTES = 64 * 1024
"""Longer ``auth_data`` is refused before it is decoded."""


class TokenProvider:
    """``token``: JWT authentication (module docstring).

    Args:
        secret_key: the HMAC key value (``token_secret_key``: ``file:///...``, ``data:;base64,...``, ...).
        public_key: the public key value (``token_public_key``); exactly one of the two is given.
        public_alg: the algorithm of ``public_key`` (``token_public_alg``).
        auth_claim: the claim holding the role (``token_auth_claim``).
        audience_claim / audience: ``token_audience_claim`` / ``token_audience``; the check is on when the
            claim is set, and then ``audience`` is required.

    Raises:
        ValueError: no key, both keys, an unknown algorithm, an audience claim without an audience, or a key
            that cannot be read or decoded.
    """

    method_name = "token"

    def __init__(
        self,
        *,
        secret_key: str = "",
        public_key: str = "",
        public_alg: str = "RS256",
        auth_claim: str = "sub",
        audience_claim: str = "",
        audience: str = "",
    ) -> None:
        if bool(secret_key) == bool(public_key):
            raise ValueError("the token provider needs exactly one of token_secret_key and token_public_key")
        if not auth_claim:
            raise ValueError("token_auth_claim must not be empty")
        if audience_claim and not audience:
            raise ValueError(f"token_audience_claim {audience_claim!r} is set but token_audience is empty")
        try:
            if secret_key:
                self._key: Any = read_key(secret_key)
                self.algorithm = "HS256"
            else:
                if public_alg not in PUBLIC_KEY_ALGORITHMS:
                    raise ValueError(
                        f"token_public_alg must be one of {', '.join(PUBLIC_KEY_ALGORITHMS)}, got {public_alg!r}"
                    )
                self._key = load_public_key(read_key(public_key))
                self.algorithm = public_alg
        except KeyFormatError as exc:
            raise ValueError(f"token key: {exc}") from None
        self._auth_claim = auth_claim
        self._audience_claim = audience_claim
        self._audience = audience

    def authenticate(self, credentials: AuthenticationData) -> AuthenticationResult:
        raw = credentials.data
        if not raw:
            raise AuthenticationError("No token provided")
        if len(raw) > MAX_TOKEN_BYTES:
            raise AuthenticationError(f"Token longer than {MAX_TOKEN_BYTES} bytes")
        token = raw.decode("ascii", errors="replace").strip()
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[self.algorithm],
                options={"verify_aud": False, "verify_signature": True, "verify_exp": True},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("Failed to authentication token: JWT expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"Failed to authentication token: {exc}") from None
        self._check_audience(claims)
        role = claims.get(self._auth_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"Token has no string claim {self._auth_claim!r} naming a role")
        exp = claims.get("exp")
        return AuthenticationResult(role, self.method_name, float(exp) if exp is not None else None)

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if not self._audience_claim:
            return
        value = claims.get(self._audience_claim)
        if value is None:
            raise AuthenticationError(f"Token has no audience claim {self._audience_claim!r}")
        audiences = value if isinstance(value, list) else [value]
        if self._audience not in audiences:
            raise AuthenticationError("Token audience is not this broker's")


BASIC_SCHEMES = ("apr_md5_crypt", "md5_crypt", "sha256_crypt", "sha512_crypt", "des_crypt")
"""The passlib schemes matching what Pulsar's basic provider verifies (module docstring)."""

_BASIC_CONTEXT = CryptContext(schemes=list(BASIC_SCHEMES), default="apr_md5_crypt")


class BasicProvider:
    """``basic``: htpasswd authentication (module docstring).

    Args:
        conf: ``basic_auth_conf``: a path to the htpasswd file, or its content in base64 (Pulsar reads
            ``basicAuthConf`` the same way).

    Raises:
        ValueError: the file cannot be read or is not htpasswd text.
    """

    method_name = "basic"

    def __init__(self, conf: str) -> None:
        try:
            content = read_key(conf)
        except KeyFormatError as exc:
            raise ValueError(f"basic_auth_conf: {exc}") from None
        try:
            self._file = HtpasswdFile.from_string(content, context=_BASIC_CONTEXT)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"basic_auth_conf is not an htpasswd file: {exc}") from None
        for user in self._file.users():
            scheme = _scheme_of(self._file.get_hash(user))
            if scheme is None:
                log.warning(
                    "basic_auth_conf: user %r has a hash scheme Pulsar does not accept; refused", user
                )

    def authenticate(self, credentials: AuthenticationData) -> AuthenticationResult:
        user_bytes, sep, password_bytes = credentials.data.partition(b":")
        if not sep or not user_bytes:
            raise AuthenticationError("Basic credentials must be 'user:password'")
        try:
            user, password = user_bytes.decode(), password_bytes.decode()
        except UnicodeDecodeError:
            raise AuthenticationError("Basic credentials are not UTF-8") from None
        stored = self._file.get_hash(user)
        if stored is None or _scheme_of(stored) is None:
            raise AuthenticationError("Unknown user or wrong password")
        if not _BASIC_CONTEXT.verify(password, stored):
            raise AuthenticationError("Unknown user or wrong password")
        return AuthenticationResult(user, self.method_name)


def _scheme_of(stored: bytes | str | None) -> str | None:
    if stored is None:
        return None
    try:
        return _BASIC_CONTEXT.identify(stored, required=False)  # type: ignore[no-any-return]
    except ValueError:
        return None


class TlsProvider:
    """``tls``: the role is the client certificate's subject CN (module docstring)."""

    method_name = "tls"

    def authenticate(self, credentials: AuthenticationData) -> AuthenticationResult:
        der = credentials.peer_certificate_der
        if not der:
            raise AuthenticationError("No client certificate: tls authentication needs a TLS connection")
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError as exc:
            raise AuthenticationError(f"Malformed client certificate: {exc}") from None
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        role = names[0].value if names else ""
        if not isinstance(role, str) or not role:
            raise AuthenticationError("Client certificate has no subject common name")
        return AuthenticationResult(role, self.method_name)  # Pulsar never refreshes a TLS identity
