"""ServerCnx authentication in process (fake transport): CONNECT authenticated or refused with ERROR
AuthenticationError and a close; AUTH_CHALLENGE refresh of an expired token (Pulsar ServerCnx
refreshAuthenticationCredentials): a fresh token of the same role keeps the connection, no answer, a refused
or different-role answer, or a client without refresh support closes it; the refresh timer is cancelled
with the connection."""

from __future__ import annotations

import asyncio
import base64

from quasar.broker.auth import BrokerSecurity
from quasar.broker.config import BrokerConfig
from quasar.broker.server_cnx import ServerCnx
from quasar.protocol import CommandType, requests
from quasar.protocol.enums import ServerError
from quasar.security.authentication import AuthenticationService
from quasar.security.providers import TokenProvider
from quasar.security.tokens import create_secret_key, create_token
from tests.broker.test_server_cnx import FakeService, FakeTransport

KEY = create_secret_key()
REFRESH_S = 0.05


def open_cnx(token: str | None, *, supports_refresh: bool = True) -> tuple[ServerCnx, FakeTransport]:
    service = FakeService()
    provider = TokenProvider(secret_key="data:;base64," + base64.b64encode(KEY).decode())
    service.security = BrokerSecurity(AuthenticationService([provider]), None, REFRESH_S)  # type: ignore[misc]
    cnx = ServerCnx(service, BrokerConfig(), set())  # type: ignore[arg-type]
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(
        requests.new_connect(
            "test",
            auth_method_name="token" if token is not None else "none",
            auth_data=token.encode() if token is not None else None,
            supports_auth_refresh=supports_refresh,
        )
    )
    return cnx, transport


def token(role: str = "alice", expiry_s: int = 1) -> str:
    return create_token(role, secret_key=KEY, expiry_s=expiry_s)


async def wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


async def test_connect_is_authenticated_or_refused() -> None:
    cnx, transport = open_cnx(token(expiry_s=60))
    assert [f.type for f in transport.frames()] == [CommandType.CONNECTED]
    assert cnx.role == "alice" and not transport.closed
    cnx.connection_lost(None)
    for bad in (None, "garbage", token(expiry_s=-5)):
        cnx, transport = open_cnx(bad)
        frames = transport.frames()
        assert [f.type for f in frames] == [CommandType.ERROR]
        assert frames[0].command.error.error == ServerError.AuthenticationError
        assert transport.closed and cnx.role is None
        cnx.connection_lost(None)


async def test_expired_token_is_challenged_and_a_fresh_one_keeps_the_connection() -> None:
    cnx, transport = open_cnx(token(expiry_s=1))
    transport.frames()
    await wait_for(lambda: bool(transport.out))
    [challenge] = transport.frames()
    assert challenge.type == CommandType.AUTH_CHALLENGE
    assert challenge.command.authChallenge.challenge.auth_data == b"refresh"
    assert challenge.command.authChallenge.challenge.auth_method_name == "token"
    cnx.data_received(requests.new_auth_response("test", "token", token(expiry_s=60).encode()))
    await asyncio.sleep(REFRESH_S * 4)
    assert not transport.closed and transport.frames() == []
    cnx.connection_lost(None)
    assert cnx.auth._timer is None


async def test_unanswered_challenge_closes_the_connection() -> None:
    cnx, transport = open_cnx(token(expiry_s=1))
    await wait_for(lambda: transport.closed)
    assert CommandType.AUTH_CHALLENGE in [f.type for f in transport.frames()]
    cnx.connection_lost(None)


async def test_refused_or_other_role_refresh_closes_the_connection() -> None:
    for answer in (token(expiry_s=-5), token("mallory", expiry_s=60), "garbage"):
        cnx, transport = open_cnx(token(expiry_s=1))
        transport.frames()
        await wait_for(lambda: bool(transport.out))  # noqa: B023 - awaited in this iteration
        transport.frames()
        cnx.data_received(requests.new_auth_response("test", "token", answer.encode()))
        assert transport.closed
        [error] = transport.frames()
        assert error.command.error.error == ServerError.AuthenticationError
        cnx.connection_lost(None)


async def test_client_without_refresh_support_is_closed_when_its_token_expires() -> None:
    cnx, transport = open_cnx(token(expiry_s=1), supports_refresh=False)
    transport.frames()
    await wait_for(lambda: transport.closed)
    assert transport.frames() == []  # no challenge sent: the client could not answer it
    cnx.connection_lost(None)


async def test_refusal_tells_the_client_no_more_than_pulsar_does() -> None:
    cnx, transport = open_cnx(token("alice", expiry_s=-5))
    [error] = transport.frames()
    assert error.command.error.message == "Unable to authenticate"  # not "expired", not which check failed
    cnx.connection_lost(None)


async def test_a_refresh_without_expiry_stops_the_timer() -> None:
    cnx, transport = open_cnx(token(expiry_s=1))
    transport.frames()
    await wait_for(lambda: bool(transport.out))
    transport.frames()
    cnx.data_received(
        requests.new_auth_response("test", "token", create_token("alice", secret_key=KEY).encode())
    )
    await wait_for(lambda: cnx.auth._timer is None)
    assert not transport.closed and cnx.role == "alice"
    cnx.connection_lost(None)
