"""Keys and tokens as ``pulsar tokens`` makes them (Pulsar ``TokensCliUtils`` / ``AuthTokenUtils``).

- :func:`create_secret_key`: 32 random bytes, an HS256 key (what ``tokenSecretKey`` names);
- :func:`create_key_pair`: an RSA (2048-bit) or EC (P-256/384/521) key pair as DER: the private key in
  PKCS#8, the public key as X.509 SubjectPublicKeyInfo (what ``tokenPublicKey`` names);
- :func:`create_token`: a compact JWT with ``sub`` (and ``exp`` when an expiry is given), signed with PyJWT;
- :func:`parse_relative_time`: ``--expiry-time`` values (``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1y``;
  Pulsar ``RelativeTimeUtil``) in seconds.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from quasar.security.keys import load_private_key

__all__ = ["create_key_pair", "create_secret_key", "create_token", "parse_relative_time"]

SECRET_KEY_BYTES = 32  # HS256: a key as long as the hash (JJWT Keys.secretKeyFor(HS256))

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400, "y": 365 * 86_400}
_CURVES: dict[str, ec.EllipticCurve] = {
    "ES256": ec.SECP256R1(),
    "ES384": ec.SECP384R1(),
    "ES512": ec.SECP521R1(),
}


def create_secret_key() -> bytes:
    """A new random HS256 secret key (32 bytes)."""
    return secrets.token_bytes(SECRET_KEY_BYTES)


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """A new key pair for ``algorithm`` (RS256/384/512, PS256/384/512: RSA 2048; ES256/384/512: EC) as
    ``(private PKCS#8 DER, public SubjectPublicKeyInfo DER)``. Raises ValueError for another algorithm."""
    private: Any
    if algorithm in _CURVES:
        private = ec.generate_private_key(_CURVES[algorithm])
    elif algorithm[:2] in ("RS", "PS") and algorithm[2:] in ("256", "384", "512"):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        raise ValueError(
            f"unsupported signature algorithm {algorithm!r} (RS256..512, PS256..512, ES256..512)"
        )
    private_der = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    algorithm: str | None = None,
    expiry_s: int | None = None,
    claims: dict[str, Any] | None = None,
) -> str:
    """A compact JWT whose ``sub`` is ``subject``, signed with ``secret_key`` (HS256) or ``private_key``
    (PEM or DER; ``algorithm`` default RS256, or ES256 for an EC key), expiring ``expiry_s`` seconds from now
    (None: never); ``claims`` are added. Raises ValueError for a missing/double key or an empty subject."""
    if not subject:
        raise ValueError("the token subject must not be empty")
    if (secret_key is None) == (private_key is None):
        raise ValueError("give exactly one of a secret key and a private key")
    payload: dict[str, Any] = {"sub": subject, **(claims or {})}
    if expiry_s is not None:
        payload["exp"] = int(time.time()) + expiry_s
    if secret_key is not None:
        return jwt.encode(payload, secret_key, algorithm=algorithm or "HS256")
    key = load_private_key(private_key or b"")
    if algorithm is None:
        algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
    return jwt.encode(payload, key, algorithm=algorithm)


def parse_relative_time(text: str) -> int:
    """Seconds in ``text`` (``<n><unit>``, unit s/m/h/d/w/y; a bare number is seconds). Raises ValueError."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in _UNITS else "s"
    number = value[:-1] if value[-1:] in _UNITS else value
    if not number.isdigit():
        raise ValueError(f"invalid relative time {text!r}: use e.g. 30s, 10m, 2h, 1d, 1w or 1y")
    return int(number) * _UNITS[unit]
