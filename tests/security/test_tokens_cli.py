"""``quasar tokens``: the keys and tokens it writes verify with PyJWT as a broker configured with them would
verify them (and as ``pulsar tokens`` output would)."""

from __future__ import annotations

import base64
import time

import jwt
from cryptography.hazmat.primitives import serialization

from quasar.security.authentication import AuthenticationData
from quasar.security.providers import TokenProvider
from tests.security.conftest import quasar_cli


def test_secret_key_and_token(tmp_path) -> None:
    key = tmp_path / "secret.key"
    assert quasar_cli("tokens", "create-secret-key", "--output", str(key)).returncode == 0
    assert len(key.read_bytes()) == 32 and key.stat().st_mode & 0o077 == 0
    made = quasar_cli(
        "tokens", "create", "--subject", "alice", "--expiry-time", "1d", "--secret-key", f"file://{key}"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.decode().strip()
    claims = jwt.decode(token, key.read_bytes(), algorithms=["HS256"])
    assert claims["sub"] == "alice" and abs(claims["exp"] - (time.time() + 86_400)) < 60
    assert (
        TokenProvider(secret_key=f"file://{key}").authenticate(AuthenticationData(token.encode())).role
        == "alice"
    )

    b64 = quasar_cli("tokens", "create-secret-key", "--base64")
    assert b64.returncode == 0 and len(base64.b64decode(b64.stdout)) == 32
    value = "data:;base64," + b64.stdout.decode()
    made = quasar_cli("tokens", "create", "-s", "bob", "-sk", value)
    assert jwt.decode(made.stdout.decode().strip(), base64.b64decode(b64.stdout), algorithms=["HS256"]) == {
        "sub": "bob"
    }


def test_key_pair_and_token(tmp_path) -> None:
    for alg in ("RS256", "ES256"):
        private, public = tmp_path / f"{alg}.key", tmp_path / f"{alg}.pub"
        made = quasar_cli(
            "tokens", "create-key-pair", "--signature-algorithm", alg,
            "--output-private-key", str(private), "--output-public-key", str(public),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        made = quasar_cli("tokens", "create", "--subject", "svc", "--private-key", f"file://{private}")
        assert made.returncode == 0, made.stderr
        token = made.stdout.decode().strip()
        assert jwt.get_unverified_header(token)["alg"] == alg
        assert jwt.decode(
            token, serialization.load_der_public_key(public.read_bytes()), algorithms=[alg]
        ) == {"sub": "svc"}
        provider = TokenProvider(public_key=f"file://{public}", public_alg=alg)
        assert provider.authenticate(AuthenticationData(token.encode())).role == "svc"


def test_errors_exit_2_with_the_reason(tmp_path) -> None:
    for args, reason in (
        (("create", "-s", "x"), b"exactly one"),
        (("create", "-s", "x", "-sk", "file:///nonexistent"), b"cannot read key file"),
        (("create", "-s", "x", "-sk", "AAAA", "-e", "soon"), b"invalid relative time"),
        (
            ("create-key-pair", "-a", "HS256", "--output-private-key", "a", "--output-public-key", "b"),
            b"unsupported",
        ),
    ):
        made = quasar_cli("tokens", *args)
        assert made.returncode == 2 and reason in made.stderr, made.stderr
