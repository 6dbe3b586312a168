"""Run ``quasar cluster up`` as a subprocess (etcd, name servers, brokers), for tests, demos and benchmarks.

:meth:`ClusterProcess.start` waits for the line ``cluster up`` prints on stdout once every member is ready::

    quasar cluster ready: <data-dir>/cluster.json

then loads that file (shape in :mod:`quasar.cli.cluster_layout`). :meth:`ClusterProcess.stop` sends SIGTERM
to ``cluster up`` (which stops brokers, name servers, then etcd), waits, SIGKILLs it past the bound, then
stops by PID any member ``cluster.json`` lists that is still alive (SIGTERM, bounded wait, SIGKILL) and
raises if one survives. ``cluster up``'s own stdout and stderr go to ``<data_dir>.up-<n>.stdout.log`` /
``.stderr.log`` (siblings of the data directory, numbered per start); each member logs to
``<data_dir>/logs/<name>.log``.

Start, stop, kill and the log files are :class:`~quasar.testing.subprocess_harness.SubprocessHarness`'s.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from quasar.cli.cluster import CLUSTER_READY
from quasar.cli.cluster_layout import STATE_FILE, broker_name, members, pid_alive
from quasar.errors import QuasarError
from quasar.testing.subprocess_harness import SubprocessHarness

__all__ = ["ClusterProcess", "ClusterProcessError"]


class ClusterProcessError(QuasarError):
    """``cluster up`` exited before it was ready, was not ready in time, or left a member running."""


class ClusterProcess(SubprocessHarness):
    """One ``quasar cluster up`` over ``data_dir``; may be started again on the same directory.

    :meth:`kill` SIGKILLs ``cluster up`` alone (a crash: its members are left running, orphaned); :meth:`stop`
    still stops those members by PID.

    Args:
        data_dir: ``--data-dir`` (created by ``cluster up``); kept across restarts.
        brokers: ``--brokers`` (1..26).
        nameservers: ``--nameservers``.
        slaves: ``--slaves`` (0 = no replication, the option is not passed).
        extra_args: further ``cluster up`` options, e.g. ``("--base-port", "7000")``.
        startup_timeout_s: seconds :meth:`start` waits for the readiness line (etcd + name servers + brokers).
        env: extra environment variables for ``cluster up`` and its children (merged over ``os.environ``).
        python: the interpreter to run; default ``sys.executable``.

    Raises:
        ValueError: a count or the timeout is out of range.
    """

    _what: ClassVar[str] = "cluster up"
    _error: ClassVar[type[QuasarError]] = ClusterProcessError
    _ready_line: ClassVar[re.Pattern[str]] = CLUSTER_READY
    _poll_s: ClassVar[float] = 0.05

    def __init__(
        self,
        data_dir: Path | str,
        brokers: int = 3,
        nameservers: int = 2,
        *,
        slaves: int = 0,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        if brokers < 1 or nameservers < 1 or slaves < 0:
            raise ValueError(
                f"brokers and nameservers must be >= 1 and slaves >= 0, got {brokers}, {nameservers}, {slaves}"
            )
        super().__init__(startup_timeout_s=startup_timeout_s, env=env, python=python)
        self.data_dir = Path(data_dir).resolve()
        self.brokers = brokers
        self.nameservers = nameservers
        self.slaves = slaves
        self.extra_args = tuple(extra_args)
        self.state: dict[str, Any] = {}

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

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
            *(("--slaves", str(self.slaves)) if self.slaves else ()),
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

    def broker(self, name: str) -> dict[str, Any]:
        """The cluster.json entry of broker ``name`` (``broker-a``, ``broker-a-1``); raises KeyError."""
        for entry in self.state.get("brokers", []):
            if broker_name(entry) == name:
                return dict(entry)
        raise KeyError(name)

    def broker_admin_urls(self) -> list[str]:
        return [broker["webServiceUrl"] for broker in self.state.get("brokers", [])]

    def broker_service_urls(self) -> list[str]:
        return [broker["serviceUrl"] for broker in self.state.get("brokers", [])]

    # -- lifecycle -------------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM ``cluster up``, wait up to ``timeout_s``, SIGKILL it; then stop by PID any member still alive
        that cluster.json lists for this very ``cluster up`` (SIGTERM, 10 s, SIGKILL). Safe to call twice.

        Returns:
            ``cluster up``'s exit status (0 = clean stop), or None if it was never started.

        Raises:
            ClusterProcessError: a member listed in cluster.json is still alive after SIGKILL.
        """
        code = super().stop(timeout_s)
        proc = self._proc
        # never another run's members (a refused second `up`)
        if proc is not None and self.reload().get("upPid") == proc.pid:
            self.stop_members()
        return code

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

    # -- SubprocessHarness hooks -----------------------------------------------------------------------------

    def _log_stem(self) -> Path:
        return self.data_dir.with_name(f"{self.data_dir.name}.up")

    def _on_ready(self, match: re.Match[str]) -> None:
        self.reload()

    def _on_early_exit(self) -> None:
        self.reload()

    def _abandon(self) -> None:
        self.stop()

    def _repr_fields(self, state: str) -> list[str]:
        return [f"data_dir={str(self.data_dir)!r}", state, f"members={self.member_pids()}"]
