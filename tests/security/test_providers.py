"""The authentication providers and service (quasar.security): tokens (HS256, RS256, ES256; algorithm pinned;
expiry; audience; role claim), htpasswd hashes Pulsar accepts, TLS client certificates (trustme), the
anonymous role, and HTTP credentials."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from passlib.hash import apr_md5_crypt, des_crypt, md5_crypt, sha512_crypt

from quasar.security.authentication import AuthenticationData, AuthenticationError, AuthenticationService
from quasar.security.keys import KeyFormatError, read_key
from quasar.security.providers import BasicProvider, TlsProvider, TokenProvider
from quasar.security.tokens import create_key_pair, create_secret_key, create_token

SECRET = create_secret_key()
SECRET_VALUE = "data:;base64," + base64.b64encode(SECRET).decode()


def data(text: str | bytes) -> AuthenticationData:
    return AuthenticationData(text.encode() if isinstance(text, str) else text)


def test_hs256_token_gives_the_sub_role_and_its_expiry() -> None:
    provider = TokenProvider(secret_key=SECRET_VALUE)
    result = provider.authenticate(data(create_token("alice", secret_key=SECRET, expiry_s=60)))
    assert result.role == "alice" and result.method == "token"
    assert result.expires_at is not None and 50 < result.expires_at - time.time() <= 60
    assert not result.is_expired()
    assert provider.authenticate(data(create_token("bob", secret_key=SECRET))).expires_at is None


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_public_key_tokens_from_der_and_pem_key_files(tmp_path, alg: str) -> None:
    private, public = create_key_pair(alg)
    der = tmp_path / "public.der"
    der.write_bytes(public)
    pem = tmp_path / "public.pem"
    pem.write_bytes(
        serialization.load_der_public_key(public).public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    token = create_token("svc", private_key=private)
    for path in (der, pem):
        provider = TokenProvider(public_key=f"file://{path}", public_alg=alg)
        assert provider.authenticate(data(token)).role == "svc"


def test_the_algorithm_is_pinned_by_configuration() -> None:
    """alg none (CVE-2021-22160), and HS256 signed with the public key's bytes (algorithm confusion), are
    refused by an RS256 provider; an HS256 provider refuses an RS256 token."""
    private, public = create_key_pair("RS256")
    rs = TokenProvider(public_key="data:;base64," + base64.b64encode(public).decode())
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=")
    body = base64.urlsafe_b64encode(json.dumps({"sub": "admin"}).encode()).rstrip(b"=")
    with pytest.raises(AuthenticationError):
        rs.authenticate(data(header + b"." + body + b"."))
    signing_input = (
        _b64(json.dumps({"alg": "HS256"}).encode()) + b"." + _b64(json.dumps({"sub": "admin"}).encode())
    )
    confused = signing_input + b"." + _b64(hmac.new(public, signing_input, hashlib.sha256).digest())
    with pytest.raises(AuthenticationError):
        rs.authenticate(data(confused))
    hs = TokenProvider(secret_key=SECRET_VALUE)
    with pytest.raises(AuthenticationError):
        hs.authenticate(data(create_token("admin", private_key=private)))


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def test_expired_and_tampered_tokens_are_refused() -> None:
    provider = TokenProvider(secret_key=SECRET_VALUE)
    with pytest.raises(AuthenticationError, match="expired"):
        provider.authenticate(data(create_token("alice", secret_key=SECRET, expiry_s=-1)))
    token = create_token("alice", secret_key=SECRET)
    head, _body, sig = token.split(".")
    forged = base64.urlsafe_b64encode(json.dumps({"sub": "admin"}).encode()).rstrip(b"=").decode()
    with pytest.raises(AuthenticationError):
        provider.authenticate(data(f"{head}.{forged}.{sig}"))
    for bad in (b"", b"x" * 70_000, b"\xff\xfe", b"a.b.c"):
        with pytest.raises(AuthenticationError):
            provider.authenticate(data(bad))


def test_audience_and_role_claims() -> None:
    provider = TokenProvider(
        secret_key=SECRET_VALUE, auth_claim="role", audience_claim="aud", audience="broker-1"
    )

    def token(claims: dict) -> str:
        return create_token("ignored", secret_key=SECRET, claims=claims)

    assert provider.authenticate(data(token({"role": "r", "aud": "broker-1"}))).role == "r"
    assert provider.authenticate(data(token({"role": "r", "aud": ["x", "broker-1"]}))).role == "r"
    for claims in (
        {"role": "r", "aud": "broker-2"},
        {"role": "r"},
        {"aud": "broker-1"},
        {"role": 5, "aud": "broker-1"},
    ):
        with pytest.raises(AuthenticationError):
            provider.authenticate(data(token(claims)))


def test_token_provider_configuration_errors() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TokenProvider()
    with pytest.raises(ValueError, match="token_public_alg"):
        TokenProvider(public_key=SECRET_VALUE, public_alg="HS256")
    with pytest.raises(ValueError, match="token_audience"):
        TokenProvider(secret_key=SECRET_VALUE, audience_claim="aud")
    with pytest.raises(ValueError, match="cannot read key file"):
        TokenProvider(secret_key="file:///nonexistent/key")


def test_key_values_as_pulsar_reads_them(tmp_path) -> None:
    path = tmp_path / "k"
    path.write_bytes(b"\x00\x01raw")
    assert read_key(f"file://{path}") == b"\x00\x01raw"
    assert read_key(str(path)) == b"\x00\x01raw"
    assert read_key("data:;base64,AAFyYXc=") == b"\x00\x01raw"
    assert read_key("data:,plain%20text") == b"plain text"
    assert read_key("AAFyYXc=") == b"\x00\x01raw"
    for bad in ("", "data:;base64", "data:;base64,!!!", "not base64 and no file"):
        with pytest.raises(KeyFormatError):
            read_key(bad)


def test_basic_accepts_the_hashes_pulsar_accepts(tmp_path) -> None:
    lines = {
        "apr": apr_md5_crypt.hash("pw1"),
        "des": des_crypt.hash("pw2"),
        "md5": md5_crypt.hash("pw3"),
        "sha": sha512_crypt.hash("pw4"),
        "bc": "$2y$05$abcdefghijklmnopqrstuuQ2gSRBS0nCz3jwh4mf4yQd0I9SGc8Iq",  # bcrypt: refused by Pulsar
        "plain": "pw6",
    }
    path = tmp_path / "htpasswd"
    path.write_text("".join(f"{user}:{hashed}\n" for user, hashed in lines.items()))
    for conf in (str(path), base64.b64encode(path.read_bytes()).decode()):
        provider = BasicProvider(conf)
        for user, password in (("apr", "pw1"), ("des", "pw2"), ("md5", "pw3"), ("sha", "pw4")):
            assert provider.authenticate(data(f"{user}:{password}")).role == user
        for credentials in ("apr:wrong", "bc:pw5", "plain:pw6", "nobody:pw1", "apr", ":pw1", b"apr:\xff"):
            with pytest.raises(AuthenticationError):
                provider.authenticate(data(credentials))
    with pytest.raises(ValueError, match="basic_auth_conf"):
        BasicProvider("/nonexistent/htpasswd")


def test_tls_role_is_the_client_certificate_common_name() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("client.example", common_name="proxy-role")
    der = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(
        serialization.Encoding.DER
    )
    provider = TlsProvider()
    assert provider.authenticate(AuthenticationData(b"", der)).role == "proxy-role"
    for bad in (None, b"", b"not a certificate"):
        with pytest.raises(AuthenticationError):
            provider.authenticate(AuthenticationData(b"", bad))


def test_service_picks_the_provider_and_falls_back_to_the_anonymous_role() -> None:
    token = TokenProvider(secret_key=SECRET_VALUE)
    strict = AuthenticationService([token])
    with pytest.raises(AuthenticationError, match="anonymous"):
        strict.authenticate("none", data(""))
    with pytest.raises(AuthenticationError):
        strict.authenticate("basic", data("a:b"))
    lenient = AuthenticationService([token, TlsProvider()], anonymous_user_role="anon")
    assert lenient.authenticate("none", data("")).role == "anon"
    assert lenient.authenticate("sasl", data("x")).role == "anon"
    with pytest.raises(AuthenticationError):  # a known method that refuses is final
        lenient.authenticate("token", data("bad"))
    with pytest.raises(ValueError):
        AuthenticationService([token, token])


def test_http_credentials() -> None:
    token_value = create_token("alice", secret_key=SECRET)
    service = AuthenticationService([TokenProvider(secret_key=SECRET_VALUE), TlsProvider()])
    assert service.authenticate_http(f"Bearer {token_value}").role == "alice"
    assert service.authenticate_http(f"bearer  {token_value} ").role == "alice"
    for header in (None, "Bearer", "Bearer bad", f"Basic {token_value}", "Token x"):
        with pytest.raises(AuthenticationError):
            service.authenticate_http(header)
    with pytest.raises(AuthenticationError):
        service.authenticate_http(f"Bearer {token_value}", method_header="tls")
    assert AuthenticationService([TlsProvider()], "anon").authenticate_http(None).role == "anon"


def test_http_refusal_names_the_method_the_request_meant(tmp_path) -> None:
    path = tmp_path / "htpasswd"
    path.write_text(f"bob:{apr_md5_crypt.hash('pw')}\n")
    service = AuthenticationService(
        [TokenProvider(secret_key=SECRET_VALUE), BasicProvider(str(path)), TlsProvider()]
    )
    with pytest.raises(AuthenticationError, match="wrong password"):
        service.authenticate_http("Basic " + base64.b64encode(b"bob:nope").decode())
    with pytest.raises(AuthenticationError, match="Failed to authentication token"):
        service.authenticate_http("Bearer x.y.z")
    with pytest.raises(AuthenticationError, match="no credentials"):
        service.authenticate_http(None)
