"""The dashboard's static files: shipped as package data and found through importlib.resources, served by
``dashboard_routes`` with their media types and security headers, open without credentials while the admin
API behind them is not."""

from __future__ import annotations

import re
from importlib import resources

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from quasar.broker.admin import dashboard_routes
from quasar.broker.admin.auth import auth_middleware
from quasar.broker.auth import BrokerSecurity
from quasar.security.authentication import AuthenticationService

IMPORT = re.compile(r"""^import [^;]*? from "\./([^"]+)";""", re.MULTILINE | re.DOTALL)


def test_static_files_are_found_through_importlib_resources() -> None:
    root = resources.files("quasar.broker.admin").joinpath("dashboard")
    assert root.joinpath("index.html").is_file()
    index, static = dashboard_routes.dashboard_files()
    assert index.content_type == "text/html; charset=utf-8"
    assert b'<script type="module" src="static/app.js">' in index.body
    assert b'href="static/style.css"' in index.body
    assert {"app.js", "style.css", "chart.js", "metrics.js", "messages.js"} <= set(static)
    assert static["app.js"].content_type == "text/javascript; charset=utf-8"
    # every module a script imports is shipped too (a missing one would break the page in a real install)
    for name, found in static.items():
        if name.endswith(".js"):
            for imported in IMPORT.findall(found.body.decode()):
                assert imported in static, f"{name} imports {imported}, which is not shipped"


def test_no_script_puts_data_into_markup() -> None:
    """Topic names and message bodies are user input: the scripts build the DOM with text nodes only."""
    _, static = dashboard_routes.dashboard_files()
    for name, found in static.items():
        if name.endswith(".js"):
            text = found.body.decode()
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
                assert sink not in text, f"{name} uses {sink}"


def _app(security: BrokerSecurity) -> web.Application:
    async def tenants(request: web.Request) -> web.Response:
        return web.json_response(["public"])

    app = web.Application(middlewares=[auth_middleware(security)])
    app.router.add_get("/admin/v2/tenants", tenants)
    dashboard_routes.register(app)
    return app


async def test_served_open_with_types_and_headers_while_the_api_needs_credentials() -> None:
    security = BrokerSecurity(AuthenticationService([], anonymous_user_role=""), None)
    async with TestClient(TestServer(_app(security))) as client:
        redirect = await client.get("/dashboard", allow_redirects=False)
        assert redirect.status == 308 and redirect.headers["Location"] == "/dashboard/"
        page = await client.get("/dashboard/")
        assert page.status == 200 and page.content_type == "text/html"
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        script = await client.get("/dashboard/static/app.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        assert "hashchange" in await script.text()
        css = await client.get("/dashboard/static/style.css")
        assert css.status == 200 and css.content_type == "text/css"
        assert (await client.get("/dashboard/static/nope.js")).status == 404
        assert (await client.get("/dashboard/static/..%2Fdashboard_routes.py")).status == 404
        assert (await client.get("/dashboard/static/../../admin/v2/tenants")).status == 401
        api = await client.get("/admin/v2/tenants")
        assert api.status == 401
        assert (await client.post("/dashboard/")).status in (401, 405)
