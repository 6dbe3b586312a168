"""Quasar's name server: a RocketMQ-style route registry (``quasar nameserver``), its client and the broker's
registrar.

* :class:`NameServer` (``server.py``) serves the remoting protocol (:mod:`quasar.protocol.remoting`) and an HTTP
  view; :class:`RouteInfoManager` (``routes.py``) holds the tables.
* :class:`NameServerClient` (``client.py``) sends requests to one name server.
* :class:`BrokerRegistrar` (``registrar.py``) keeps a broker registered with every name server; the broker's
  composition root builds it from a :class:`BrokerIdentity`.

Request and response shapes are in ``messages.py``; TopicRouteData and ClusterInfo in ``routes.py``.
"""

from __future__ import annotations

from .client import NameServerClient
from .errors import (
    InvalidRequestError,
    NameServerConnectionError,
    NameServerError,
    NameServerResponseError,
    NameServerTimeoutError,
)
from .messages import BrokerIdentity, DataVersion
from .registrar import BrokerRegistrar
from .routes import RouteInfoManager
from .server import NameServer

__all__ = [
    "BrokerIdentity",
    "BrokerRegistrar",
    "DataVersion",
    "InvalidRequestError",
    "NameServer",
    "NameServerClient",
    "NameServerConnectionError",
    "NameServerError",
    "NameServerResponseError",
    "NameServerTimeoutError",
    "RouteInfoManager",
]
