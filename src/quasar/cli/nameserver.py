"""``quasar nameserver``: run a name server (RocketMQ's ``mqnamesrv``): broker registrations in, routes out.

Readiness line on stdout, once both listeners are bound (tools and tests wait for it)::

    quasar nameserver ready: HOST:PORT http://HOST:HTTP_PORT

SIGTERM and SIGINT stop it cleanly (listeners and connections closed, owned tasks cancelled). Every setting
comes from the command line: the name server accepts no configuration over the wire.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from quasar.nameserver.server import NameServer
from quasar.protocol.remoting import DEFAULT_MAX_REMOTING_FRAME_SIZE

log = logging.getLogger("quasar")


async def _serve(server: NameServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    print(f"quasar nameserver ready: {server.address} {server.http_url}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await server.stop()
        log.info("stopped cleanly")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind and advertise.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9876,
    show_default=True,
    help="Route port; 0 = any free port.",
)
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    default=9877,
    show_default=True,
    help="Port of the read-only HTTP view (GET /routes, /routes/{domain}/{tenant}/{ns}/{topic}, /brokers); "
    "0 = any free port.",
)
@click.option(
    "--scan-interval",
    "scan_interval_s",
    type=click.FloatRange(0.01),
    default=10.0,
    show_default=True,
    help="Seconds between scans for brokers silent longer than their heartbeat timeout (120 s by default).",
)
@click.option(
    "--max-frame-size",
    type=click.IntRange(1024),
    default=DEFAULT_MAX_REMOTING_FRAME_SIZE,
    show_default=True,
    help="Largest accepted request frame, bytes; a larger one closes its connection.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def nameserver(
    host: str, port: int, http_port: int, scan_interval_s: float, max_frame_size: int, log_level: str
) -> None:
    """Start a name server: routes on HOST:PORT, a JSON view on http://HOST:HTTP_PORT."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server = NameServer(
        host=host,
        port=port,
        http_port=http_port,
        scan_interval_s=scan_interval_s,
        max_frame_size=max_frame_size,
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_serve(server))
    else:
        uvloop.run(_serve(server))
