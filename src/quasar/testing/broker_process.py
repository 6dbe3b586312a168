"""Run a real ``quasar standalone`` broker as a subprocess, for interop tests, demos and benchmarks.

The broker is started on port 0 (any free port) unless told otherwise; :meth:`BrokerProcess.start` waits for
the readiness line the broker prints on stdout once both listeners are bound::

    quasar standalone ready: pulsar://HOST:PORT http://HOST:ADMIN_PORT [tls=pulsar+ssl://H:P] [https=https://H:P]
        [rocketmq=H:P] [rocketmq+ssl=H:P]

and takes the service URL and admin URL from it (and the TLS URLs, when the broker serves TLS). Teardown
follows the nats-server test harness: SIGTERM, wait, then SIGKILL if the broker has not exited. stdout and
stderr go to files (one pair per start, numbered, in ``log_dir``) so a failing test can show the broker's log
and restarts do not overwrite the previous run's.

The lifecycle is :class:`~quasar.testing.subprocess_harness.SubprocessHarness`'s, shared with the name server
and ``cluster up`` harnesses.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from quasar.errors import QuasarError
from quasar.testing.subprocess_harness import QUASAR_COMMAND, SubprocessHarness

__all__ = ["READY_LINE", "BrokerProcess", "BrokerProcessError", "parse_ready_line"]

#: The readiness line: group 1 is the Pulsar service URL, group 2 the admin (web service) URL; groups 3 and 4
#: the ``pulsar+ssl://`` and ``https://`` URLs when the broker serves TLS (None otherwise); group 5 the
#: RocketMQ endpoint ``host:port`` when it is on, group 6 its TLS endpoint when that is on.
READY_LINE = re.compile(
    r"quasar (?:standalone|broker) ready: (pulsar(?:\+ssl)?://\S+) (https?://\S+)"
    r"(?:[^\n]*? tls=(pulsar\+ssl://\S+))?(?:[^\n]*? https=(https://\S+))?(?:[^\n]*? rocketmq=(\S+))?"
    r"(?:[^\n]*? rocketmq\+ssl=(\S+))?"
)


class BrokerProcessError(QuasarError):
    """The broker subprocess could not be started, exited early, or did not become ready in time."""


def parse_ready_line(text: str) -> tuple[str, str] | None:
    """Return ``(service_url, admin_url)`` from the first readiness line in ``text``, or None if none."""
    match = READY_LINE.search(text)
    return (match.group(1), match.group(2)) if match else None


class BrokerProcess(SubprocessHarness):
    """One ``quasar standalone`` subprocess over a data directory; may be started again on the same directory.

    Args:
        data_dir: the broker's ``--data-dir`` (created if missing); kept across restarts.
        extra_args: further ``quasar standalone`` options, e.g. ``("--log-level", "DEBUG")``.
        host: ``--host`` to bind and advertise.
        port: Pulsar protocol port, 0 = any free port. :meth:`restart` can reuse the bound port.
        admin_port: admin REST port, 0 = any free port.
        log_dir: where ``broker-<n>.stdout.log`` / ``broker-<n>.stderr.log`` go; default ``<data_dir>.logs``
            (a sibling of the data directory, so the broker never sees them).
        startup_timeout_s: seconds :meth:`start` waits for the readiness line.
        env: extra environment variables for the subprocess (merged over ``os.environ``).
        python: the interpreter to run; default ``sys.executable``.
        subcommand: ``standalone``, or ``broker`` for a cluster member (its options go in ``extra_args``).
        rocketmq_port: the RocketMQ gRPC port (0 = any free port); None (default) runs the broker with
            ``--no-rocketmq``, so tests do not all ask for 8081. The bound one is ``rocketmq_address``.

    Raises:
        ValueError: a port is outside 0..65535 or a timeout is not positive.
    """

    _what: ClassVar[str] = "broker"
    _error: ClassVar[type[QuasarError]] = BrokerProcessError
    _ready_line: ClassVar[re.Pattern[str]] = READY_LINE

    def __init__(
        self,
        data_dir: Path | str,
        *,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        admin_port: int = 0,
        log_dir: Path | str | None = None,
        startup_timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        subcommand: str = "standalone",
        rocketmq_port: int | None = None,
    ) -> None:
        super().__init__(
            startup_timeout_s=startup_timeout_s,
            env=env,
            python=python,
            ports=(("port", port), ("admin_port", admin_port)),
        )
        self.data_dir = Path(data_dir)
        self.extra_args = tuple(extra_args)
        self.host = host
        self.port = port
        self.admin_port = admin_port
        self.log_dir = (
            Path(log_dir) if log_dir is not None else self.data_dir.with_name(self.data_dir.name + ".logs")
        )
        self.subcommand = subcommand
        self.rocketmq_port = rocketmq_port
        self.rocketmq_address: str | None = None  # host:port from the readiness line when the endpoint is on
        self.rocketmq_tls_address: str | None = None  # and of its TLS endpoint (rocketmq_port_tls)
        self.service_url: str | None = None
        self.admin_url: str | None = None
        self.service_url_tls: str | None = None  # from the readiness line; None without a TLS listener
        self.admin_url_tls: str | None = None

    @property
    def bound_port(self) -> int:
        """The Pulsar protocol port the broker reported in its readiness line."""
        return self._url_port(self.service_url)

    @property
    def bound_admin_port(self) -> int:
        """The admin REST port the broker reported in its readiness line."""
        return self._url_port(self.admin_url)

    def command(self) -> list[str]:
        """The argv :meth:`start` runs."""
        return [
            self.python,
            *QUASAR_COMMAND,
            self.subcommand,
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--admin-port",
            str(self.admin_port),
            *(
                ("--no-rocketmq",)
                if self.rocketmq_port is None
                else ("--rocketmq-port", str(self.rocketmq_port))
            ),
            *self.extra_args,
        ]

    # -- SubprocessHarness hooks -----------------------------------------------------------------------------

    def _log_stem(self) -> Path:
        return self.log_dir / "broker"

    def _before_start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.service_url = self.admin_url = None
        self.service_url_tls = self.admin_url_tls = None
        self.rocketmq_address = self.rocketmq_tls_address = None

    def _on_ready(self, match: re.Match[str]) -> None:
        self.service_url, self.admin_url = match.group(1), match.group(2)
        self.service_url_tls, self.admin_url_tls = match.group(3), match.group(4)
        self.rocketmq_address, self.rocketmq_tls_address = match.group(5), match.group(6)

    def _reported_ports(self) -> dict[str, int] | None:
        if self.service_url is None:
            return None
        return {"port": self.bound_port, "admin_port": self.bound_admin_port}

    def _repr_fields(self, state: str) -> list[str]:
        return [str(self.service_url), str(self.admin_url), f"data_dir={str(self.data_dir)!r}", state]

    @staticmethod
    def _url_port(url: str | None) -> int:
        if url is None:
            raise BrokerProcessError("the broker has not reported its URLs yet (call start())")
        port = urlsplit(url).port
        if port is None:
            raise BrokerProcessError(f"no port in the broker's URL {url!r}")
        return port
