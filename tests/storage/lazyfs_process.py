"""The test side of ``tests/storage/lazyfs.py``: start a lazyfs process by PID, send it control commands
(``cut``, ``sync``, ``stats``), unmount it, and say why a mount cannot work on this machine.

``lazyfs.py`` is the FUSE file system itself (it runs as its own process); see its docstring for what it
models. :class:`LazyFSProcess` starts ``python lazyfs.py BACKING MOUNTPOINT --control SOCKET`` and stops it
by PID; :func:`unavailable_reason` is the skip reason of the tests that need it.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LAZYFS_SCRIPT = Path(__file__).with_name("lazyfs.py")
"""The file system's entry point, run as its own process."""


def unavailable_reason() -> str | None:
    """Why a lazyfs mount cannot work here (no /dev/fuse, no fusermount3, no mfusepy or libfuse), or None."""
    if not os.path.exists("/dev/fuse") or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is missing or not accessible"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # mfusepy raises OSError when libfuse itself is missing
        return f"mfusepy is not usable ({exc}); pip install mfusepy, apt-get install fuse3"
    return None


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)


def fusermount_unmount(path: Path, *, lazy: bool = False) -> bool:
    """``fusermount3 -u [-z] PATH``; True when it succeeded."""
    command = ["fusermount3", "-u", *(["-z"] if lazy else []), str(path)]
    return subprocess.run(command, capture_output=True, check=False, timeout=30).returncode == 0


class LazyFSProcess:
    """One ``lazyfs.py`` process mounting ``backing`` at ``mountpoint``; :meth:`start` again after
    :meth:`unmount` is the reboot after a power cut (a fresh process over the durable state).

    ``log_dir`` gets ``lazyfs-<n>.log`` per start; ``posix_sizes`` runs it with ``--posix-sizes``. The control
    socket is ``<log_dir>/lazyfs.sock``, or a short path under the system temp directory when that is too long
    for a Unix socket address.
    """

    def __init__(self, backing: Path, mountpoint: Path, log_dir: Path, *, posix_sizes: bool = False) -> None:
        self.backing = backing
        self.posix_sizes = posix_sizes
        self.mountpoint = mountpoint
        self.log_dir = log_dir
        self.control = log_dir / "lazyfs.sock"
        self._short_dir: str | None = None
        if len(str(self.control)) > 100:
            self._short_dir = tempfile.mkdtemp(prefix="lazyfs-")
            self.control = Path(self._short_dir) / "ctl.sock"
        self.starts = 0
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def start(self, timeout_s: float = 20.0) -> LazyFSProcess:
        """Mount; returns once the mount is up and the control socket answers. Raises RuntimeError."""
        if self.pid is not None:
            raise RuntimeError(f"lazyfs already running (pid {self.pid})")
        for path in (self.backing, self.mountpoint, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.control.unlink()
        self.log_path = self.log_dir / f"lazyfs-{self.starts}.log"
        self.starts += 1
        command = [
            sys.executable,
            str(LAZYFS_SCRIPT),
            str(self.backing),
            str(self.mountpoint),
            "--control",
            str(self.control),
            *(["--posix-sizes"] if self.posix_sizes else []),
        ]
        env = {
            "FUSE_LIBRARY_NAME": "fuse3",
            **os.environ,
        }  # mfusepy would take libfuse 2 first when installed
        with open(self.log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"lazyfs exited with {self._proc.returncode}: {self.log_text()[-2000:]}")
            if self.control.exists() and is_mounted(self.mountpoint):
                with contextlib.suppress(OSError):
                    if self.command("ping") == "":
                        return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lazyfs not mounted within {timeout_s} s: {self.log_text()[-2000:]}")
            time.sleep(0.02)

    def command(self, command: str, timeout_s: float = 30.0) -> str:
        """Send one control command; return the text after ``ok`` (RuntimeError on ``error``)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(self.control))
            conn.sendall(command.encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        text = answer.decode().strip()
        if text != "ok" and not text.startswith("ok "):
            raise RuntimeError(f"lazyfs {command!r}: {text!r}")
        return text[3:]

    def cut(self) -> dict[str, Any]:
        """The power cut: drop everything not durable, ignore every later write. Returns what was dropped."""
        return json.loads(self.command("cut"))  # type: ignore[no-any-return]

    def sync(self) -> None:
        self.command("sync")

    def stats(self) -> dict[str, Any]:
        return json.loads(self.command("stats"))  # type: ignore[no-any-return]

    def unmount(self, timeout_s: float = 20.0) -> None:
        """``fusermount3 -u`` (retried while the mount is busy), then wait for the process to exit; falls back
        to :meth:`stop`."""
        deadline = time.monotonic() + timeout_s
        while is_mounted(self.mountpoint) and not fusermount_unmount(self.mountpoint):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.stop()

    def stop(self) -> None:
        """Stop by PID (SIGTERM: libfuse unmounts; then SIGKILL) and make sure nothing stays mounted. Safe to
        call twice."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if is_mounted(self.mountpoint) and not fusermount_unmount(self.mountpoint):
            fusermount_unmount(self.mountpoint, lazy=True)

    def close(self) -> None:
        """:meth:`stop`, and remove the short control socket directory if one was made."""
        self.stop()
        if self._short_dir is not None:
            shutil.rmtree(self._short_dir, ignore_errors=True)
