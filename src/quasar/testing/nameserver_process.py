"""Run a real ``quasar nameserver`` as a subprocess, for tests and tools (modelled on ``broker_process``).

The name server starts on port 0 (any free port) unless told otherwise; :meth:`NameServerProcess.start` waits,
bounded in time, for the readiness line it prints on stdout once both listeners are bound::

    quasar nameserver ready: HOST:PORT http://HOST:HTTP_PORT

and takes the route address and the HTTP view's URL from it. :meth:`NameServerProcess.stop` sends SIGTERM to
its PID, waits, then SIGKILLs; :meth:`NameServerProcess.kill` SIGKILLs at once. stdout and stderr go to
numbered files in ``log_dir`` (one pair per start).

Production code never imports this module.
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

from quasar.errors import QuasarError

__all__ = ["READY_LINE", "NameServerProcess", "NameServerProcessError", "parse_ready_line"]

#: The readiness line: group 1 is ``host:port`` of the route listener, group 2 the HTTP view's URL.
READY_LINE = re.compile(r"quasar nameserver ready: (\S+:\d+) (https?://\S+)")

_QUASAR_COMMAND = ("-c", "import sys; from quasar.cli.main import main; sys.exit(main(prog_name='quasar'))")


class NameServerProcessError(QuasarError):
    """The name server subprocess could not be started, exited early, or was not ready in time."""


def parse_ready_line(text: str) -> tuple[str, str] | None:
    """``(address, http_url)`` from the first readiness line in ``text``, or None."""
    match = READY_LINE.search(text)
    return (match.group(1), match.group(2)) if match else None


class NameServerProcess:
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
        for name, value in (("port", port), ("http_port", http_port)):
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in 0..65535, got {value}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.log_dir = Path(log_dir)
        self.host = host
        self.port = port
        self.http_port = http_port
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.python = python
        self.address: str | None = None
        self.http_url: str | None = None
        self.stdout_path: Path | None = None
        self.stderr_path: Path | None = None
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last process (negative = killed by that signal); None while running."""
        return None if self._proc is None else self._proc.poll()

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
            *_QUASAR_COMMAND,
            "nameserver",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            *self.extra_args,
        ]

    def stdout_text(self) -> str:
        return self._read(self.stdout_path)

    def stderr_text(self) -> str:
        """The current (or last) process's log."""
        return self._read(self.stderr_path)

    def start(self) -> NameServerProcess:
        """Start and block until the readiness line appears; returns ``self``.

        Raises:
            NameServerProcessError: already running, exited before it was ready, or no readiness line within
                ``startup_timeout_s`` (the process is then killed); the message carries the stderr tail.
        """
        if self.running:
            raise NameServerProcessError(f"name server already running (pid {self.pid})")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        n = self.starts
        self.starts += 1
        self.stdout_path = self.log_dir / f"nameserver-{n}.stdout.log"
        self.stderr_path = self.log_dir / f"nameserver-{n}.stderr.log"
        self.address = self.http_url = None
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
            ready = parse_ready_line(self.stdout_text())
            if ready is not None:
                self.address, self.http_url = ready
                return self
            code = self._proc.poll()
            if code is not None:
                raise NameServerProcessError(
                    f"name server exited with status {code} before it was ready{self._tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise NameServerProcessError(
                    f"name server printed no readiness line within {self.startup_timeout_s} s{self._tail()}"
                )
            time.sleep(0.02)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process (by its PID), wait up to ``timeout_s``, then SIGKILL; returns the exit status
        (None if never started). Safe to call twice."""
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
        """SIGKILL the process (by its PID) and reap it; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        return proc.returncode

    def restart(self, *, same_ports: bool = True, kill: bool = False) -> NameServerProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start again, on the ports it had with ``same_ports``."""
        previous = (self.bound_port, self.bound_http_port) if same_ports and self.address else None
        if kill:
            self.kill()
        else:
            self.stop()
        if previous is None:
            return self.start()
        configured = (self.port, self.http_port)
        self.port, self.http_port = previous
        try:
            return self.start()
        finally:
            self.port, self.http_port = configured

    def __enter__(self) -> NameServerProcess:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else f"exited {self.returncode}"
        return f"<NameServerProcess {self.address} {self.http_url} {state}>"

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
