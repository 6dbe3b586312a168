"""What the admin route modules read from a request: the broker service and an existing namespace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.errors import NamespaceNotFoundError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = ["existing_namespace", "service_of"]


def service_of(request: web.Request) -> BrokerService:
    """The BrokerService the admin application serves."""
    return request.app[SERVICE_KEY]


def existing_namespace(request: web.Request) -> str:
    """``tenant/namespace`` of the route's ``{tenant}`` and ``{namespace}``; raises NamespaceNotFoundError (404
    through the errors middleware) when it does not exist."""
    namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
    if not service_of(request).namespace_exists(namespace):
        raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
    return namespace
