"""Run ``quasar cluster up`` as a subprocess (etcd, name servers, brokers), for tests, demos and benchmarks.

:meth:`ClusterProcess.start` waits for the line ``cluster up`` prints on stdout once every member is ready::

    quasar cluster ready: <data-dir>/cluster.json

then loads that file (shape in :mod:`quasar.cli.cluster_layout`). :meth:`ClusterProcess.stop` sends SIGTERM
to ``cluster up`` (which stops brokers, name servers, then etcd), waits, SIGKILLs it past the bound, then
stops by PID any member ``cluster.json`` lists that is still alive (SIGTERM, bounded wait, SIGKILL) and
raises if one survives. ``cluster up``'s own stdout and stderr go to ``<data_dir>.up-<n>.stdout.log`` /
``.stderr.log`` (siblings of the data directory, numbered per start); each member logs to
``<data_dir>/logs/<name>.log``.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from quasar.cli.cluster import CLUSTER_READY
from quasar.cli.cluster_layout import STATE_FILE, members, pid_alive
from quasar.errors import QuasarError

__all__ = ["ClusterProcess", "ClusterProcessError"]


class ClusterProcessError(QuasarError):
    """``cluster up`` exited before it was ready, was not ready in time, or left a member running."""


class ClusterProcess:
    """One ``quasar cluster up`` over ``data_dir``; may be started again on the same directory.

    Args:
        data_dir: ``--data-dir`` (created by ``cluster up``); kept across restarts.
        brokers: ``--brokers`` (1..26).
        nameservers: ``--nameservers``.
        extra_args: further ``cluster up`` options, e.g. ``("--base-port", "7000")``.
        startup_timeout_s: seconds :meth:`start` waits for the readiness line (etcd + name servers + brokers).
        env: extra environment variables for ``cluster up`` and its children (merged over ``os.environ``).
        python: the interpreter to run; default ``sys.executable``.

    Raises:
        ValueError: a count or the timeout is out of range.
    """

    def __init__(
        self,
        data_dir: Path | str,
        brokers: int = 3,
        nameservers: int = 2,
        *,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        if brokers < 1 or nameservers < 1:
            raise ValueError(f"brokers and nameservers must be >= 1, got {brokers} and {nameservers}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.data_dir = Path(data_dir).resolve()
        self.brokers = brokers
        self.nameservers = nameservers
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.python = python
        self.state: dict[str, Any] = {}
        self.starts = 0
        self.stdout_path: Path | None = None
        self.stderr_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def pid(self) -> int | None:
        """PID of ``cluster up`` while it runs, else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of ``cluster up`` (negative = that signal), None while running or before start."""
        return None if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The argv :meth:`start` runs."""
        return [
            self.python,
            "-m",
            "quasar",
            "cluster",
            "up",
            "--data-dir",
            str(self.data_dir),
            "--brokers",
            str(self.brokers),
            "--nameservers",
            str(self.nameservers),
            *self.extra_args,
        ]

    def reload(self) -> dict[str, Any]:
        """Read ``cluster.json`` again into :attr:`state` (``{}`` when it is missing) and return it."""
        try:
            self.state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.state = {}
        return self.state

    def member_pids(self) -> dict[str, int]:
        """``{member name: pid}`` of every member :attr:`state` lists with a PID (etcd, name servers, brokers)."""
        return {name: pid for name, pid in members(self.state) if isinstance(pid, int)}

    def alive_members(self) -> dict[str, int]:
        """The members of :meth:`member_pids` whose process is still alive."""
        return {name: pid for name, pid in self.member_pids().items() if pid_alive(pid)}

    def broker_admin_urls(self) -> list[str]:
        return [broker["webServiceUrl"] for broker in self.state.get("brokers", [])]

    def broker_service_urls(self) -> list[str]:
        return [broker["serviceUrl"] for broker in self.state.get("brokers", [])]

    def stdout_text(self) -> str:
        return self._read(self.stdout_path)

    def stderr_text(self) -> str:
        """What ``cluster up`` wrote to stderr (progress, member failures, the stop report)."""
        return self._read(self.stderr_path)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> ClusterProcess:
        """Run ``cluster up`` and block until its readiness line; loads cluster.json; returns ``self``.

        Raises:
            ClusterProcessError: already running; ``cluster up`` exited first (the message has its stderr
                tail); or no readiness line within ``startup_timeout_s`` (everything is then stopped).
        """
        if self.running:
            raise ClusterProcessError(f"cluster up already running (pid {self.pid})")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        n = self.starts
        self.starts += 1
        self.stdout_path = self.data_dir.with_name(f"{self.data_dir.name}.up-{n}.stdout.log")
        self.stderr_path = self.data_dir.with_name(f"{self.data_dir.name}.up-{n}.stderr.log")
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
        while CLUSTER_READY.search(self.stdout_text()) is None:
            code = self._proc.poll()
            if code is not None:
                self.reload()
                raise ClusterProcessError(
                    f"cluster up exited with status {code} before it was ready{self._tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterProcessError(
                    f"cluster up printed no readiness line within {self.startup_timeout_s} s{self._tail()}"
                )
            time.sleep(0.05)
        self.reload()
        return self

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for ``cluster up`` to exit; its status, or None if it still runs."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM ``cluster up``, wait up to ``timeout_s``, SIGKILL it; then stop by PID any member still alive
        that cluster.json lists for this very ``cluster up`` (SIGTERM, 10 s, SIGKILL). Safe to call twice.

        Returns:
            ``cluster up``'s exit status (0 = clean stop), or None if it was never started.

        Raises:
            ClusterProcessError: a member listed in cluster.json is still alive after SIGKILL.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.reload().get("upPid") == proc.pid:  # never another run's members (a refused second `up`)
            self.stop_members()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL ``cluster up`` alone (a crash: its members are left running, orphaned); returns its status.
        :meth:`stop` still stops those members by PID."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        return proc.returncode

    def stop_members(self, timeout_s: float = 10.0) -> None:
        """Stop by PID every member of :attr:`state` still alive (SIGTERM, ``timeout_s``, SIGKILL).

        Raises:
            ClusterProcessError: a member is still alive 5 s after SIGKILL.
        """
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            alive = self.alive_members()
            for pid in alive.values():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self.alive_members() and time.monotonic() < deadline:
                time.sleep(0.05)
        left = self.alive_members()
        if left:
            raise ClusterProcessError(f"members still alive after SIGKILL: {left}")

    def __enter__(self) -> ClusterProcess:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else f"exited {self.returncode}"
        return f"<ClusterProcess data_dir={str(self.data_dir)!r} {state} members={self.member_pids()}>"

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
