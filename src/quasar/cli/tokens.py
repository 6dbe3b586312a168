"""``quasar tokens``: keys and JWTs for token authentication, like ``pulsar tokens``.

- ``quasar tokens create-secret-key [--output F] [--base64]``: a random HS256 key (raw bytes, or base64 text);
  the broker takes it as ``token_secret_key = "file:///F"`` (or ``"data:;base64,<text>"``).
- ``quasar tokens create-key-pair [--signature-algorithm RS256|ES256|...] --output-private-key F
  --output-public-key F``: DER keys (PKCS#8 / X.509), as Pulsar writes them; the broker takes the public one as
  ``token_public_key`` with ``token_public_alg``.
- ``quasar tokens create --subject S [--expiry-time 1y] (--secret-key V | --private-key V)
  [--signature-algorithm A]``: prints a token whose ``sub`` is S; key values are ``file:///path``,
  ``data:;base64,...``, a path or base64 text.

Key files are created with mode 0600. Errors (an unreadable key, a bad expiry) exit 2 with the reason.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import click

from quasar.security.keys import KeyFormatError, read_key
from quasar.security.tokens import create_key_pair, create_secret_key, create_token, parse_relative_time

__all__ = ["tokens"]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@click.group()
def tokens() -> None:
    """Create keys and tokens for token authentication (like ``pulsar tokens``)."""


@tokens.command("create-secret-key")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write the key here.")
@click.option("--base64", "-b", "as_base64", is_flag=True, help="Base64-encode the key.")
def create_secret_key_command(output: Path | None, as_base64: bool) -> None:
    """A new HS256 secret key (stdout unless --output)."""
    key = create_secret_key()
    data = base64.b64encode(key) if as_base64 else key
    if output is not None:
        _write_private(output, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


@tokens.command("create-key-pair")
@click.option("--signature-algorithm", "-a", default="RS256", show_default=True)
@click.option("--output-private-key", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output-public-key", required=True, type=click.Path(dir_okay=False, path_type=Path))
def create_key_pair_command(
    signature_algorithm: str, output_private_key: Path, output_public_key: Path
) -> None:
    """A new key pair (DER) for the signature algorithm."""
    try:
        private, public = create_key_pair(signature_algorithm)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--signature-algorithm") from None
    _write_private(output_private_key, private)
    output_public_key.write_bytes(public)


@tokens.command("create")
@click.option("--subject", "-s", required=True, help="The role the token authenticates (claim sub).")
@click.option("--expiry-time", "-e", default=None, help="Relative expiry: 30s, 10m, 2h, 1d, 1w, 1y.")
@click.option("--secret-key", "-sk", default=None, help="HS256 key value (file:///..., data:;base64,...).")
@click.option("--private-key", "-pk", default=None, help="Private key value (file:///..., data:;base64,...).")
@click.option("--signature-algorithm", "-a", default=None, help="Default: HS256, RS256 or ES256 by key.")
def create_command(
    subject: str,
    expiry_time: str | None,
    secret_key: str | None,
    private_key: str | None,
    signature_algorithm: str | None,
) -> None:
    """Print a new token for SUBJECT."""
    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give exactly one of --secret-key and --private-key")
    try:
        expiry = parse_relative_time(expiry_time) if expiry_time is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expiry-time") from None
    try:
        token = create_token(
            subject,
            secret_key=read_key(secret_key) if secret_key is not None else None,
            private_key=read_key(private_key) if private_key is not None else None,
            algorithm=signature_algorithm,
            expiry_s=expiry,
        )
    except (KeyFormatError, ValueError, NotImplementedError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(token)
