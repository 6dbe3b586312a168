"""Quasar beside its peers in one sitting: ``benchmarks/peers.py`` run for Quasar with the official client and
with our own client, then for Redis Streams and RabbitMQ Streams (and optionally Redis ``everysec``, RabbitMQ
classic queues, NATS), all into one results file; then one table of the figures and the ratios Quasar / peer.

Each Quasar run gets a fresh ``quasar standalone`` (``make run`` defaults: SYNC_FLUSH) on free ports in a temporary
directory, started with :class:`~quasar.testing.broker_process.BrokerProcess` and stopped by its PID when the run
ends; peers.py is then run against it as ``run pulsar --pulsar-url ...`` with this interpreter (the project's venv:
``pulsar-client``, ``quasar`` and ``hdrhistogram``), once as is and once with ``--opt '{"client": "quasar"}'``.
Each peer is run with the bench venv's interpreter (``scripts/setup_bench_peers.sh`` installs both); peers.py starts
and stops those servers itself, on their fixed ports (it refuses busy ones). The peers' data directories go under
the same temporary directory as Quasar's (``--data-root``), so every system writes to the same file system.

Rows of the table (each cell the median over the reps, with ``±`` half the min-max spread in % of the median;
``†`` = fewer messages acknowledged or received than sent):

| Row            | Meaning (peers.py's definitions)                                                              |
|----------------|-----------------------------------------------------------------------------------------------|
| pub S msg/s    | publish N messages of S bytes (client batching as peers.py sets up each client) and wait for  |
|                | every durable acknowledgement: N / (first send -> last ack)                                   |
| cons S msg/s   | read and acknowledge that backlog: received / elapsed                                         |
| lat p50/p99 ms | end-to-end latency at ``--rate`` msg/s for ``--duration`` s, 100 B, from the send timestamp;  |
|                | Quasar's producer has batching off                                                            |
| server µs/msg  | server CPU (user + system, all threads, ``/proc/<pid>/stat``) while the workload's worker     |
|                | process(es) ran, per message. peers.py measures it for the servers it starts; its ``pulsar``  |
|                | peer starts none and records none, so for Quasar this script samples the broker's CPU every   |
|                | 20 ms, at the moments each peers.py worker appears and exits (the same window)                |

Ratio columns are Quasar / peer: above 1 is better for msg/s, below 1 is better for latency and CPU.

A full sitting (defaults: N = 200,000, 3 reps, 5,000 msg/s x 10 s; Quasar twice, Redis ``always``, RabbitMQ
Stream) takes about 7-10 minutes on 2 cores, most of it Redis ``always`` publishing 1 KiB; each optional peer
adds 1-3 minutes. ``--quick`` (N = 20,000, 1 rep, 3 s) takes about a minute and only shows that everything runs.
Ratios mean something only from one sitting on a quiet machine; the table's legend gives the load average before
and after. Every peers.py run is bounded (``--run-timeout``, by default from N and the reps): past it peers.py is
interrupted (it stops its servers and workers) and the sitting goes on with the next system.

Usage: ``.venv/bin/python benchmarks/peers_compare.py [--quick] [--n N] [--reps R] [--peers redis-always,...]
[--out FILE]``; ``--report FILE`` prints the table of the newest sitting in FILE again without running anything.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

import click

# run as a script: benchmarks/ is on sys.path
from peers_table import QUASAR, load_sitting, table

from quasar.testing.broker_process import BrokerProcess, BrokerProcessError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PEERS_PY = ROOT / "benchmarks" / "peers.py"
DEFAULT_BENCH_VENV = Path(
    os.environ.get("BENCH_VENV")
    or Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "quasar-bench" / "venv"
)

QUASAR_DURABILITY = "Quasar SYNC_FLUSH (make run defaults): receipt after the commit log is synced"
#: peer -> (module its client needs, server binary, ports peers.py binds)
PEERS = {
    "redis-always": ("redis", "redis-server", (6379,)),
    "redis-everysec": ("redis", "redis-server", (6379,)),
    "rabbitmq-stream": ("rstream", "/usr/lib/rabbitmq/bin/rabbitmq-server", (4369, 5672, 5552, 25672)),
    "rabbitmq-classic": ("pika", "/usr/lib/rabbitmq/bin/rabbitmq-server", (4369, 5672, 5552, 25672)),
    "nats": ("nats", "nats-server", (4222,)),
}
CPU_POLL_S = 0.02


# -- broker CPU around peers.py's worker processes ---------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all threads) from /proc/<pid>/stat; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def child_pids(pid: int) -> set[int]:
    """Children of ``pid`` from /proc/<pid>/task/*/children (CONFIG_PROC_CHILDREN), else by scanning PPids."""
    kids: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    try:
        for tid in tasks:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids.update(int(k) for k in f.read().split())
        return kids
    except FileNotFoundError:
        pass
    except OSError:
        return kids
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.add(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def worker_spec(pid: int) -> dict | None:
    """The JSON spec of a ``peers.py _worker SPEC`` process, or None (not a worker, not exec'd yet, or gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    if b"_worker" not in argv[:4]:
        return None
    try:
        return json.loads(argv[argv.index(b"_worker") + 1])
    except (ValueError, IndexError):
        return None


class WorkerCpu:
    """Samples the broker's CPU when each of peers.py's worker processes appears and when it exits.

    ``windows[(op, target)]`` is the broker CPU seconds spent while that worker lived (the same window peers.py
    uses for the servers it starts: from before the worker to after it)."""

    def __init__(self, parent_pid: int, broker_pid: int) -> None:
        self.parent_pid = parent_pid
        self.broker_pid = broker_pid
        self.windows: dict[tuple[str, str], tuple[float, float]] = {}
        self._live: dict[int, tuple[tuple[str, str], float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-cpu", daemon=True)

    def start(self) -> WorkerCpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._poll()  # workers that exited since the last poll

    def _run(self) -> None:
        while not self._stop.wait(CPU_POLL_S):
            self._poll()

    def _poll(self) -> None:
        cpu = cpu_seconds(self.broker_pid)
        if cpu is None:
            return
        kids = child_pids(self.parent_pid)
        for pid in kids - self._live.keys():
            spec = worker_spec(pid)
            if spec is not None:
                self._live[pid] = ((spec["op"], spec.get("target", "")), cpu)
        for pid in self._live.keys() - kids:
            key, start = self._live.pop(pid)
            self.windows[key] = (start, cpu)

    def cpu_for(self, ops: Iterable[str], target: str) -> float | None:
        spans = [self.windows[(op, target)] for op in ops if (op, target) in self.windows]
        if not spans:
            return None
        return round(max(end for _, end in spans) - min(start for start, _ in spans), 3)


# -- running peers.py ---------------------------------------------------------------------------------------------


def run_bounded(
    argv: list[str], env: dict[str, str], timeout_s: float, on_start: Callable[[int], None]
) -> int:
    """Run ``argv``, echoing its output indented, for at most ``timeout_s``: then SIGINT (peers.py stops its
    servers and workers in ``finally``), 120 s later SIGKILL; then SIGKILL to whatever is left of its process
    group. Returns the exit status."""
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=_default_sigint,  # a shell's background job ignores SIGINT; peers.py must not
        process_group=0,  # its own group (PGID = its PID): its workers are in it, its servers are not
    )
    on_start(proc.pid)

    def echo() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            print("    " + line.rstrip(), flush=True)

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        print(f"    ! peers.py still running after {timeout_s:.0f} s: interrupting it", flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        try:  # workers an interrupted peers.py left behind (e.g. a latency consumer): the group we started
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reader.join(5)
    return proc.returncode


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python then installs its KeyboardInterrupt handler


class Sitting:
    """One sitting: the settings, the results file, and one run of peers.py per system and round."""

    def __init__(self, opts: dict, out: Path, data_root: Path) -> None:
        self.o = opts
        self.out = out
        self.data_root = data_root
        self.id = dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
        self.failures: list[str] = []

    def peers_argv(self, python: str, peer: str) -> list[str]:
        o = self.o
        return [
            python,
            str(o["peers_py"]),
            "run",
            peer,
            "--n",
            str(o["n"]),
            "--n-large",
            str(o["n_large"]),
            "--reps",
            str(o["reps"]),
            "--sizes",
            o["sizes"],
            "--rate",
            str(o["rate"]),
            "--duration",
            str(o["duration"]),
            "--workloads",
            o["workloads"],
            "--out",
            str(self.out),
        ]

    def timeout_s(self) -> float:
        """A bound for one peers.py run, from peers.py's own worker bounds: every pub/cons at >= 1,000 msg/s."""
        o = self.o
        per_size = 2 * (max(o["n"], o["n_large"]) / 1000 + 60)
        per_rep = len(o["sizes"].split(",")) * per_size + 2 * o["duration"] + 150
        return o["run_timeout"] or o["reps"] * per_rep + 240

    def env(self) -> dict[str, str]:
        tmp = self.data_root / "peers-tmp"
        tmp.mkdir(exist_ok=True)
        return {**os.environ, "TMPDIR": str(tmp)}  # peers.py puts its servers' data under $TMPDIR/peers

    def run_quasar(self, system: str) -> None:
        adapter_opts, client = QUASAR[system]
        data = self.data_root / f"{system}-{uuid.uuid4().hex[:6]}"
        broker = BrokerProcess(data / "data", extra_args=self.o["broker_args"], startup_timeout_s=60)
        before = count_lines(self.out)
        tracker: WorkerCpu | None = None
        try:
            try:
                broker.start()
            except BrokerProcessError as exc:
                self.failures.append(f"{system}: {exc}")
                return
            assert broker.pid is not None and broker.service_url is not None
            pid = broker.pid
            print(f"  quasar standalone pid {pid} at {broker.service_url}", flush=True)
            opt = {**adapter_opts, **self.o["quasar_opt"], "pulsar_durability": QUASAR_DURABILITY}
            argv = self.peers_argv(sys.executable, "pulsar")
            argv += ["--pulsar-url", broker.service_url, "--opt", json.dumps(opt)]

            def track(peers_pid: int) -> None:
                nonlocal tracker
                tracker = WorkerCpu(peers_pid, pid).start()

            rc = run_bounded(argv, self.env(), self.timeout_s(), track)
            if rc != 0:
                log = self.out.with_name(f"{self.out.stem}-{system}-broker.log")
                if broker.stderr_path is not None and broker.stderr_path.exists():
                    shutil.copyfile(broker.stderr_path, log)  # the data directory goes away below
                self.failures.append(f"{system}: peers.py exited {rc} (broker log: {log})")
        finally:
            if tracker is not None:
                tracker.stop()
            broker.stop()
            shutil.rmtree(data, ignore_errors=True)
            self.annotate(before, system, client, tracker)

    def run_peer(self, peer: str) -> None:
        before = count_lines(self.out)
        try:
            rc = run_bounded(
                self.peers_argv(self.o["bench_python"], peer), self.env(), self.timeout_s(), _ignore
            )
            if rc != 0:
                self.failures.append(f"{peer}: peers.py exited {rc}")
        finally:
            self.annotate(before, peer, None, None)

    def annotate(self, before: int, system: str, client: str | None, tracker: WorkerCpu | None) -> None:
        """Tag the records peers.py appended with this sitting and system; for Quasar add the broker's CPU."""
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        for i in range(before, len(lines)):
            rec = json.loads(lines[i])
            rec["sitting"] = self.id
            rec["system"] = system
            if client is not None:
                rec["peer"], rec["adapter"], rec["client"] = system, "pulsar", client
                rec["server_cpu_s"] = quasar_cpu(rec, tracker) if tracker is not None else None
                rec["server_cpu_source"] = "peers_compare.py: /proc/<broker pid>/stat around the workers"
            lines[i] = json.dumps(rec)
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, self.out)

    def header(self) -> dict:
        return {
            "kind": "peers_compare",
            "sitting": self.id,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in self.o.items()},
            "quasar": git_describe(),
            "loadavg_before": os.getloadavg(),
            "nproc": os.cpu_count(),
            "data_fs": fs_type(self.data_root),
        }


def _ignore(_pid: int) -> None:
    return None


def quasar_cpu(rec: dict, tracker: WorkerCpu) -> float | None:
    """Broker CPU for one peers.py record (targets as peers.py names them)."""
    if rec.get("workload") == "lat":
        return tracker.cpu_for(("lat_cons", "lat_pub"), f"lat-{rec['run_id']}-{rec['rep']}")
    target = f"bench-{rec['run_id']}-{rec['rep']}-{rec['size']}"
    return tracker.cpu_for((rec.get("workload", ""),), target)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def git_describe() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return done.stdout.strip() or "?"


def fs_type(path: Path) -> str:
    """File system type of ``path`` from /proc/mounts (longest mount point that contains it)."""
    best, kind = "", "?"
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def port_busy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def preflight(o: dict) -> list[str]:
    """Everything a sitting needs, checked before anything starts; returns the problems found."""
    problems = []
    if not Path(o["peers_py"]).is_file():
        problems.append(f"no peers.py at {o['peers_py']} (--peers-script)")
    need_hdr = "lat" in o["workloads"].split(",")
    mods = ["pulsar", "quasar.client"] + (["hdrh"] if need_hdr else [])
    problems += missing_modules(sys.executable, mods)
    if o["peers"]:
        mods = sorted({PEERS[p][0] for p in o["peers"]}) + (["hdrh"] if need_hdr else [])
        if not Path(o["bench_python"]).exists():
            problems.append(f"no bench venv python at {o['bench_python']}: run scripts/setup_bench_peers.sh")
        else:
            problems += missing_modules(o["bench_python"], mods)
    for peer in o["peers"]:
        binary = PEERS[peer][1]
        if not (Path(binary).exists() or shutil.which(binary)):
            problems.append(f"{peer}: {binary} not installed (scripts/setup_bench_peers.sh)")
        busy = [p for p in PEERS[peer][2] if port_busy(p)]
        if busy:
            problems.append(f"{peer}: ports {busy} on 127.0.0.1 are in use (peers.py refuses to start)")
    return problems


def missing_modules(python: str, modules: list[str]) -> list[str]:
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    try:
        done = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{python}: {exc}"]
    if done.returncode == 0:
        return []
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return [f"{python} cannot import one of {modules}: {last} (scripts/setup_bench_peers.sh)"]


# -- the table ----------------------------------------------------------------------------------------------------


def _csv(_ctx: click.Context, _param: click.Parameter, value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in items if v not in PEERS]
    if unknown:
        raise click.BadParameter(f"unknown peer(s) {unknown}; known: {', '.join(PEERS)}")
    return items


def _clients(_ctx: click.Context, _param: click.Parameter, value: str) -> list[str]:
    items = [f"quasar-{v.strip()}" for v in value.split(",") if v.strip()]
    if any(i not in QUASAR for i in items):
        raise click.BadParameter("expected a comma-separated subset of official,own")
    return items


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # run the finally blocks: peers.py interrupted, broker stopped by PID


@click.command()
@click.option(
    "--n", type=click.IntRange(min=1), default=None, help="Messages for pub/cons at 100 B [200000]."
)
@click.option("--n-large", type=click.IntRange(min=1), default=None, help="Messages at 1 KiB [= --n].")
@click.option("--reps", type=click.IntRange(min=1), default=None, help="peers.py --reps per run [3].")
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Repeat the whole sequence of systems (alternating them); reps are pooled.",
)
@click.option("--rate", type=float, default=5000.0, show_default=True, help="lat: messages per second.")
@click.option("--duration", type=float, default=None, help="lat: seconds [10].")
@click.option("--sizes", default="100,1024", show_default=True)
@click.option("--workloads", default="pub,cons,lat", show_default=True)
@click.option(
    "--peers",
    "peer_list",
    default="redis-always,rabbitmq-stream",
    show_default=True,
    callback=_csv,
    help=f"Comma-separated, '' for none; known: {', '.join(PEERS)}.",
)
@click.option(
    "--clients",
    default="official,own",
    show_default=True,
    callback=_clients,
    help="Quasar runs: official (pulsar-client) and/or own (quasar.client).",
)
@click.option(
    "--quasar-opt", default="{}", help='Extra peers.py adapter options for Quasar, e.g. {"callback": false}.'
)
@click.option("--broker-arg", "broker_args", multiple=True, help="Extra `quasar standalone` argument.")
@click.option("--quick", is_flag=True, help="Smoke run: N 20000, 1 rep, lat 3 s (unless given).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Results (JSON lines, appended) [$TMPDIR/quasar-peers/peers-compare-<sitting>.jsonl].",
)
@click.option(
    "--data-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the temporary data directories go (the disk under test) [$TMPDIR].",
)
@click.option(
    "--peers-script",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_PEERS_PY,
    show_default=True,
)
@click.option(
    "--bench-python",
    default=str(DEFAULT_BENCH_VENV / "bin" / "python"),
    show_default=True,
    help="Interpreter with the peers' clients ($BENCH_VENV/bin/python).",
)
@click.option("--run-timeout", type=float, default=None, help="Seconds per peers.py run [from N and reps].")
@click.option(
    "--report",
    "report_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Only print the table of the newest sitting in this results file.",
)
def main(**kw: Any) -> None:
    """Run peers.py for Quasar (official client, our client) and the peers in one sitting; print the ratios."""
    if kw["report_file"] is not None:
        print(table(*load_sitting(kw["report_file"], None)))
        return
    quick = bool(kw["quick"])
    n = kw["n"] or (20_000 if quick else 200_000)
    o = {
        "n": n,
        "n_large": kw["n_large"] or n,
        "reps": kw["reps"] or (1 if quick else 3),
        "rounds": kw["rounds"],
        "rate": kw["rate"],
        "duration": kw["duration"] or (3.0 if quick else 10.0),
        "sizes": kw["sizes"],
        "workloads": kw["workloads"],
        "peers": kw["peer_list"],
        "clients": kw["clients"],
        "quasar_opt": json.loads(str(kw["quasar_opt"])),
        "broker_args": list(kw["broker_args"]),
        "peers_py": kw["peers_script"].resolve(),
        "bench_python": kw["bench_python"],
        "run_timeout": kw["run_timeout"],
    }
    problems = preflight(o)
    if problems:
        raise click.ClickException("cannot start the sitting:\n  " + "\n  ".join(problems))
    root = kw["data_root"] or Path(tempfile.gettempdir())
    signal.signal(signal.SIGTERM, _sigterm)
    with tempfile.TemporaryDirectory(prefix="quasar-peers-", dir=root) as tmp:
        sitting = Sitting(o, Path(), Path(tmp))
        default_out = Path(tempfile.gettempdir()) / "quasar-peers" / f"peers-compare-{sitting.id}.jsonl"
        sitting.out = (kw["out"] or default_out).resolve()
        sitting.out.parent.mkdir(parents=True, exist_ok=True)
        head = sitting.header()
        print(
            f"sitting {sitting.id}: results -> {sitting.out}; data under {tmp} ({head['data_fs']})",
            flush=True,
        )
        started = time.monotonic()
        try:
            for round_ in range(o["rounds"]):
                for system in [*o["clients"], *o["peers"]]:
                    print(f"== round {round_ + 1}: {system}", flush=True)
                    (sitting.run_quasar if system in QUASAR else sitting.run_peer)(system)
        finally:  # also for an interrupted sitting: --report can show what it measured
            head["loadavg_after"] = os.getloadavg()
            head["elapsed_s"] = round(time.monotonic() - started)
            with open(sitting.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(head) + "\n")
    print(f"\nsitting took {head['elapsed_s']} s; results in {sitting.out}\n")
    print(table(*load_sitting(sitting.out, sitting.id)))
    if sitting.failures:
        raise click.ClickException("some runs failed:\n  " + "\n  ".join(sitting.failures))


if __name__ == "__main__":
    main()
