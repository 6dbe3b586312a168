"""Shared runner of the atheris harnesses in this directory: a fixed number of inputs, then a summary.

Each harness calls :func:`run` with its test function, the exceptions that count as a correct refusal of bad
input (``expected``) and a few well-formed seed inputs. libFuzzer (through atheris) mutates the seeds and the
inputs that reached new code; every input goes through a wrapper that

- counts it, and treats any exception outside ``expected`` as a finding: the input is saved under
  ``<work>/findings/`` (replay it with ``--reproduce FILE``) and the run goes on, so one run counts every finding;
- samples the resident set size (``/proc/self/statm``) after the warm-up (10 % of the inputs) and at the end:
  the growth between the two is the memory-leak check (a leak of even a few bytes per input shows up as tens of
  MB over a million inputs; libFuzzer's own corpus and coverage tables grow a little, hence the allowance);
- stops the process after ``--runs`` inputs with a summary line (inputs, seconds, inputs/s, findings, peak and
  grown RSS) and exit status 0 when there were no findings and the growth stayed under ``--max-rss-growth-mb``.

A crash of compiled code (SIGSEGV, abort) is caught by libFuzzer itself, which writes the input to
``<work>/crash-<sha1>`` and exits non-zero; an input running past ``--timeout`` seconds (a freeze) is written
as ``timeout-<sha1>``; an RSS past ``--rss-limit-mb`` as ``oom-<sha1>``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """The process's current resident set size in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss_bytes() -> int:
    """The process's peak resident set size in bytes (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost frame in Quasar or this directory: one line per distinct finding."""
    where = "?"
    for frame in traceback.extract_tb(exc.__traceback__):
        if "quasar" in frame.filename or str(HERE) in frame.filename:
            where = f"{Path(frame.filename).name}:{frame.lineno}"
    return f"{type(exc).__name__} at {where}: {str(exc)[:120]}"


def _parse_args(name: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"fuzz/{name}.py", description=f"atheris harness {name}")
    parser.add_argument("--runs", type=int, default=100_000, help="inputs to run (default 100000)")
    parser.add_argument("--max-len", type=int, default=4096, help="largest input in bytes (default 4096)")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take (default 10)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048, help="libFuzzer's RSS limit (default 2048)")
    parser.add_argument(
        "--max-rss-growth-mb", type=float, default=64.0, help="allowed RSS growth after warm-up (default 64)"
    )
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer's random seed (0: from the clock)")
    parser.add_argument(
        "--work", type=Path, default=None, help="corpus and findings (default fuzz/work/NAME)"
    )
    parser.add_argument(
        "--reproduce", type=Path, nargs="+", help="run these inputs once each, with tracebacks"
    )
    return parser.parse_args(argv)


def _reproduce(
    test: Callable[[bytes], None], expected: tuple[type[BaseException], ...], paths: list[Path]
) -> int:
    """Run each saved input once; exit status 1 when any is a finding."""
    failed = 0
    for path in paths:
        try:
            test(path.read_bytes())
        except expected as exc:
            print(f"{path}: refused as expected: {type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - what the harness looks for: anything else is a finding
            failed += 1
            print(f"{path}: FINDING")
            traceback.print_exc()
        else:
            print(f"{path}: accepted")
    return 1 if failed else 0


def run(
    name: str,
    test: Callable[[bytes], None],
    expected: tuple[type[BaseException], ...],
    seeds: Callable[[], Iterable[bytes]],
    argv: list[str] | None = None,
) -> None:
    """Fuzz ``test`` for ``--runs`` inputs (or replay ``--reproduce`` files) and exit with the verdict."""
    args = _parse_args(name, sys.argv[1:] if argv is None else argv)
    if args.reproduce:
        sys.exit(_reproduce(test, expected, args.reproduce))

    work = args.work or HERE / "work" / name
    corpus = work / "corpus"
    findings_dir = work / "findings"
    corpus.mkdir(parents=True, exist_ok=True)
    findings_dir.mkdir(parents=True, exist_ok=True)
    for seed in seeds():
        (corpus / ("seed-" + hashlib.sha1(seed).hexdigest())).write_bytes(seed)

    runs = args.runs
    warm_at = max(1, runs // 10)
    state = {"count": 0, "findings": 0, "warm_rss": 0, "start": time.monotonic()}
    signatures: dict[str, int] = {}

    def finish() -> None:
        seconds = time.monotonic() - state["start"]
        end_rss = rss_bytes()
        growth = (end_rss - state["warm_rss"]) / 2**20
        ok = state["findings"] == 0 and growth <= args.max_rss_growth_mb
        print(
            f"\n[{name}] inputs={state['count']} seconds={seconds:.0f} inputs/s={state['count'] / seconds:.0f} "
            f"findings={state['findings']} distinct={len(signatures)} peak_rss_mb={peak_rss_bytes() / 2**20:.0f} "
            f"rss_after_warmup_mb={state['warm_rss'] / 2**20:.0f} rss_end_mb={end_rss / 2**20:.0f} "
            f"rss_growth_mb={growth:.1f} (limit {args.max_rss_growth_mb:g}) -> {'OK' if ok else 'FAIL'}",
            flush=True,
        )
        for signature, seen in sorted(signatures.items(), key=lambda item: -item[1]):
            print(f"[{name}]   {seen:8d} x {signature}", flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if ok else 1)  # libFuzzer has no "stop after N of my inputs": end the process here

    def one_input(data: bytes) -> None:
        state["count"] += 1
        try:
            test(data)
        except expected:
            pass
        except Exception as exc:  # noqa: BLE001 - what the harness looks for: anything else is a finding
            state["findings"] += 1
            signature = _signature(exc)
            if signature not in signatures:
                path = findings_dir / ("finding-" + hashlib.sha1(data).hexdigest())
                path.write_bytes(data)
                print(f"\n[{name}] FINDING ({path}): {signature}", flush=True)
                traceback.print_exc()
            signatures[signature] = signatures.get(signature, 0) + 1
        count = state["count"]
        if count == warm_at:
            state["warm_rss"] = rss_bytes()
        if count % max(1, runs // 20) == 0:
            seconds = time.monotonic() - state["start"]
            print(
                f"[{name}] {count}/{runs} inputs, {count / seconds:.0f}/s, findings {state['findings']}, "
                f"rss {rss_bytes() / 2**20:.0f} MB",
                flush=True,
            )
        if count >= runs:
            finish()

    libfuzzer_args = [
        sys.argv[0],
        str(corpus),
        f"-max_len={args.max_len}",
        f"-timeout={args.timeout}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        f"-artifact_prefix={work}/",
        f"-seed={args.seed}",
        "-print_final_stats=1",
    ]
    atheris.Setup(libfuzzer_args, one_input)
    atheris.Fuzz()
