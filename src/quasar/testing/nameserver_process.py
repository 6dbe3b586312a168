"""Run a real ``quasar nameserver`` as a subprocess, for tests and tools (like ``broker_process``, on
:class:`~quasar.testing.subprocess_harness.SubprocessHarness`).

The name server starts on port 0 (any free port) unless told otherwise; :meth:`NameServerProcess.start` waits,
bounded in time, for the readiness line it prints on stdout once both listeners are bound::

    quasar nameserver ready: HOST:PORT http://HOST:HTTP_PORT

and takes the route address and the HTTP view's URL from it. :meth:`NameServerProcess.stop` sends SIGTERM to
its PID, waits, then SIGKILLs; :meth:`NameServerProcess.kill` SIGKILLs at once. stdout and stderr go to
numbered files in ``log_dir`` (one pair per start).

Production code never imports this module.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from quasar.errors import QuasarError
from quasar.testing.subprocess_harness import QUASAR_COMMAND, SubprocessHarness

__all__ = ["READY_LINE", "NameServerProcess", "NameServerProcessError", "parse_ready_line"]

#: The readiness line: group 1 is ``host:port`` of the route listener, group 2 the HTTP view's URL.
READY_LINE = re.compile(r"quasar nameserver ready: (\S+:\d+) (https?://\S+)")


class NameServerProcessError(QuasarError):
    """The name server subprocess could not be started, exited early, or was not ready in time."""


def parse_ready_line(text: str) -> tuple[str, str] | None:
    """``(address, http_url)`` from the first readiness line in ``text``, or None."""
    match = READY_LINE.search(text)
    return (match.group(1), match.group(2)) if match else None


class NameServerProcess(SubprocessHarness):
    """One ``quasar nameserver`` subprocess; may be started again (on the same ports with :meth:`restart`).

    Args:
        log_dir: where ``nameserver-<n>.stdout.log`` / ``.stderr.log`` go (created if missing).
        host: ``--host``.
        port: route port, 0 = any free port.
        http_port: HTTP view port, 0 = any free port.
        extra_args: further options, e.g. ``("--scan-interval", "0.2")``.
        startup_timeout_s: seconds :meth:`start` waits for the readiness line.
        env: extra environment variables (merged over ``os.environ``).
        python: the interpreter; default ``sys.executable``.

    Raises:
        ValueError: a port outside 0..65535 or a non-positive timeout.
    """

    _what: ClassVar[str] = "name server"
    _error: ClassVar[type[QuasarError]] = NameServerProcessError
    _ready_line: ClassVar[re.Pattern[str]] = READY_LINE

    def __init__(
        self,
        log_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        http_port: int = 0,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 20.0,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        super().__init__(
            startup_timeout_s=startup_timeout_s,
            env=env,
            python=python,
            ports=(("port", port), ("http_port", http_port)),
        )
        self.log_dir = Path(log_dir)
        self.host = host
        self.port = port
        self.http_port = http_port
        self.extra_args = tuple(extra_args)
        self.address: str | None = None
        self.http_url: str | None = None

    @property
    def bound_port(self) -> int:
        """The route port from the readiness line."""
        if self.address is None:
            raise NameServerProcessError("the name server has not reported its address yet (call start())")
        return int(self.address.rpartition(":")[2])

    @property
    def bound_http_port(self) -> int:
        """The HTTP view's port from the readiness line."""
        if self.http_url is None:
            raise NameServerProcessError("the name server has not reported its HTTP URL yet (call start())")
        return int(self.http_url.rpartition(":")[2].rstrip("/"))

    def command(self) -> list[str]:
        """The argv :meth:`start` runs."""
        return [
            self.python,
            *QUASAR_COMMAND,
            "nameserver",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            *self.extra_args,
        ]

    # -- SubprocessHarness hooks -----------------------------------------------------------------------------

    def _log_stem(self) -> Path:
        return self.log_dir / "nameserver"

    def _before_start(self) -> None:
        self.address = self.http_url = None

    def _on_ready(self, match: re.Match[str]) -> None:
        self.address, self.http_url = match.group(1), match.group(2)

    def _reported_ports(self) -> dict[str, int] | None:
        if self.address is None:
            return None
        return {"port": self.bound_port, "http_port": self.bound_http_port}

    def _repr_fields(self, state: str) -> list[str]:
        return [str(self.address), str(self.http_url), state]
