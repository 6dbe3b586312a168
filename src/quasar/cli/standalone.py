"""``quasar standalone``: run a broker with embedded storage on one machine (Pulsar's ``pulsar standalone``)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from quasar.broker.app import BrokerApp
from quasar.broker.auth import build_authentication
from quasar.broker.config import BrokerConfig
from quasar.broker.gc_tuning import tune_gc
from quasar.native import compiled_modules
from quasar.security import TlsConfigError

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


F = TypeVar("F", bound=Callable[..., Any])

TLS_OPTION_NAMES = (
    "broker_service_port_tls",
    "web_service_port_tls",
    "tls_certificate_file_path",
    "tls_key_file_path",
    "tls_trust_certs_file_path",
)
"""The BrokerConfig settings :func:`tls_options` adds flags for (the other TLS settings: --config file)."""


def tls_options(command: F) -> F:
    """Add the TLS flags of ``quasar standalone`` / ``quasar broker`` to ``command`` (keyword arguments named
    as in :data:`TLS_OPTION_NAMES`, None when not given)."""
    file = click.Path(dir_okay=False, exists=True)
    options = [
        click.option(
            "--broker-service-port-tls",
            type=int,
            default=None,
            help="pulsar+ssl:// listener port (Pulsar's convention 6651); 0 = a free port [default: off].",
        ),
        click.option(
            "--web-service-port-tls",
            type=int,
            default=None,
            help="https:// admin REST port (Pulsar's convention 8443); 0 = a free port [default: off].",
        ),
        click.option(
            "--tls-certificate-file-path", type=file, default=None, help="Broker certificate chain (PEM)."
        ),
        click.option("--tls-key-file-path", type=file, default=None, help="Broker private key (PEM)."),
        click.option(
            "--tls-trust-certs-file-path",
            type=file,
            default=None,
            help="CA bundle (PEM) client certificates must chain to.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def rocketmq_options(command: F) -> F:
    """Add ``--rocketmq-port`` / ``--no-rocketmq`` (keyword arguments ``rocketmq_port``, ``rocketmq_enabled``;
    None when not given)."""
    command = click.option(
        "--rocketmq/--no-rocketmq",
        "rocketmq_enabled",
        default=None,
        help="Serve RocketMQ 5's gRPC API for the official RocketMQ clients [default: on].",
    )(command)
    return click.option(
        "--rocketmq-port",
        type=int,
        default=None,
        help="RocketMQ gRPC port (the RocketMQ proxy's 8081); 0 = any free port [default: 8081].",
    )(command)


def tls_ready_suffix(app: BrokerApp) -> str:
    """`` tls=pulsar+ssl://H:P https=https://H:P`` for the TLS listeners that are on ("" when none is), then
    `` rocketmq=H:P`` (and `` rocketmq+ssl=H:P``) when the RocketMQ endpoint is on: appended to the readiness
    lines after their fixed fields."""
    suffix = ""
    if app.service_url_tls:
        suffix += f" tls={app.service_url_tls}"
    if app.web_service_url_tls:
        suffix += f" https={app.web_service_url_tls}"
    if app.rocketmq is not None:
        suffix += f" rocketmq={app.rocketmq.address}"
        if app.rocketmq.tls_address:
            suffix += f" rocketmq+ssl={app.rocketmq.tls_address}"
    return suffix


def run_broker(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)``, a TLS file the broker cannot use reported as a usage error (no traceback)."""
    try:
        asyncio.run(main)
    except TlsConfigError as exc:
        raise click.ClickException(str(exc)) from None


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
@tls_options
@rocketmq_options
def standalone(
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    admin_port: int | None,
    config_file: Path | None,
    log_level: str,
    **tls: Any,
) -> None:
    """Start a standalone broker: pulsar://HOST:PORT and the admin API on http://HOST:ADMIN_PORT, RocketMQ's
    gRPC API on HOST:ROCKETMQ_PORT (and, with the TLS flags, pulsar+ssl:// and https:// listeners)."""
    setup_logging(log_level)
    config = load_config(
        config_file, {"data_dir": data_dir, "host": host, "port": port, "admin_port": admin_port, **tls}
    )
    install_event_loop_policy()
    run_broker(serve(config, ready_line))


def ready_line(app: BrokerApp) -> str:
    """``quasar standalone ready: pulsar://H:P http://H:A``, then `` tls=pulsar+ssl://H:P https=https://H:P``
    for the TLS listeners that are on and `` rocketmq=H:P`` for the RocketMQ endpoint."""
    return f"quasar standalone ready: {app.service_url} {app.web_service_url}{tls_ready_suffix(app)}"
