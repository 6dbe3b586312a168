"""The official ``pulsar-client`` against a broker with authentication and authorization on (conftest):
granted roles produce and consume with tokens and basic credentials; missing grants are refused at once with
AuthorizationError (which the client does not retry); an expiring token is refreshed through AUTH_CHALLENGE
when the client's token supplier gives a fresh one.

Wrong, expired, ``alg: none`` and wrong-audience tokens and wrong passwords: the broker answers CONNECT with
ERROR AuthenticationError (request id -1) and closes, as Pulsar's ServerCnx does; checked on the wire. The
official C++ client reads an ERROR before CONNECTED as a plain disconnection (``ClientConnection::
handleIncomingCommand``, state TcpConnected) and retries until its operation timeout, also against Pulsar;
the tests check that it is never let in (pulsar.Timeout after a short operation timeout)."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
import uuid

import jwt
import pulsar
import pytest

from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, requests
from quasar.protocol.enums import ServerError
from tests.security.conftest import ANONYMOUS, PASSWORDS, Secured

OPERATION_TIMEOUT_S = 20
REFUSED_WITHIN_S = 8.0  # well under the operation timeout: the client did not retry


def client(secured: Secured, authentication=None) -> pulsar.Client:
    return pulsar.Client(
        secured.broker.service_url,
        authentication=authentication,
        operation_timeout_seconds=OPERATION_TIMEOUT_S,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def grant(secured: Secured, namespace: str, role: str, actions: list[str]) -> None:
    status, body = secured.admin("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", actions)
    assert status == 204, body


def round_trip(c: pulsar.Client, topic: str) -> None:
    consumer = c.subscribe(topic, "sub")
    producer = c.create_producer(topic)
    producer.send(b"hello")
    assert consumer.receive(timeout_millis=10_000).data() == b"hello"
    consumer.close()
    producer.close()


def refused(make, error: type[Exception]) -> Exception:
    started = time.monotonic()
    with pytest.raises(error) as info:
        make()
    assert time.monotonic() - started < REFUSED_WITHIN_S
    return info.value


@pytest.fixture(scope="module")
def namespace(secured: Secured) -> str:
    ns = secured.new_namespace("granted")
    grant(secured, ns, "alice", ["produce", "consume"])
    grant(secured, ns, "bob", ["produce", "consume"])
    grant(secured, ns, "carol", ["consume"])
    return ns


def topic_in(namespace: str) -> str:
    return f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"


def test_token_role_with_grants_produces_and_consumes(secured: Secured, namespace: str) -> None:
    c = client(secured, pulsar.AuthenticationToken(secured.token("alice")))
    try:
        round_trip(c, topic_in(namespace))
    finally:
        c.close()


def test_super_user_needs_no_grant(secured: Secured) -> None:
    ns = secured.new_namespace("su")
    c = client(secured, pulsar.AuthenticationToken(secured.token("admin")))
    try:
        round_trip(c, topic_in(ns))
    finally:
        c.close()


def test_basic_apr1_user_produces_and_consumes(secured: Secured, namespace: str) -> None:
    c = client(secured, pulsar.AuthenticationBasic("bob", PASSWORDS["bob"]))
    try:
        round_trip(c, topic_in(namespace))
    finally:
        c.close()


@pytest.mark.parametrize(
    "make_token",
    [
        pytest.param(
            lambda s: jwt.encode({"sub": "alice", "aud": "quasar-test"}, b"x" * 32, "HS256"), id="wrong-key"
        ),
        pytest.param(lambda s: s.token("alice", expiry_s=-10), id="expired"),
        pytest.param(lambda s: s.token("alice", audience="another-broker"), id="wrong-audience"),
        pytest.param(
            lambda s: _unsigned({"sub": "admin", "aud": "quasar-test", "exp": int(time.time()) + 600}),
            id="alg-none",
        ),
        pytest.param(lambda s: "not-a-jwt", id="garbage"),
    ],
)
def test_bad_tokens_are_refused(secured: Secured, namespace: str, make_token) -> None:
    token = make_token(secured)
    assert connect_answer(secured, "token", token.encode()) == ServerError.AuthenticationError
    never_let_in(secured, pulsar.AuthenticationToken(token), namespace)


def connect_answer(secured: Secured, method: str, data: bytes) -> int | None:
    """The ServerError of the broker's ERROR answer to a raw CONNECT (None when it answered CONNECTED), after
    checking that the broker closed the connection right after an ERROR."""
    host, port = secured.broker.service_url.removeprefix("pulsar://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(requests.new_connect("raw-test", auth_method_name=method, auth_data=data))
        decoder = FrameDecoder()
        answer: list = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            decoder.receive_data(chunk)
            answer += decoder_frames(decoder)
            if answer and answer[0].type == CommandType.CONNECTED:
                return None
        else:
            raise AssertionError("the broker neither answered nor closed within 5 s")
    assert answer, "the broker closed without an ERROR frame"
    assert answer[0].type == CommandType.ERROR
    assert answer[0].command.error.request_id == 2**64 - 1
    return int(answer[0].command.error.error)


def decoder_frames(decoder: FrameDecoder) -> list:
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


def never_let_in(secured: Secured, authentication, namespace: str) -> None:
    """The official client with ``authentication`` cannot create a producer (pulsar.Timeout: it retried the
    refused CONNECT until its 3 s operation timeout, as it does against Pulsar)."""
    c = pulsar.Client(
        secured.broker.service_url,
        authentication=authentication,
        operation_timeout_seconds=3,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        with pytest.raises(pulsar.Timeout):
            c.create_producer(topic_in(namespace))
    finally:
        c.close()


def _unsigned(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def test_wrong_password_and_unknown_user_are_refused(secured: Secured, namespace: str) -> None:
    for user, password in (("bob", "wrong"), ("mallory", "x")):
        answer = connect_answer(secured, "basic", f"{user}:{password}".encode())
        assert answer == ServerError.AuthenticationError
    assert connect_answer(secured, "basic", f"bob:{PASSWORDS['bob']}".encode()) is None
    never_let_in(secured, pulsar.AuthenticationBasic("bob", "wrong"), namespace)


def test_without_an_anonymous_role_no_credentials_are_refused(strict: Secured) -> None:
    assert connect_answer(strict, "none", b"") == ServerError.AuthenticationError
    assert connect_answer(strict, "kerberos", b"x") == ServerError.AuthenticationError
    assert connect_answer(strict, "token", strict.token("alice").encode()) is None


def test_unknown_method_gets_the_anonymous_role_and_tls_needs_a_certificate(secured: Secured) -> None:
    """Pulsar: a method no provider has falls back to anonymous_user_role; ``tls`` over a plain connection
    has no client certificate and is refused."""
    assert connect_answer(secured, "none", b"") is None
    assert connect_answer(secured, "kerberos", b"x") is None
    assert connect_answer(secured, "tls", b"") == ServerError.AuthenticationError


def test_missing_produce_grant_is_refused_but_consume_works(secured: Secured, namespace: str) -> None:
    c = client(secured, pulsar.AuthenticationBasic("carol", PASSWORDS["carol"]))  # crypt hash, consume only
    try:
        topic = topic_in(namespace)
        c.subscribe(topic, "sub").close()
        refused(lambda: c.create_producer(topic), pulsar.AuthorizationError)
    finally:
        c.close()


def test_role_without_any_grant_cannot_lookup_produce_or_consume(secured: Secured, namespace: str) -> None:
    c = client(secured, pulsar.AuthenticationToken(secured.token("eve")))
    try:
        topic = topic_in(namespace)
        refused(lambda: c.create_producer(topic), pulsar.AuthorizationError)
        refused(lambda: c.subscribe(topic, "sub"), pulsar.AuthorizationError)
    finally:
        c.close()


def test_subscription_grant_limits_who_uses_a_subscription(secured: Secured, namespace: str) -> None:
    status, body = secured.admin(
        "POST", f"/admin/v2/namespaces/{namespace}/permissions/subscription/private", ["bob"]
    )
    assert status == 204, body
    topic = topic_in(namespace)
    alice = client(secured, pulsar.AuthenticationToken(secured.token("alice")))
    bob = client(secured, pulsar.AuthenticationBasic("bob", PASSWORDS["bob"]))
    try:
        refused(lambda: alice.subscribe(topic, "private"), pulsar.AuthorizationError)
        bob.subscribe(topic, "private").close()
        alice.subscribe(topic, "other").close()
    finally:
        alice.close()
        bob.close()


def test_anonymous_role_gets_its_grants_only(secured: Secured, namespace: str) -> None:
    open_ns = secured.new_namespace("anon")
    grant(secured, open_ns, ANONYMOUS, ["produce", "consume"])
    c = client(secured)  # no credentials: the broker's anonymous_user_role
    try:
        round_trip(c, topic_in(open_ns))
        refused(lambda: c.create_producer(topic_in(namespace)), pulsar.AuthorizationError)
    finally:
        c.close()


def test_revoked_grant_refuses_new_producers(secured: Secured) -> None:
    ns = secured.new_namespace("revoke")
    grant(secured, ns, "dave", ["produce"])
    c = client(secured, pulsar.AuthenticationToken(secured.token("dave")))
    try:
        c.create_producer(topic_in(ns)).close()
        status, _ = secured.admin("DELETE", f"/admin/v2/namespaces/{ns}/permissions/dave")
        assert status == 204
        refused(lambda: c.create_producer(topic_in(ns)), pulsar.AuthorizationError)
    finally:
        c.close()


def test_expiring_token_is_refreshed_through_the_supplier(secured: Secured, namespace: str) -> None:
    """Tokens live 2 s and the broker checks every second: it challenges the connection (AUTH_CHALLENGE) and
    the client answers with its supplier's next token, so the producer keeps working past the first expiry
    without the supplier ever being called for a new connection only."""
    calls: list[float] = []

    def supplier() -> str:
        calls.append(time.monotonic())
        return secured.token("alice", expiry_s=2)

    closes_before = secured.broker.stderr_text().count("closing connection")
    c = client(secured, pulsar.AuthenticationToken(supplier))
    try:
        producer = c.create_producer(topic_in(namespace))
        first = len(calls)
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            producer.send(b"x")
            time.sleep(0.5)
        assert len(calls) > first  # asked again: refreshed, not stuck on the first (expired) token
        producer.send(b"still-works")
    finally:
        c.close()
    log = secured.broker.stderr_text()
    assert log.count("closing connection") == closes_before, log[-2000:]  # refreshed in place, never dropped


def test_expired_token_that_is_not_refreshed_closes_the_connection(secured: Secured, namespace: str) -> None:
    """A fixed token: the client answers AUTH_CHALLENGE with the same, now expired, token; the broker refuses
    it and closes the connection (Pulsar ServerCnx)."""
    c = client(secured, pulsar.AuthenticationToken(secured.token("alice", expiry_s=2)))
    try:
        c.create_producer(topic_in(namespace))
        deadline = time.monotonic() + 8
        while "Unable to refresh authentication" not in secured.broker.stderr_text():
            assert time.monotonic() < deadline, "the expired connection was not closed"
            time.sleep(0.2)
    finally:
        c.close()


def test_pattern_subscription_needs_a_namespace_grant(secured: Secured, namespace: str) -> None:
    """GET_TOPICS_OF_NAMESPACE (regex subscriptions) needs produce or consume on the namespace; the C++ client
    reports any error of that command as LookupError (ClientImpl::createPatternMultiTopicsConsumer)."""
    topic = topic_in(namespace)
    alice = client(secured, pulsar.AuthenticationToken(secured.token("alice")))
    eve = client(secured, pulsar.AuthenticationToken(secured.token("eve")))
    try:
        alice.create_producer(topic).close()
        pattern = re.compile(f"persistent://{namespace}/t-.*")
        alice.subscribe(pattern, "pattern-sub").close()
        refused(lambda: eve.subscribe(pattern, "pattern-sub"), pulsar.LookupError)
    finally:
        alice.close()
        eve.close()
