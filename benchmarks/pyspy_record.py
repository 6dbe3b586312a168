"""Record a broker process with ``py-spy record`` for one phase of a benchmark (shared by
``topic_lifecycle.py`` and ``many_topics.py``); summarize the output with ``pyspy_summary.py``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["start_profile", "stop_profile"]


def start_profile(profile: Path | None, phase: str, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy recording ``pid`` at 200 Hz into ``<profile>.<phase>`` (collapsed stacks, ``-F -f raw``), or
    None when ``profile`` is None. Waits 1 s for py-spy to attach."""
    if profile is None:
        return None
    py_spy = str(Path(sys.executable).with_name("py-spy"))
    out = f"{profile}.{phase}"
    spy = subprocess.Popen(
        [py_spy, "record", "-F", "-f", "raw", "-r", "200", "-o", out, "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    return spy


def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    """Stop a recording started by :func:`start_profile` (SIGINT: py-spy writes its file then)."""
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
