"""The ``tls`` method over a real TLS connection, in process: a ServerCnx served by an asyncio TLS server
that requires a client certificate (trustme CA) takes the role from the certificate's subject CN, read from
the transport's ``ssl_object`` where the connection is made; without the ``tls`` provider's certificate the
CONNECT is refused. (The broker's TLS listeners come with the TLS work; this checks the plumbing.)"""

from __future__ import annotations

import asyncio
import ssl

import trustme
from aiohttp import web

from quasar.broker.admin.auth import auth_middleware
from quasar.broker.auth import BrokerSecurity, ResourcesPolicySource
from quasar.broker.config import BrokerConfig
from quasar.broker.resources import BrokerResources
from quasar.broker.server_cnx import ServerCnx
from quasar.protocol import NEED_DATA, CommandType, FrameDecoder, requests
from quasar.protocol.enums import ServerError
from quasar.security.authentication import AuthenticationService
from quasar.security.authorization import AuthorizationService
from quasar.security.providers import TlsProvider
from tests.broker.test_server_cnx import FakeService


async def connect_over_tls(client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext, method: str):
    service = FakeService()
    service.security = BrokerSecurity(AuthenticationService([TlsProvider()]), None)  # type: ignore[misc]
    made: list[ServerCnx] = []

    def factory() -> ServerCnx:
        made.append(ServerCnx(service, BrokerConfig(), set()))  # type: ignore[arg-type]
        return made[-1]

    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"), 10
        )
        writer.write(requests.new_connect("tls-test", auth_method_name=method, auth_data=b""))
        decoder = FrameDecoder()
        frame = NEED_DATA
        while frame is NEED_DATA:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, "closed without an answer"
            decoder.receive_data(chunk)
            frame = decoder.next_frame()
        writer.close()
        return frame, made[0]
    finally:
        server.close()
        await server.wait_closed()


def contexts(with_client_cert: bool) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_OPTIONAL
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client_ctx)
    if with_client_cert:
        ca.issue_cert("client.example", common_name="tls-role").configure_cert(client_ctx)
    return client_ctx, server_ctx


async def test_role_is_the_client_certificate_cn() -> None:
    frame, cnx = await connect_over_tls(*contexts(with_client_cert=True), "tls")
    assert frame.type == CommandType.CONNECTED
    assert cnx.peer_certificate_der and cnx.role == "tls-role"


async def test_tls_method_without_a_client_certificate_is_refused() -> None:
    frame, cnx = await connect_over_tls(*contexts(with_client_cert=False), "tls")
    assert frame.type == CommandType.ERROR
    assert frame.command.error.error == ServerError.AuthenticationError
    assert cnx.peer_certificate_der is None and cnx.role is None


async def test_http_middleware_authenticates_the_client_certificate() -> None:
    """The admin middleware reads the TLS client certificate of an aiohttp request (``peer_certificate_der``):
    with one the request runs as its CN (a super user here, so a super-user route answers), without one it is
    answered 401."""
    source = ResourcesPolicySource(BrokerResources(None))  # type: ignore[arg-type]
    security = BrokerSecurity(
        AuthenticationService([TlsProvider()]), AuthorizationService(["tls-role"], source)
    )

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="served")

    app = web.Application(middlewares=[auth_middleware(security)])
    app.router.add_get("/admin/v2/broker-stats/loop-lag", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        answers = []
        for with_cert in (True, False):
            client_ctx, server_ctx = contexts(with_client_cert=with_cert)
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
            )
            writer.write(
                b"GET /admin/v2/broker-stats/loop-lag HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            answers.append(await asyncio.wait_for(reader.read(), 10))
            writer.close()
            await site.stop()
        assert answers[0].startswith(b"HTTP/1.1 200") and answers[0].endswith(b"served")
        assert answers[1].startswith(b"HTTP/1.1 401")
    finally:
        await runner.cleanup()
