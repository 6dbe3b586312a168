"""Client-side authentication against an in-process fake broker: what CONNECT carries for each method, the
AUTH_CHALLENGE -> AUTH_RESPONSE refresh with a fresh token, a refused CONNECT surfacing at once as
AuthenticationError (not retried), and the Java-style plugin / params parsing the Spark connector uses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from quasar.client import (
    AsyncClient,
    AuthenticationBasic,
    AuthenticationError,
    AuthenticationTLS,
    AuthenticationToken,
    AuthorizationError,
)
from quasar.client.auth import authentication_from_params
from quasar.client.errors import BrokerResponseError
from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, ServerError, commands, encode_command, pb

ConnectReply = Callable[[object], bytes]


def _connected(frame: object) -> bytes:
    return commands.new_connected("fake", 20, 5 * 1024 * 1024)


def auth_challenge(method: str = "token", data: bytes = b"refresh") -> bytes:
    """AUTH_CHALLENGE as Pulsar's broker sends it to refresh expiring credentials."""
    cmd = pb.BaseCommand(type=pb.BaseCommand.AUTH_CHALLENGE)
    cmd.authChallenge.server_version = "fake"
    cmd.authChallenge.protocol_version = 20
    cmd.authChallenge.challenge.auth_method_name = method
    cmd.authChallenge.challenge.auth_data = data
    return encode_command(cmd)


class AuthBroker:
    """Records every frame; answers CONNECT with ``connect_reply`` and PARTITIONED_METADATA with 0."""

    def __init__(self, connect_reply: ConnectReply = _connected) -> None:
        self.connect_reply = connect_reply
        self.frames: list[object] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.connects = 0

    async def start(self) -> AuthBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    self.frames.append(frame)
                    if frame.type == CommandType.CONNECT:
                        self.connects += 1
                        writer.write(self.connect_reply(frame))
                    elif frame.type == CommandType.PARTITIONED_METADATA:
                        request_id = frame.command.partitionMetadata.request_id
                        writer.write(commands.new_partitioned_metadata_response(request_id, 0))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def of_type(self, kind: CommandType) -> list[object]:
        return [f for f in self.frames if f.type == kind]  # type: ignore[attr-defined]

    async def wait_for(self, kind: CommandType, count: int = 1) -> list[object]:
        deadline = time.monotonic() + 5
        while len(self.of_type(kind)) < count:
            assert time.monotonic() < deadline, f"no {kind.name} frame within 5 s"
            await asyncio.sleep(0.01)
        return self.of_type(kind)

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


async def _connect_frame(authentication: object | None) -> object:
    broker = await AuthBroker().start()
    kwargs = {} if authentication is None else {"authentication": authentication}
    async with AsyncClient(broker.url, operation_timeout_seconds=5, **kwargs) as client:
        await client.get_topic_partitions("persistent://public/default/t")
    await broker.close()
    (connect,) = broker.of_type(CommandType.CONNECT)
    return connect.command.connect  # type: ignore[attr-defined]


async def test_connect_without_authentication_says_none():
    body = await _connect_frame(None)
    assert body.auth_method_name == "none" and not body.HasField("auth_data")
    assert body.feature_flags.supports_auth_refresh


async def test_connect_carries_the_token():
    body = await _connect_frame(AuthenticationToken("eyJ.tok.en"))
    assert body.auth_method_name == "token" and body.auth_data == b"eyJ.tok.en"


async def test_connect_carries_the_token_of_a_supplier():
    body = await _connect_frame(AuthenticationToken(lambda: "from-supplier"))
    assert body.auth_method_name == "token" and body.auth_data == b"from-supplier"


async def test_connect_carries_basic_credentials():
    body = await _connect_frame(AuthenticationBasic("alice", "s3cr:et"))
    assert body.auth_method_name == "basic" and body.auth_data == b"alice:s3cr:et"
    body = await _connect_frame(
        AuthenticationBasic(auth_params_string='{"username": "bob", "password": "pw"}')
    )
    assert body.auth_method_name == "basic" and body.auth_data == b"bob:pw"


async def test_tls_authentication_names_the_method_without_data(tmp_path: Path):
    # the certificate travels in the TLS handshake; a plain connection still names the method
    body = await _connect_frame(AuthenticationTLS(tmp_path / "c.pem", tmp_path / "k.pem"))
    assert body.auth_method_name == "tls" and not body.HasField("auth_data")


async def test_auth_challenge_is_answered_with_a_refreshed_token():
    tokens = iter(["token-1", "token-2", "token-3"])
    broker = await AuthBroker().start()
    async with AsyncClient(broker.url, authentication=AuthenticationToken(lambda: next(tokens))) as client:
        await client.get_topic_partitions("persistent://public/default/t")
        assert broker.of_type(CommandType.CONNECT)[0].command.connect.auth_data == b"token-1"  # type: ignore[attr-defined]
        broker.writers[0].write(auth_challenge())
        (response,) = await broker.wait_for(CommandType.AUTH_RESPONSE)
        body = response.command.authResponse  # type: ignore[attr-defined]
        assert body.response.auth_method_name == "token" and body.response.auth_data == b"token-2"
        assert body.client_version and body.protocol_version > 0
        broker.writers[0].write(auth_challenge())
        responses = await broker.wait_for(CommandType.AUTH_RESPONSE, 2)
        assert responses[1].command.authResponse.response.auth_data == b"token-3"  # type: ignore[attr-defined]
        # the connection stays usable after the refresh
        assert await client.get_topic_partitions("persistent://public/default/t") == [
            "persistent://public/default/t"
        ]
    await broker.close()


async def test_a_failing_token_supplier_closes_the_connection_on_challenge():
    calls = 0

    def supplier() -> str:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("token service down")
        return "token-1"

    broker = await AuthBroker().start()
    async with AsyncClient(broker.url, authentication=AuthenticationToken(supplier)) as client:
        await client.get_topic_partitions("persistent://public/default/t")
        cnx = next(iter(client.pool._connections.values()))
        broker.writers[0].write(auth_challenge())
        await asyncio.wait_for(cnx.wait_closed(), 5)
        assert not broker.of_type(CommandType.AUTH_RESPONSE)
    await broker.close()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ServerError.AuthenticationError, AuthenticationError),
        (ServerError.AuthorizationError, AuthorizationError),
    ],
)
async def test_refused_connect_fails_at_once_and_is_not_retried(
    code: ServerError, error: type[BrokerResponseError]
):
    def refuse(frame: object) -> bytes:
        return commands.new_error(-1, code, "Unable to authenticate: bad token")

    broker = await AuthBroker(refuse).start()
    started = time.monotonic()
    async with AsyncClient(
        broker.url, authentication=AuthenticationToken("bad"), operation_timeout_seconds=20
    ) as client:
        with pytest.raises(error, match="bad token") as info:
            await client.get_topic_partitions("persistent://public/default/t")
    assert info.value.code == code and not info.value.retryable
    assert broker.connects == 1  # one CONNECT: not retried until the operation timeout
    assert time.monotonic() - started < 15
    await broker.close()


def test_authentication_arguments_are_checked():
    with pytest.raises(ValueError, match="empty"):
        AuthenticationToken("")
    with pytest.raises(TypeError, match="token"):
        AuthenticationToken(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="':'"):
        AuthenticationBasic("a:b", "pw")
    with pytest.raises(ValueError, match="auth_params_string"):
        AuthenticationBasic(auth_params_string="user:pw")
    with pytest.raises(TypeError, match="authentication"):
        AsyncClient("pulsar://127.0.0.1:1", authentication="token")


def test_authentication_from_java_plugin_names_and_params(tmp_path: Path):
    token = authentication_from_params("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token:abc")
    assert isinstance(token, AuthenticationToken) and token.auth_data() == b"abc"
    assert authentication_from_params("token", "plain").auth_data() == b"plain"
    path = tmp_path / "token.txt"
    path.write_text("first\n")
    from_file = authentication_from_params("token", f"file://{path}")
    assert from_file.auth_data() == b"first"
    path.write_text("second\n")  # read again at every use: a rotated token file is picked up
    assert from_file.auth_data() == b"second"
    basic = authentication_from_params(
        "org.apache.pulsar.client.impl.auth.AuthenticationBasic", '{"userId": "u", "password": "p"}'
    )
    assert basic.method_name == "basic" and basic.auth_data() == b"u:p"
    tls = authentication_from_params(
        "org.apache.pulsar.client.impl.auth.AuthenticationTls", "tlsCertFile:/c,tlsKeyFile:/k"
    )
    assert tls.method_name == "tls" and tls.tls_certificate() == ("/c", "/k")
    with pytest.raises(ValueError, match="unknown authentication plugin"):
        authentication_from_params("com.example.Kerberos", "")
    with pytest.raises(ValueError, match="userId and password"):
        authentication_from_params("basic", '{"userId": "u"}')


async def test_auth_challenge_for_basic_and_tls_methods(tmp_path: Path):
    for authentication, expected in (
        (AuthenticationBasic("alice", "pw"), b"alice:pw"),
        (
            AuthenticationTLS(tmp_path / "c.pem", tmp_path / "k.pem"),
            b"",
        ),  # empty: the identity is the certificate
    ):
        broker = await AuthBroker().start()
        async with AsyncClient(broker.url, authentication=authentication) as client:
            await client.get_topic_partitions("persistent://public/default/t")
            broker.writers[0].write(auth_challenge(authentication.method_name))
            (response,) = await broker.wait_for(CommandType.AUTH_RESPONSE)
            data = response.command.authResponse.response  # type: ignore[attr-defined]
            assert data.auth_method_name == authentication.method_name
            assert data.HasField("auth_data") and data.auth_data == expected
        await broker.close()
