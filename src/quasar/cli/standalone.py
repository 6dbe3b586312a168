"""``quasar standalone``: run a broker with embedded storage on one machine (Pulsar's ``pulsar standalone``)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import click

from quasar.broker.app import BrokerApp
from quasar.broker.auth import build_authentication
from quasar.broker.config import BrokerConfig
from quasar.broker.gc_tuning import tune_gc
from quasar.native import compiled_modules

log = logging.getLogger("quasar")


def install_event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def serve(
    config: BrokerConfig,
    ready_line: Callable[[BrokerApp], str],
    *,
    companions: Callable[[BrokerApp], list[Companion]] = lambda app: [],
    make_app: Callable[[BrokerConfig], BrokerApp] = BrokerApp,
) -> None:
    """Run ``BrokerApp(config)`` until SIGTERM/SIGINT: start it, then each companion (e.g. the name-server
    registrar of ``quasar broker``), print ``ready_line(app)`` on stdout (tests and tools wait for it), and
    on the signal stop the companions (in reverse) and the broker."""
    app = make_app(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await app.start()
    started: list[Companion] = []
    try:
        for companion in companions(app):
            await companion.start()
            started.append(companion)
        tune_gc(config.gc_gen0_threshold, config.gc_freeze_after_start)
        log.info(
            "compiled hot paths: %s",
            ", ".join(compiled_modules()) or "none (QUASAR_PURE_PYTHON or not built)",
        )
        print(ready_line(app), flush=True)
        await stop.wait()
    finally:
        log.info("shutting down")
        for companion in reversed(started):
            await companion.stop()
        await app.stop()
        log.info("stopped cleanly")


class Companion(Protocol):
    """Something started after the broker and stopped before it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def load_config(config_file: Path | None, overrides: dict[str, Any]) -> BrokerConfig:
    """The broker config from ``config_file`` (TOML) with ``overrides`` (None values dropped) applied;
    raises click.BadParameter with the reason on a bad file or value."""
    values = {k: v for k, v in overrides.items() if v is not None}
    try:
        if config_file is not None:
            config = BrokerConfig.from_file(config_file, **values)
        else:
            config = BrokerConfig.from_mapping(values)
        build_authentication(config)  # keys and htpasswd files readable, before anything starts
        return config
    except (ValueError, OSError) as exc:
        raise click.BadParameter(str(exc)) from exc


def setup_logging(log_level: str) -> None:
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


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
    setup_logging(log_level)
    config = load_config(
        config_file, {"data_dir": data_dir, "host": host, "port": port, "admin_port": admin_port}
    )
    install_event_loop_policy()
    asyncio.run(
        serve(config, lambda app: f"quasar standalone ready: {app.service_url} {app.web_service_url}")
    )
