"""Run the system's real ``etcd`` (Debian's ``etcd-server``, v3.4) as a subprocess, for the etcd metadata
backend's tests and the cluster tests.

:class:`EtcdProcess` starts a single-member etcd on free loopback ports (client and peer) over a data
directory, waits (bounded in time) until ``GET /health`` on the client URL answers ``{"health":"true"}``, and
exposes :attr:`EtcdProcess.endpoint` (``"127.0.0.1:PORT"``, for ``EtcdMetadataStore.open``) and
:attr:`EtcdProcess.url` (``"etcd://127.0.0.1:PORT"``, for ``open_metadata_store`` / ``--metadata-store``).
It may be started again on the same directory and ports after :meth:`~EtcdProcess.stop` / :meth:`~EtcdProcess.kill`
(an etcd restart keeps its keys and leases). :meth:`~EtcdProcess.pause` / :meth:`~EtcdProcess.resume` send
SIGSTOP / SIGCONT: the process keeps its sockets but answers nothing, which is how "etcd unreachable" looks to a
client whose connection stays up (calls time out rather than being refused). Teardown is by PID: SIGTERM, a
bounded wait, then SIGKILL. stdout and stderr go to ``etcd-<n>.log`` files (one per start) in ``log_dir``.

Production code never imports this module (``quasar.testing`` is for tests, demos and benchmarks only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from quasar.errors import QuasarError

__all__ = ["EtcdProcess", "EtcdProcessError", "etcd_available", "etcd_binary"]

_NAME = "quasar-test"


class EtcdProcessError(QuasarError):
    """etcd could not be started, exited early, or did not answer its health check in time."""


def etcd_binary() -> str | None:
    """The path of the ``etcd`` server binary (``$QUASAR_ETCD`` when set, else ``etcd`` on ``PATH``), or None."""
    configured = os.environ.get("QUASAR_ETCD")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("etcd")


def etcd_available() -> bool:
    """Whether an etcd server binary can be run here (see :func:`etcd_binary`)."""
    return etcd_binary() is not None


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports free on ``host`` right now (all sockets held open until every port is known)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class _PortTaken(EtcdProcessError):
    """etcd exited because a port it was to listen on was taken."""


def _listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` has a listening TCP socket on ``port`` (Linux ``/proc``; None when unknown)."""
    try:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError):
                for line in Path(table).read_text().splitlines()[1:]:
                    fields = line.split()
                    listening = fields[3] == "0A"
                    if listening and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                        return True
    except (OSError, IndexError, ValueError):
        return None
    return False


class EtcdProcess:
    """One single-member etcd subprocess over ``data_dir`` (created if missing, kept across restarts).

    Args:
        data_dir: etcd's ``--data-dir``.
        host: loopback address to listen on.
        client_port / peer_port: 0 = a free port chosen at construction (kept for restarts).
        log_dir: where ``etcd-<n>.log`` goes; default ``<data_dir>.logs`` (a sibling of the data directory).
        startup_timeout_s: seconds :meth:`start` waits for the health check.
        extra_args: further etcd flags, e.g. ``("--max-txn-ops", "1024")``.

    Raises:
        EtcdProcessError: (from :meth:`start`) no etcd binary, early exit or no healthy answer in time.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        client_port: int = 0,
        peer_port: int = 0,
        log_dir: Path | str | None = None,
        startup_timeout_s: float = 20.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s is positive, got {startup_timeout_s!r}")
        self.data_dir = Path(data_dir)
        self.host = host
        self._choose = (not client_port, not peer_port)  # ports chosen here may be chosen again (start)
        self._started = False
        free = iter(_free_ports(host, 2))
        self.client_port = client_port or next(free)
        self.peer_port = peer_port or next(free)
        self.log_dir = (
            Path(log_dir) if log_dir is not None else self.data_dir.with_name(self.data_dir.name + ".logs")
        )
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._starts = 0
        self._paused = False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EtcdProcess({self.endpoint}, {state}, data_dir={str(self.data_dir)!r})"

    @property
    def endpoint(self) -> str:
        """``"HOST:CLIENT_PORT"``."""
        return f"{self.host}:{self.client_port}"

    @property
    def url(self) -> str:
        """``"etcd://HOST:CLIENT_PORT"`` (a metadata store URL)."""
        return f"etcd://{self.endpoint}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        """The log file of the latest start."""
        return self.log_dir / f"etcd-{self._starts}.log"

    def start(self) -> EtcdProcess:
        """Start etcd and wait until it is healthy; returns ``self``. Raises :class:`EtcdProcessError`.

        The first start on ports chosen here tries other free ports (3 tries) when a port was taken between
        choosing and binding it (another process on the machine won the race)."""
        if self.running:
            raise EtcdProcessError(f"{self!r} is already running")
        binary = etcd_binary()
        if binary is None:
            raise EtcdProcessError("no etcd binary (install Debian's etcd-server: scripts/ensure_etcd.sh)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        tries = 3 if any(self._choose) and not self._started else 1
        for attempt in range(1, tries + 1):
            try:
                self._launch(binary)
            except _PortTaken as exc:
                if attempt == tries:
                    raise EtcdProcessError(str(exc)) from None
                client_port, peer_port = _free_ports(self.host, 2)
                self.client_port = client_port if self._choose[0] else self.client_port
                self.peer_port = peer_port if self._choose[1] else self.peer_port
                continue
            self._started = True
            return self
        raise AssertionError("unreachable")

    def _launch(self, binary: str) -> None:
        self._starts += 1
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        command = [binary, "--name", _NAME, "--data-dir", str(self.data_dir),
                   "--listen-client-urls", client, "--advertise-client-urls", client,
                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                   "--initial-cluster", f"{_NAME}={peer}", "--initial-cluster-state", "new",
                   "--initial-cluster-token", f"quasar-{self.peer_port}", *self.extra_args]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self._paused = False
        try:
            self._wait_healthy()
        except BaseException:
            self.kill()
            raise

    def _wait_healthy(self) -> None:
        """Until ``/health`` says true AND the answer comes from our process (another etcd on the machine may
        hold the port we chose: then ours exits with "address already in use")."""
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{self.endpoint}/health"
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                tail = self._tail()
                message = (
                    f"etcd exited with {self._proc.returncode} while starting; log: {self.log_path}\n{tail}"
                )
                raise (_PortTaken if "address already in use" in tail else EtcdProcessError)(message)
            try:
                with urllib.request.urlopen(url, timeout=1.0) as answer:
                    body = json.loads(answer.read() or b"{}")
                if body.get("health") not in ("true", True):
                    last = f"health answer {body!r}"
                elif _listens_on(self._proc.pid, self.client_port) is False:
                    last = f"another process answers on port {self.client_port}"
                else:
                    return
            except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON yet
                last = str(exc)
            time.sleep(0.05)
        raise EtcdProcessError(
            f"etcd at {self.endpoint} not healthy after {self.startup_timeout_s}s ({last}); log: {self.log_path}"
        )

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _signal(self, signum: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signum)

    def pause(self, timeout_s: float = 5.0) -> None:
        """SIGSTOP: etcd keeps its sockets open but answers nothing (and its own timers stop) until
        :meth:`resume`. Returns once every thread of etcd is stopped (Linux ``/proc``; a thread that was running
        could otherwise still answer a request sent right after the signal), or after ``timeout_s``."""
        if not self.running:
            raise EtcdProcessError(f"{self!r} is not running")
        self._signal(signal.SIGSTOP)
        self._paused = True
        deadline = time.monotonic() + timeout_s
        while not self._all_threads_stopped() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _all_threads_stopped(self) -> bool:
        """Whether /proc shows every thread of etcd stopped (True where there is no /proc to ask)."""
        assert self._proc is not None
        tasks = Path(f"/proc/{self._proc.pid}/task")
        try:
            states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks.iterdir()]
        except (OSError, IndexError):
            return not tasks.exists()
        return all(state in ("T", "t") for state in states)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; returns the exit code (None when never started).
        Idempotent."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            if self._paused:  # a stopped process cannot act on SIGTERM
                self.resume()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout_s)
        self._paused = False
        return proc.returncode

    def kill(self, timeout_s: float = 10.0) -> int | None:
        """SIGKILL at once (a crash); returns the exit code (None when never started). Idempotent."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=timeout_s)
        self._paused = False
        return proc.returncode

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
