"""``authenticate_metrics_endpoint`` (Pulsar's ``authenticateMetricsEndpoint``): with authentication on,
``/metrics`` is open by default and needs valid credentials (any role) when the setting is true; the rest of
the admin API is authenticated either way (``admin.auth``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from quasar.broker.admin.auth import auth_middleware
from quasar.broker.auth import BrokerSecurity
from quasar.broker.metrics import add_metrics_route, new_registry
from quasar.security.authentication import AuthenticationError


@dataclass
class _Result:
    role: str


class _BearerOnly:
    """An authentication service that accepts ``Bearer good`` as role ``anyone``."""

    def authenticate_http(self, header: str | None, cert: object, method: str | None) -> _Result:
        if header != "Bearer good":
            raise AuthenticationError("bad or missing token")
        return _Result("anyone")


async def _client(authenticate_metrics_endpoint: bool) -> TestClient:
    security = BrokerSecurity(authentication=_BearerOnly(), authorization=None)  # type: ignore[arg-type]
    app = web.Application(
        middlewares=[auth_middleware(security, authenticate_metrics_endpoint=authenticate_metrics_endpoint)]
    )
    add_metrics_route(app, new_registry(process=True))

    async def tenants(request: web.Request) -> web.Response:
        return web.json_response([])

    app.router.add_get("/admin/v2/tenants", tenants)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.mark.parametrize("authenticate", [False, True])
async def test_metrics_need_credentials_only_when_the_setting_says_so(authenticate: bool) -> None:
    client = await _client(authenticate)
    try:
        anonymous = await client.get("/metrics")
        assert anonymous.status == (401 if authenticate else 200)
        good = await client.get("/metrics", headers={"Authorization": "Bearer good"})
        assert good.status == 200
        assert "process_open_fds" in await good.text()
        assert (await client.get("/admin/v2/tenants")).status == 401  # the admin API stays authenticated
    finally:
        await client.close()
