"""What the admin route modules read from a request: the broker service, an existing namespace, a boolean
query parameter; and the route templates they share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.errors import NamespaceNotFoundError

if TYPE_CHECKING:
    from quasar.broker.broker_service import BrokerService

__all__ = ["DOMAIN_LIST_PATH", "TOPIC_PATH", "existing_namespace", "query_flag", "service_of"]

_DOMAIN = "{domain:persistent|non-persistent}"
DOMAIN_LIST_PATH = f"/admin/v2/{_DOMAIN}/{{tenant}}/{{namespace}}"
"""``/admin/v2/{domain}/{tenant}/{namespace}``, where ``{domain}`` matches only ``persistent`` and
``non-persistent``: the topic templates then never take the paths under ``/admin/v2/namespaces/...`` (a
``PUT .../namespaces/t/ns/topics`` is 405, not a topic named ``topics`` in a domain named ``namespaces``).
Route tables and the OpenAPI document name it by its canonical form, ``/admin/v2/{domain}/...``."""
TOPIC_PATH = DOMAIN_LIST_PATH + "/{topic}"
"""``/admin/v2/{domain}/{tenant}/{namespace}/{topic}`` with the domain restricted as in DOMAIN_LIST_PATH."""


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


def query_flag(request: web.Request, name: str, default: bool = False) -> bool:
    """The boolean query parameter ``name``: ``true`` or ``false`` (any case), ``default`` when absent.

    Raises ValueError (400) for any other value (the empty one too) or a repeated parameter; Pulsar's JAX-RS
    reads any other value as false, Quasar refuses it so that a typo (``force=ture``) is not silently a no-op.
    """
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise ValueError(f"query parameter {name!r} is given {len(values)} times")
    if not values:
        return default
    raw = values[0]
    lowered = raw.lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"query parameter {name!r} must be true or false, got {raw!r:.50}")
    return lowered == "true"
