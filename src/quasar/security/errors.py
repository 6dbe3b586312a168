"""Errors of :mod:`quasar.security`."""

from __future__ import annotations

from quasar.errors import QuasarError

__all__ = ["SecurityError", "TlsConfigError"]


class SecurityError(QuasarError):
    """Root of the security package's errors."""


class TlsConfigError(SecurityError, ValueError):
    """A TLS setting is invalid, or a certificate, key or trust file cannot be read or used; the message
    names the setting or the file and the reason (also a ValueError: a configuration error)."""
