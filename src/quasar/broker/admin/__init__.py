"""Admin REST API (aiohttp), Pulsar admin v2 paths and JSON shapes."""

from quasar.broker.admin.routes import build_admin_app
from quasar.broker.admin.tls import peer_certificate_der

__all__ = ["build_admin_app", "peer_certificate_der"]
