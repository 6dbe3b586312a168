"""The children of ``quasar cluster up``: start each one, wait for its readiness, watch it, stop them in order.

A :class:`Child` is one subprocess whose stdout and stderr both go to its log file (appended to, one header
line per start, so a restart keeps the previous run's log). Its readiness is decided by a *probe*: a callable
that looks at the child (its new log text, or an HTTP endpoint) and returns a result once it is ready, None
before. The :class:`Supervisor` owns every child: it waits for a set of children to become ready within a
bound, reports children that die while the cluster runs (the others keep running), and stops everything tier
by tier, highest tier first (brokers, then name servers, then etcd): SIGTERM, a bounded wait, SIGKILL.

Children run in their own session, so a Ctrl-C in the terminal reaches only ``cluster up``, which then stops
them in that order. A second Ctrl-C (or SIGTERM) while stopping kills what is left at once.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from quasar.errors import QuasarError

__all__ = [
    "Child",
    "ChildStartError",
    "Probe",
    "StopRequested",
    "Supervisor",
    "child_environment",
    "describe_status",
    "http_health_probe",
    "line_probe",
    "wait_exit",
]

#: Looks at a child; returns its readiness result (a regex match, a parsed document, ...) or None if not yet.
Probe = Callable[["Child"], Any]


class ChildStartError(QuasarError):
    """A child could not be executed, exited before it was ready, or was not ready in time.

    ``child`` is that child, ``summary`` one line saying what happened; the message adds the end of its log.
    """

    def __init__(self, child: Child, summary: str, *, with_log: bool = True) -> None:
        super().__init__(
            f"{summary}; the end of its log {child.log_path}:\n{child.tail()}" if with_log else summary
        )
        self.child = child
        self.summary = summary


class StopRequested(QuasarError):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) arrived while children were starting."""


class Child:
    """One subprocess of the cluster.

    Args:
        name: how logs and reports call it (``etcd``, ``nameserver-0``, ``broker-a``).
        argv: the command line.
        log_path: file receiving stdout and stderr (appended to; the parent directory is created).
        tier: stop order; higher tiers stop first.
        env: the complete environment of the child; None = the parent's.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        tier: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.tier = tier
        self.env = dict(env) if env is not None else None
        self.ready_result: Any = None
        self.reported_exit = False
        self._offset = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id once started (kept after it exited, for reports)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status (negative = killed by that signal), or None while running or before start."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the process. Raises OSError when the executable cannot be run."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        with open(self.log_path, "ab") as log:
            log.write(f"==== {stamp} quasar cluster up: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._offset = log.tell()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def output(self) -> str:
        """What this start of the child wrote so far (stdout and stderr interleaved)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                return log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of :meth:`output`, indented, or a note when there are none."""
        text = self.output().splitlines()[-lines:]
        return "\n".join("    " + line for line in text) if text else "    (no output)"

    def send(self, sig: int) -> None:
        """Send ``sig`` if the child still runs (a child that just exited is not an error)."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` seconds for the exit; returns the status or None if still running."""
        return wait_exit(self._proc, timeout_s)


def wait_exit(proc: subprocess.Popen[bytes] | None, timeout_s: float) -> int | None:
    """Wait up to ``timeout_s`` seconds for ``proc`` to exit; its status, or None if it still runs (or if
    there is no process)."""
    if proc is None:
        return None
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def line_probe(pattern: re.Pattern[str]) -> Probe:
    """A probe ready once ``pattern`` matches the child's output; its result is the ``re.Match``."""

    def probe(child: Child) -> re.Match[str] | None:
        return pattern.search(child.output())

    return probe


def http_health_probe(url: str, *, timeout_s: float = 0.5) -> Probe:
    """A probe ready once GET ``url`` answers 200 with a JSON object whose ``health`` is ``"true"`` (etcd's
    ``/health``); its result is that object."""

    def probe(child: Child) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                doc = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and doc.get("health") == "true" else None

    return probe


class Supervisor:
    """Owns the children of one ``cluster up``.

    Args:
        report: prints one progress line (to the terminal).
        stop_timeout_s: seconds each tier gets to exit after SIGTERM before SIGKILL.
        poll_s: sleep between checks while waiting or watching.
    """

    STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, report: Callable[[str], None], *, stop_timeout_s: float = 10.0, poll_s: float = 0.05):
        self.report = report
        self.stop_timeout_s = stop_timeout_s
        self.poll_s = poll_s
        self.children: list[Child] = []
        self.signals = 0

    # -- signals ---------------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Count SIGINT / SIGTERM / SIGHUP instead of dying; the loops below check the count."""
        for sig in self.STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1

    @property
    def stop_requested(self) -> bool:
        return self.signals > 0

    # -- start -----------------------------------------------------------------------------------------------

    def spawn(self, child: Child) -> Child:
        """Start ``child`` and take ownership of it. Raises ChildStartError when it cannot be executed."""
        self.children.append(child)
        try:
            child.start()
        except OSError as exc:
            self.children.remove(child)
            raise ChildStartError(
                child, f"{child.name} could not be started ({child.argv[0]}): {exc}"
            ) from exc
        return child

    def wait_ready(self, probes: Mapping[Child, Probe], timeout_s: float) -> None:
        """Wait until every child in ``probes`` is ready (its probe's result goes to ``child.ready_result``).

        Raises:
            ChildStartError: a child exited first, or ``timeout_s`` passed (message with its log tail).
            StopRequested: a stop signal arrived meanwhile.
        """
        pending = dict(probes)
        deadline = time.monotonic() + timeout_s
        while pending:
            for child, probe in list(pending.items()):
                result = probe(child)
                if result is not None:
                    child.ready_result = result
                    del pending[child]
                    continue
                code = child.returncode
                if code is not None:
                    child.reported_exit = True
                    raise ChildStartError(
                        child, f"{child.name} (pid {child.pid}) {describe_status(code)} before it was ready"
                    )
            if not pending:
                break
            if self.stop_requested:
                raise StopRequested("stop requested while the cluster was starting")
            if time.monotonic() > deadline:
                child = next(iter(pending))
                raise ChildStartError(
                    child, f"{child.name} (pid {child.pid}) was not ready within {timeout_s:g} s"
                )
            time.sleep(self.poll_s)

    # -- run -------------------------------------------------------------------------------------------------

    def watch(self, on_exit: Callable[[Child], None], *, poll_s: float = 0.2) -> bool:
        """Block until a stop signal arrives or every child has exited. Each child that exits meanwhile is
        reported once (name, pid, status, log tail) and passed to ``on_exit``; the others keep running.

        Returns:
            True when stopped by a signal, False when every child had exited.
        """
        while not self.stop_requested:
            for child in self.children:
                code = child.returncode
                if code is not None and not child.reported_exit:
                    child.reported_exit = True
                    others = [c.name for c in self.children if c.alive]
                    self.report(
                        f"{child.name} (pid {child.pid}) exited unexpectedly ({describe_status(code)}); "
                        f"still running: {', '.join(others) or 'nothing'}. "
                        f"The end of its log {child.log_path}:\n{child.tail(15)}"
                    )
                    on_exit(child)
            if not any(child.alive for child in self.children):
                return False
            time.sleep(poll_s)
        return True

    # -- stop ------------------------------------------------------------------------------------------------

    def stop_all(self) -> dict[str, int | None]:
        """Stop every child, highest tier first; each tier gets SIGTERM, ``stop_timeout_s``, then SIGKILL.

        Returns:
            ``{name: exit status}`` (negative = killed by that signal); None only if a child survived SIGKILL
            for the whole bound, which the report then names.
        """
        statuses: dict[str, int | None] = {}
        hurry_above = max(self.signals, 1)  # one more signal than that while stopping: SIGKILL at once
        for tier in sorted({child.tier for child in self.children}, reverse=True):
            statuses.update(self._stop_tier([c for c in self.children if c.tier == tier], hurry_above))
        return statuses

    def _stop_tier(self, children: list[Child], hurry_above: int) -> dict[str, int | None]:
        running = [child for child in children if child.alive]
        for child in running:
            child.send(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(child.alive for child in running):
            if time.monotonic() > deadline or self.signals > hurry_above:
                break
            time.sleep(self.poll_s)
        for child in running:
            if child.alive:
                self.report(f"{child.name} (pid {child.pid}) still running: SIGKILL")
                child.send(signal.SIGKILL)
        statuses: dict[str, int | None] = {}
        for child in children:
            code = child.wait(5.0) if child.pid is not None else None
            statuses[child.name] = code
            if child in running:
                self.report(f"stopped {child.name} (pid {child.pid}): {describe_status(code)}")
        return statuses


def describe_status(code: int | None) -> str:
    """0 -> ``"exited with status 0"``, -15 -> ``"ended by SIGTERM"``, None -> ``"still running"``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"ended by signal {-code}"
    return f"exited with status {code}"


def child_environment(*, strip_prefix: str | None = None, **extra: str) -> dict[str, str]:
    """The parent's environment plus ``extra``, without the variables starting with ``strip_prefix`` (etcd
    reads ``ETCD_*`` and would mix a user's settings into the local member)."""
    env = {k: v for k, v in os.environ.items() if strip_prefix is None or not k.startswith(strip_prefix)}
    env.update(extra)
    return env
