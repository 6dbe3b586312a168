"""Run the atheris harnesses of this directory for N inputs each and print one summary line per harness.

Usage::

    PYTHONPATH=src .venv/bin/python fuzz/run.py [--runs N] [--seed S] [TARGET ...]

TARGET is any of ``frames commands batch server_cnx`` (default: all, in that order). Each harness runs in its own
process (``fuzz/fuzz_<target>.py --runs N``); libFuzzer's own progress lines go to
``fuzz/work/fuzz_<target>/libfuzzer.log`` and the harness's summary to stdout: inputs, seconds, inputs/s,
findings (inputs that raised what the harness does not allow; saved under ``work/fuzz_<target>/findings/``),
peak RSS and the RSS growth after warm-up (the leak check). libFuzzer writes ``crash-*``, ``timeout-*`` and
``oom-*`` files into ``work/fuzz_<target>/`` for a crash of compiled code, an input over 10 s or an RSS over
2 GB. Exit status: 0 when every harness passed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = ("frames", "commands", "batch", "server_cnx")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "targets", nargs="*", metavar="TARGET", help=f"any of {' '.join(TARGETS)} (default: all)"
    )
    parser.add_argument("--runs", type=int, default=100_000, help="inputs per harness (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer's random seed (0: from the clock)")
    args = parser.parse_args()
    unknown = set(args.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; choose from {' '.join(TARGETS)}")
    failed = []
    for target in args.targets or TARGETS:
        name = f"fuzz_{target}"
        work = HERE / "work" / name
        work.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            str(HERE / f"{name}.py"),
            "--runs",
            str(args.runs),
            "--seed",
            str(args.seed),
        ]
        with open(work / "libfuzzer.log", "wb") as log:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, check=False)
        lines = done.stdout.decode(errors="replace").splitlines()
        summary = [
            line for line in lines if line.startswith(f"[{name}] inputs=") or line.startswith(f"[{name}]   ")
        ]
        findings = [line for line in lines if "FINDING" in line]
        for line in findings + summary:
            print(line, flush=True)
        if not summary:
            print(f"[{name}] stopped before its summary (exit {done.returncode}): see {work}/libfuzzer.log")
        if done.returncode != 0:
            failed.append(target)
    print("all passed" if not failed else f"failed: {' '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
