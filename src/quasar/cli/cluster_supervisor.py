"""The children of ``quasar cluster up``: start each one, wait for its readiness, watch it, stop them in order.

A :class:`Child` is one subprocess whose stdout and stderr both go to its log file (appended to, one header
line per start, so a restart keeps the previous run's log). Its readiness is decided by a *probe*: a callable
that looks at the child (its new log text, or an HTTP endpoint) and returns a result once it is ready, None
before. The :class:`Supervisor` owns every child: it waits for a set of children to become ready within a
bound, reports children that die while the cluster runs (the others keep running), and stops everything tier
by tier, highest tier first (slaves, then masters, then name servers, then etcd): SIGTERM, a bounded wait,
SIGKILL.

A child created with ``restartable=True`` (the brokers of a replicated cluster) is started again when it dies
while the cluster runs, after :attr:`RestartPolicy.delay_s`, at most :attr:`RestartPolicy.max_restarts` times
within :attr:`RestartPolicy.window_s`; past that the supervisor gives up on it, says so, and keeps the others
running. Other children that die are only reported.

Children run in their own session, so a Ctrl-C in the terminal reaches only ``cluster up``, which then stops
them in that order. A second Ctrl-C (or SIGTERM) while stopping kills what is left at once.
"""

from __future__ import annotations

import collections
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
    "RestartPolicy",
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
        restartable: start it again when it dies while the cluster runs (see :class:`RestartPolicy`).
        ready_probe: tells when a restarted child is ready again (reported; None = not watched).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        tier: int,
        env: Mapping[str, str] | None = None,
        restartable: bool = False,
        ready_probe: Probe | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.tier = tier
        self.env = dict(env) if env is not None else None
        self.restartable = restartable
        self.ready_probe = ready_probe
        self.ready_result: Any = None
        self.reported_exit = False
        self.restarts = 0
        """How often the supervisor started it again after it died."""
        self.gave_up = False
        """True once the supervisor stopped restarting it (too many restarts within the window)."""
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


class RestartPolicy:
    """When a restartable child that died is started again: after ``delay_s`` seconds, at most
    ``max_restarts`` times per child within any ``window_s`` seconds (systemd's StartLimitBurst /
    StartLimitIntervalSec); past that, never again during this run.

    Args:
        clock: monotonic seconds (a test passes a fake one).
    """

    def __init__(
        self,
        *,
        max_restarts: int = 5,
        window_s: float = 600.0,
        delay_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_restarts < 0 or window_s <= 0 or delay_s < 0:
            raise ValueError("max_restarts >= 0, window_s > 0 and delay_s >= 0 are required")
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.delay_s = delay_s
        self.clock = clock
        self._history: dict[str, collections.deque[float]] = {}

    def recent(self, name: str) -> int:
        """Restarts of ``name`` granted within the last ``window_s`` seconds."""
        history = self._history.setdefault(name, collections.deque())
        now = self.clock()
        while history and history[0] <= now - self.window_s:
            history.popleft()
        return len(history)

    def grant(self, name: str) -> bool:
        """Whether ``name``, which just died, may be restarted; a granted restart counts against the window."""
        if self.recent(name) >= self.max_restarts:
            return False
        self._history[name].append(self.clock())
        return True

    def describe(self) -> str:
        """``"at most 5 restarts within 10 min"``."""
        window = f"{self.window_s / 60:g} min" if self.window_s >= 60 else f"{self.window_s:g} s"
        return f"at most {self.max_restarts} restarts within {window}"


class Supervisor:
    """Owns the children of one ``cluster up``.

    Args:
        report: prints one progress line (to the terminal).
        stop_timeout_s: seconds each tier gets to exit after SIGTERM before SIGKILL.
        poll_s: sleep between checks while waiting or watching.
        restart_policy: how restartable children are restarted (default :class:`RestartPolicy`'s).
        sleep: pauses between polls of :meth:`watch` (a test passes one that advances fake children).
        restart_delay: seconds to wait before restarting a child that just died (called once per death);
            None = the policy's ``delay_s``.
    """

    STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(
        self,
        report: Callable[[str], None],
        *,
        stop_timeout_s: float = 10.0,
        poll_s: float = 0.05,
        restart_policy: RestartPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        restart_delay: Callable[[Child], float] | None = None,
    ):
        self.report = report
        self.stop_timeout_s = stop_timeout_s
        self.poll_s = poll_s
        self.restart_policy = restart_policy or RestartPolicy()
        self.sleep = sleep
        self.restart_delay = restart_delay
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

    def watch(self, on_change: Callable[[Child], None], *, poll_s: float = 0.2) -> bool:
        """Block until a stop signal arrives or every child has exited for good. Each child that exits
        meanwhile is reported once (name, pid, status, log tail) and passed to ``on_change``; the others keep
        running. A restartable child is started again after the policy's delay (and passed to ``on_change``
        again, with its new pid) unless the policy gives up on it; its readiness afterwards is reported.

        Returns:
            True when stopped by a signal, False when every child had exited and none is to be restarted.
        """
        policy = self.restart_policy
        due: dict[Child, float] = {}  # restarts scheduled: child -> monotonic time
        awaiting: dict[Child, float] = {}  # restarted, readiness not seen yet: child -> restart time
        while not self.stop_requested:
            for child in self.children:
                code = child.returncode
                if code is None or child.reported_exit:
                    continue
                child.reported_exit = True
                awaiting.pop(child, None)
                plan = ""
                if child.restartable and not child.gave_up:
                    if policy.grant(child.name):
                        delay = self.restart_delay(child) if self.restart_delay else policy.delay_s
                        due[child] = time.monotonic() + delay
                        plan = (
                            f" Restarting it in {delay:g} s "
                            f"(restart {policy.recent(child.name)}, {policy.describe()})."
                        )
                    else:
                        child.gave_up = True
                        plan = (
                            f" Giving up on it: it exited {policy.max_restarts + 1} times and "
                            f"{policy.describe()} are allowed; the others keep running."
                        )
                others = [c.name for c in self.children if c.alive]
                self.report(
                    f"{child.name} (pid {child.pid}) exited unexpectedly ({describe_status(code)}); "
                    f"still running: {', '.join(others) or 'nothing'}.{plan} "
                    f"The end of its log {child.log_path}:\n{child.tail(15)}"
                )
                on_change(child)
            now = time.monotonic()
            for child, when in list(due.items()):
                if now >= when:
                    del due[child]
                    self._restart(child, awaiting, on_change)
            for child in list(awaiting):
                self._check_restarted(child, awaiting)
            if not due and not any(child.alive for child in self.children):
                return False
            self.sleep(poll_s)
        return True

    def _restart(
        self, child: Child, awaiting: dict[Child, float], on_change: Callable[[Child], None]
    ) -> None:
        old = child.pid
        try:
            child.start()
        except OSError as exc:
            child.gave_up = True
            self.report(f"{child.name} could not be restarted ({child.argv[0]}): {exc}; giving up on it")
            return
        child.restarts += 1
        child.reported_exit = False
        self.report(f"restarted {child.name} (pid {child.pid}, was {old}; restart #{child.restarts})")
        if child.ready_probe is not None:
            awaiting[child] = time.monotonic()
        on_change(child)

    def _check_restarted(self, child: Child, awaiting: dict[Child, float]) -> None:
        probe = child.ready_probe
        if probe is None or not child.alive:
            awaiting.pop(child, None)
            return
        result = probe(child)
        if result is not None:
            child.ready_result = result
            took = time.monotonic() - awaiting.pop(child)
            self.report(f"{child.name} (pid {child.pid}) ready again after {took:.1f} s")

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
