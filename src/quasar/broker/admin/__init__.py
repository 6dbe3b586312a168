"""Admin REST API (aiohttp), Pulsar admin v2 paths and JSON shapes."""

from quasar.broker.admin.routes import build_admin_app

__all__ = ["build_admin_app"]
