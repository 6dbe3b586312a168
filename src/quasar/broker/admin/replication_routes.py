"""Admin REST of a replicated broker group (Quasar; RocketMQ's ``getBrokerHAStatus`` and the controller's
``electMaster`` in Pulsar-style paths):

- ``GET /admin/v2/replication``: this broker's replication status (role, master epoch, leader, sync-state set,
  and per slave on a master: connected, acked commit-log offset, in sync; on a slave: its HA client);
  404 when this broker does not replicate.
- ``POST /admin/v2/replication/failover``: manual switch (``quasar admin broker-group failover G``). On the
  group's master: it resigns and an in-sync slave takes over (204); 409 when no slave is in sync (nothing to
  fail over to); asked at a slave of the group: 307 to the master's admin URL.
"""

from __future__ import annotations

from aiohttp import web

from quasar.broker.admin.app_keys import SERVICE_KEY
from quasar.broker.replication_port import ReplicationPort

__all__ = ["REPLICATION_KEY", "register"]

#: The broker's replication (absent from the app when the broker does not replicate).
REPLICATION_KEY = web.AppKey("replication", ReplicationPort)


def _replication(request: web.Request) -> ReplicationPort:
    replication = request.app.get(REPLICATION_KEY)
    if replication is None:
        raise web.HTTPNotFound(
            text='{"reason": "this broker does not replicate (no broker_role)"}',
            content_type="application/json",
        )
    return replication


async def get_replication(request: web.Request) -> web.Response:
    return web.json_response(_replication(request).status())


async def post_failover(request: web.Request) -> web.Response:
    replication = _replication(request)
    if replication.status().get("role") != "master":
        ownership = request.app[SERVICE_KEY].ownership
        master = None if ownership is None else ownership.membership.master_of(ownership.me.group)
        if master is None or master.web_service_url == request.app[SERVICE_KEY].web_service_url:
            return web.json_response({"reason": "the broker group has no live master now"}, status=503)
        raise web.HTTPTemporaryRedirect(master.web_service_url.rstrip("/") + request.path_qs)
    refusal = await replication.request_failover()
    if refusal is not None:
        return web.json_response({"reason": refusal}, status=409)
    return web.Response(status=204)


def register(app: web.Application, replication: ReplicationPort | None) -> None:
    """Add the routes to ``app``; ``replication`` None: they answer 404."""
    if replication is not None:
        app[REPLICATION_KEY] = replication
    app.add_routes(
        [
            web.get("/admin/v2/replication", get_replication),
            web.post("/admin/v2/replication/failover", post_failover),
        ]
    )
