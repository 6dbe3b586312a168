"""Run a real ``quasar standalone`` broker as a subprocess, for interop tests, demos and benchmarks.

The broker is started on port 0 (any free port) unless told otherwise; :meth:`BrokerProcess.start` waits for
the readiness line the broker prints on stdout once both listeners are bound::

    quasar standalone ready: pulsar://HOST:PORT http://HOST:ADMIN_PORT

and takes the service URL and admin URL from it. Teardown follows the nats-server test harness: SIGTERM, wait,
then SIGKILL if the broker has not exited. stdout and stderr go to files (one pair per start, numbered, in
``log_dir``) so a failing test can show the broker's log and restarts do not overwrite the previous run's.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from quasar.errors import QuasarError

__all__ = ["READY_LINE", "BrokerProcess", "BrokerProcessError", "parse_ready_line"]

#: The readiness line: group 1 is the Pulsar service URL, group 2 the admin (web service) URL.
READY_LINE = re.compile(r"quasar (?:standalone|broker) ready: (pulsar(?:\+ssl)?://\S+) (https?://\S+)")

#: Runs the ``quasar`` click group in a fresh interpreter (with or without an installed console script).
_QUASAR_COMMAND = ("-c", "import sys; from quasar.cli.main import main; sys.exit(main(prog_name='quasar'))")


class BrokerProcessError(QuasarError):
    """The broker subprocess could not be started, exited early, or did not become ready in time."""


def parse_ready_line(text: str) -> tuple[str, str] | None:
    """Return ``(service_url, admin_url)`` from the first readiness line in ``text``, or None if none."""
    match = READY_LINE.search(text)
    return (match.group(1), match.group(2)) if match else None


class BrokerProcess:
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

    Raises:
        ValueError: a port is outside 0..65535 or a timeout is not positive.
    """

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
    ) -> None:
        for name, value in (("port", port), ("admin_port", admin_port)):
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in 0..65535, got {value}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.data_dir = Path(data_dir)
        self.extra_args = tuple(extra_args)
        self.host = host
        self.port = port
        self.admin_port = admin_port
        self.log_dir = (
            Path(log_dir) if log_dir is not None else self.data_dir.with_name(self.data_dir.name + ".logs")
        )
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.python = python
        self.subcommand = subcommand
        self.service_url: str | None = None
        self.admin_url: str | None = None
        self.stdout_path: Path | None = None
        self.stderr_path: Path | None = None
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Process id of the running broker, or None before :meth:`start` / after it exited."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last broker process (negative = killed by that signal); None while running."""
        return None if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
            *_QUASAR_COMMAND,
            self.subcommand,
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--admin-port",
            str(self.admin_port),
            *self.extra_args,
        ]

    def stdout_text(self) -> str:
        """What the current (or last) broker process wrote to stdout."""
        return self._read(self.stdout_path)

    def stderr_text(self) -> str:
        """What the current (or last) broker process wrote to stderr (its log)."""
        return self._read(self.stderr_path)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        """Start the broker and block until its readiness line appears; returns ``self``.

        Raises:
            BrokerProcessError: already running; the process exited before it was ready; or no readiness line
                within ``startup_timeout_s`` (the process is then killed). The message carries the tail of
                the broker's stderr.
        """
        if self.running:
            raise BrokerProcessError(f"broker already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        n = self.starts
        self.starts += 1
        self.stdout_path = self.log_dir / f"broker-{n}.stdout.log"
        self.stderr_path = self.log_dir / f"broker-{n}.stderr.log"
        self.service_url = self.admin_url = None
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            urls = parse_ready_line(self.stdout_text())
            if urls is not None:
                self.service_url, self.admin_url = urls
                return self
            code = self._proc.poll()
            if code is not None:
                raise BrokerProcessError(
                    f"broker exited with status {code} before it was ready{self._tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerProcessError(
                    f"broker printed no readiness line within {self.startup_timeout_s} s{self._tail()}"
                )
            time.sleep(0.02)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the broker and wait up to ``timeout_s`` for it to exit, then SIGKILL it.

        Returns:
            The exit status (0 for a clean shutdown; negative = killed by that signal), or None if it was
            never started. Safe to call twice.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL the broker (a crash: no shutdown code runs) and reap it; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        return proc.returncode

    def restart(self, *, same_ports: bool = True, kill: bool = False) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL if ``kill``) and start again on the same data directory.

        With ``same_ports`` the new process binds the ports the previous one reported, so clients holding the
        old service URL can reconnect; otherwise it uses the configured ports (0 = new free ports).
        """
        previous = (self.bound_port, self.bound_admin_port) if same_ports and self.service_url else None
        if kill:
            self.kill()
        else:
            self.stop()
        if previous is None:
            return self.start()
        configured = (self.port, self.admin_port)
        self.port, self.admin_port = previous
        try:
            return self.start()
        finally:
            self.port, self.admin_port = configured

    def __enter__(self) -> BrokerProcess:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else f"exited {self.returncode}"
        return f"<BrokerProcess {self.service_url} {self.admin_url} data_dir={str(self.data_dir)!r} {state}>"

    # -- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path | None) -> str:
        if path is None:
            return ""
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def _tail(self, lines: int = 40) -> str:
        tail = "\n".join(self.stderr_text().splitlines()[-lines:])
        return (
            f"; stderr ({self.stderr_path}):\n{tail}" if tail else f"; stderr ({self.stderr_path}) is empty"
        )

    @staticmethod
    def _url_port(url: str | None) -> int:
        if url is None:
            raise BrokerProcessError("the broker has not reported its URLs yet (call start())")
        port = urlsplit(url).port
        if port is None:
            raise BrokerProcessError(f"no port in the broker's URL {url!r}")
        return port
