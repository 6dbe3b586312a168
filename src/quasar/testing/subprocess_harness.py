"""One command run as a subprocess for tests, demos and benchmarks: the lifecycle ``BrokerProcess``,
``NameServerProcess`` and ``ClusterProcess`` share.

:meth:`SubprocessHarness.start` runs :meth:`~SubprocessHarness.command` in a new session with stdout and
stderr going to numbered files (``<stem>-<n>.stdout.log`` / ``.stderr.log``, one pair per start, so a restart
keeps the previous run's), then waits, bounded in time, for a readiness line on stdout matching a regex.
:meth:`~SubprocessHarness.stop` follows the nats-server test harness: SIGTERM to the PID, a bounded wait, then
SIGKILL; :meth:`~SubprocessHarness.kill` SIGKILLs at once (a crash). A subclass says what to run, where its
logs go, what its readiness line is and what it takes from it.

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
from typing import ClassVar, Self

from quasar.cli.cluster_supervisor import wait_exit
from quasar.errors import QuasarError

__all__ = ["QUASAR_COMMAND", "SubprocessHarness", "stderr_sections"]

#: Runs the ``quasar`` click group in a fresh interpreter (with or without an installed console script).
QUASAR_COMMAND = ("-c", "import sys; from quasar.cli.main import main; sys.exit(main(prog_name='quasar'))")


class SubprocessHarness:
    """One subprocess that prints a readiness line; may be started again (:meth:`restart`).

    Subclasses set the class attributes below and implement :meth:`command` and :meth:`_log_stem`; the
    ``_before_start`` / ``_on_ready`` / ``_on_early_exit`` / ``_abandon`` / ``_reported_ports`` hooks are
    optional.

    Args:
        startup_timeout_s: seconds :meth:`start` waits for the readiness line.
        env: extra environment variables for the subprocess (merged over ``os.environ``).
        python: the interpreter to run; default ``sys.executable``.
        ports: ``(name, value)`` of the port arguments to check (0 = any free port).

    Raises:
        ValueError: a port is outside 0..65535 or the timeout is not positive.
    """

    #: How messages name the process: ``broker``, ``name server``, ``cluster up``.
    _what: ClassVar[str]
    #: Raised when the process is already running, exits before it is ready or is not ready in time.
    _error: ClassVar[type[QuasarError]]
    #: The readiness line :meth:`start` waits for on stdout; :meth:`_on_ready` gets its match.
    _ready_line: ClassVar[re.Pattern[str]]
    #: Seconds between two looks for the readiness line.
    _poll_s: ClassVar[float] = 0.02

    def __init__(
        self,
        *,
        startup_timeout_s: float,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        ports: tuple[tuple[str, int], ...] = (),
    ) -> None:
        for name, value in ports:
            if not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in 0..65535, got {value}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.python = python
        self.stdout_path: Path | None = None
        self.stderr_path: Path | None = None
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- what a subclass provides ------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The argv :meth:`start` runs."""
        raise NotImplementedError

    def _log_stem(self) -> Path:
        """Start ``n`` logs to ``<stem>-<n>.stdout.log`` / ``<stem>-<n>.stderr.log`` (the parent is created)."""
        raise NotImplementedError

    def _before_start(self) -> None:
        """Called by :meth:`start` before the process runs (create directories, forget the last run's URLs)."""

    def _on_ready(self, match: re.Match[str]) -> None:
        """Called with the readiness line's match once it appears."""

    def _on_early_exit(self) -> None:
        """Called when the process exited before it was ready, before :meth:`start` raises."""

    def _abandon(self) -> None:
        """Called when the readiness line did not come in time, before :meth:`start` raises: kill it."""
        self.kill()

    def _reported_ports(self) -> dict[str, int] | None:
        """``{port attribute: port bound}`` for :meth:`restart` with ``same_ports``; None when not known."""
        return None

    # -- state -----------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Process id of the running process, or None before :meth:`start` / after it exited."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last process (negative = killed by that signal); None while running."""
        return None if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stdout_text(self) -> str:
        """What the current (or last) process wrote to stdout."""
        return self._read(self.stdout_path)

    def stderr_text(self) -> str:
        """What the current (or last) process wrote to stderr (its log)."""
        return self._read(self.stderr_path)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the process and block until its readiness line appears; returns ``self``.

        Raises:
            QuasarError: the subclass's error: already running; the process exited before it was ready; or
                no readiness line within ``startup_timeout_s`` (the process is then abandoned: killed, or
                stopped). The message carries the tail of the process's stderr.
        """
        if self.running:
            raise self._error(f"{self._what} already running (pid {self.pid})")
        self._before_start()
        stem = self._log_stem()
        stem.parent.mkdir(parents=True, exist_ok=True)
        n = self.starts
        self.starts += 1
        self.stdout_path = stem.parent / f"{stem.name}-{n}.stdout.log"
        self.stderr_path = stem.parent / f"{stem.name}-{n}.stderr.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            proc = self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while (match := self._ready_line.search(self.stdout_text())) is None:
            code = proc.poll()
            if code is not None:
                self._on_early_exit()
                raise self._error(f"{self._what} exited with status {code} before it was ready{self._tail()}")
            if time.monotonic() > deadline:
                self._abandon()
                raise self._error(
                    f"{self._what} printed no readiness line within {self.startup_timeout_s} s{self._tail()}"
                )
            time.sleep(self._poll_s)
        self._on_ready(match)
        return self

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to exit; its status, or None if it still runs."""
        return wait_exit(self._proc, timeout_s)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process (by its PID) and wait up to ``timeout_s`` for it to exit, then SIGKILL it.

        Returns:
            The exit status (0 for a clean shutdown; negative = killed by that signal), or None if it was
            never started. Safe to call twice.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if wait_exit(proc, timeout_s) is None:
                proc.kill()
                proc.wait()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL the process (a crash: no shutdown code runs) and reap it; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        return proc.returncode

    def restart(self, *, same_ports: bool = True, kill: bool = False) -> Self:
        """Stop (SIGTERM, or SIGKILL if ``kill``) and start again.

        With ``same_ports`` the new process binds the ports the previous one reported, so clients holding the
        old address can reconnect; otherwise it uses the configured ports (0 = new free ports).
        """
        previous = self._reported_ports() if same_ports else None
        if kill:
            self.kill()
        else:
            self.stop()
        if previous is None:
            return self.start()
        configured = {name: getattr(self, name) for name in previous}
        for name, port in previous.items():
            setattr(self, name, port)
        try:
            return self.start()
        finally:
            for name, port in configured.items():
                setattr(self, name, port)

    def __enter__(self) -> Self:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else f"exited {self.returncode}"
        return f"<{type(self).__name__} {' '.join(self._repr_fields(state))}>"

    def _repr_fields(self, state: str) -> list[str]:
        """The words of :meth:`__repr__` after the class name; ``state`` is ``pid N`` or ``exited N``."""
        return [state]

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


def stderr_sections(
    processes: Sequence[SubprocessHarness], label: str, lines: int = 40
) -> list[tuple[str, str]]:
    """Report sections (title, text) with the last ``lines`` lines of each process's stderr, for a pytest
    ``pytest_runtest_makereport`` hook to append to a failed test's report."""
    return [
        (f"{label} stderr ({process.stderr_path})",
         "\n".join(process.stderr_text().splitlines()[-lines:]) or "(empty)")
        for process in processes
    ]  # fmt: skip
