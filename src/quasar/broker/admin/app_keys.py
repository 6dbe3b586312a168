"""Typed keys (aiohttp ``web.AppKey``) of the state the admin application's handlers share.

A module of its own so that the route modules (:mod:`~quasar.broker.admin.routes`,
:mod:`~quasar.broker.admin.query`) both read them without importing each other.
"""

from __future__ import annotations

from aiohttp import web

from quasar.broker.broker_service import BrokerService

__all__ = ["SERVICE_KEY"]

#: The BrokerService the admin API serves; set by :func:`~quasar.broker.admin.routes.build_admin_app`.
SERVICE_KEY = web.AppKey("service", BrokerService)
