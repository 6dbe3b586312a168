"""``quasar standalone``: run a broker with embedded storage on one machine (Pulsar's ``pulsar standalone``)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig
from quasar.broker.gc_tuning import tune_gc
from quasar.native import compiled_modules

log = logging.getLogger("quasar")


def _install_event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(config: BrokerConfig) -> None:
    app = BrokerApp(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await app.start()
    tune_gc(config.gc_gen0_threshold, config.gc_freeze_after_start)
    log.info(
        "compiled hot paths: %s", ", ".join(compiled_modules()) or "none (QUASAR_PURE_PYTHON or not built)"
    )
    # The readiness line: tests and tools wait for it.
    print(f"quasar standalone ready: {app.service_url} {app.web_service_url}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await app.stop()
        log.info("stopped cleanly")


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the commit log, consume queues and metadata [default: ./data].",
)
@click.option("--host", default=None, help="Address to bind and advertise [default: 127.0.0.1].")
@click.option(
    "--port", type=int, default=None, help="Pulsar binary protocol port; 0 = any free port [default: 6650]."
)
@click.option(
    "--admin-port", type=int, default=None, help="Admin REST port; 0 = any free port [default: 8080]."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="TOML file of broker settings (names as in BrokerConfig); command-line options win.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def standalone(
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    admin_port: int | None,
    config_file: Path | None,
    log_level: str,
) -> None:
    """Start a standalone broker: pulsar://HOST:PORT and the admin API on http://HOST:ADMIN_PORT."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {
        k: v
        for k, v in {"data_dir": data_dir, "host": host, "port": port, "admin_port": admin_port}.items()
        if v is not None
    }
    try:
        if config_file is not None:
            config = BrokerConfig.from_file(config_file, **overrides)
        else:
            config = BrokerConfig.from_mapping(overrides)
    except (ValueError, OSError) as exc:
        raise click.BadParameter(str(exc)) from exc
    _install_event_loop_policy()
    asyncio.run(_serve(config))
