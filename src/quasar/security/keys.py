"""Key values as Pulsar's ``tokenSecretKey`` / ``tokenPublicKey`` / ``basicAuthConf`` settings take them.

A value is one of (Pulsar ``AuthTokenUtils.readKeyFromUrl``):

- ``file:///path/to/key``: the file's bytes;
- ``data:;base64,<base64>`` (or ``data:,<percent-encoded text>``): the decoded bytes;
- a path to an existing file: its bytes;
- otherwise base64 text: the decoded bytes.

Public and private keys may be DER (what ``pulsar tokens create-key-pair`` writes: X.509 SubjectPublicKeyInfo
and PKCS#8) or PEM.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

from cryptography.hazmat.primitives import serialization

from quasar.errors import QuasarError

__all__ = ["KeyFormatError", "load_private_key", "load_public_key", "read_key"]


class KeyFormatError(QuasarError):
    """A key setting cannot be read or decoded (the message says which value and why)."""


def read_key(value: str) -> bytes:
    """The bytes named by ``value`` (module docstring). Raises :class:`KeyFormatError` when the file cannot be read,
    the data URL or the base64 text is malformed, or the value is empty."""
    if not value:
        raise KeyFormatError("empty key value")
    if value.startswith("data:"):
        meta, sep, payload = value[5:].partition(",")
        if not sep:
            raise KeyFormatError("a data: key value needs a ',' before its content (data:;base64,...)")
        if meta.endswith(";base64"):
            return _b64(payload, "data: URL")
        return unquote_to_bytes(payload)
    if value.startswith("file:"):
        path = unquote_to_bytes(urlsplit(value).path).decode()
        return _read_file(path)
    if os.path.isfile(value):
        return _read_file(value)
    return _b64(value, f"key value {value[:20]!r}... (not an existing file)")


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise KeyFormatError(f"cannot read key file {path}: {exc.strerror or exc}") from None


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError(f"{what} is not valid base64") from None


def load_public_key(data: bytes) -> Any:
    """A ``cryptography`` public key from PEM or DER bytes; raises :class:`KeyFormatError`."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFormatError(f"not a PEM or DER public key: {exc}") from None


def load_private_key(data: bytes) -> Any:
    """A ``cryptography`` private key from unencrypted PEM or DER (PKCS#8) bytes; raises :class:`KeyFormatError`."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFormatError(f"not an unencrypted PEM or DER private key: {exc}") from None
