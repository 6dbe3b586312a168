"""The web dashboard on the admin port: static files shipped in the package, served without authentication.

- ``GET /dashboard`` answers ``308`` to ``/dashboard/``; ``GET /dashboard/`` is the single-page app
  (``dashboard/index.html``); ``GET /dashboard/static/{name}`` its scripts and styles (``dashboard/static/``).
- The files hold no data: the page's scripts call the admin REST API (``/admin/v2/...``, ``/metrics``) from
  the browser with the token the user pastes (``Authorization: Bearer``), so what a user sees is what the
  API lets their role read (``admin.auth``). This is why these routes are open (``auth.OPEN_ROUTES``), as
  Pulsar Manager's static pages are.
- Files are read through :mod:`importlib.resources` (they are package data, see ``pyproject.toml``), once, at
  application build; only names found there are served (no path from the request reaches the file system),
  anything else is 404. Each answer carries ``Cache-Control: no-cache`` (a broker upgrade changes them),
  ``X-Content-Type-Options: nosniff`` and a Content-Security-Policy allowing scripts, styles and requests to
  this origin only (no inline script), so a topic name or message body shown by the page cannot run as code
  even if it were ever inserted as markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType

from aiohttp import web

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "DASHBOARD_ROUTES",
    "DashboardFile",
    "dashboard_files",
    "register",
]

PACKAGE = "quasar.broker.admin"
DIRECTORY = "dashboard"

INDEX_ROUTE = "/dashboard/"
STATIC_ROUTE = "/dashboard/static/{name}"
DASHBOARD_ROUTES = frozenset({"/dashboard", INDEX_ROUTE, STATIC_ROUTE})
"""Route templates of the dashboard: open without credentials (``admin.auth``)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
)

_CONTENT_TYPES = MappingProxyType(
    {
        ".html": "text/html",
        ".js": "text/javascript",
        ".css": "text/css",
        ".svg": "image/svg+xml",
        ".png": "image/png",
        ".txt": "text/plain",
    }
)
_TEXT_SUFFIXES = frozenset({".html", ".js", ".css", ".svg", ".txt"})


@dataclass(frozen=True)
class DashboardFile:
    """One shipped file: its bytes and media type (``text/*`` ones are UTF-8)."""

    body: bytes
    content_type: str


def _file(entry: Traversable) -> DashboardFile | None:
    suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
    content_type = _CONTENT_TYPES.get(suffix)
    if content_type is None:
        return None
    if suffix in _TEXT_SUFFIXES:
        content_type += "; charset=utf-8"
    return DashboardFile(entry.read_bytes(), content_type)


def dashboard_files() -> tuple[DashboardFile, dict[str, DashboardFile]]:
    """``(index.html, {static file name: file})`` read from the package through :mod:`importlib.resources`.

    Only files with a known suffix (html, js, css, svg, png, txt) are listed. Raises FileNotFoundError when
    the package was installed without its dashboard files (a packaging error)."""
    root = resources.files(PACKAGE).joinpath(DIRECTORY)
    index = _file(root.joinpath("index.html"))
    if index is None or not root.joinpath("static").is_dir():
        raise FileNotFoundError(f"the dashboard files are missing from {PACKAGE}/{DIRECTORY}")
    static: dict[str, DashboardFile] = {}
    for entry in root.joinpath("static").iterdir():
        if entry.is_file():
            found = _file(entry)
            if found is not None:
                static[entry.name] = found
    return index, static


def _answer(found: DashboardFile) -> web.Response:
    return web.Response(
        body=found.body,
        headers={
            "Content-Type": found.content_type,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "Referrer-Policy": "no-referrer",
        },
    )


def register(app: web.Application) -> None:
    """Add the dashboard routes to the admin application (reads the files once; see the module docstring)."""
    index, static = dashboard_files()

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPPermanentRedirect(INDEX_ROUTE)

    async def get_index(request: web.Request) -> web.Response:
        return _answer(index)

    async def get_static(request: web.Request) -> web.Response:
        found = static.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(text="no such dashboard file")
        return _answer(found)

    app.add_routes(
        [
            web.get("/dashboard", redirect),
            web.get(INDEX_ROUTE, get_index),
            web.get(STATIC_ROUTE, get_static),
        ]
    )
