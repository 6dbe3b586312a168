"""Replication benchmark: what master/slave replication costs a producer, and how long a failover takes, with
the official client, one sitting.

**Part 1, publish cost.** For each mode the script starts etcd and one broker group (``quasar broker``
processes, free ports, a temporary directory) and runs the same workload through one multi-host service URL
naming every broker of the group (``pulsar://H:P1,H:P2``):

- ``lone``: one master without ``--broker-role`` (no replication);
- ``async``: ``--broker-role ASYNC_MASTER`` + 1 ``SLAVE`` (a receipt waits for the local store only);
- ``sync``: ``--broker-role SYNC_MASTER`` + 1 ``SLAVE`` (a receipt waits for the slave too: needAckNums 2).

Each mode has two runs, each on a fresh topic after a warm-up (a blocking send retried until it succeeds, so
a SYNC_MASTER's slave is in sync before the clock starts):

- ``burst``: ``send_async`` of ``--messages`` messages of ``--size`` bytes as fast as the client takes them
  (``--max-pending`` in flight, ``block_if_queue_full``), batching on unless ``--no-batching``;
- ``window``: the same count with at most ``--inflight`` messages awaiting their receipt (a semaphore taken
  before ``send_async`` and given back by its callback), so the latencies are less a queue's length (with
  batching on they are then mostly the client's 10 ms batching delay; ``--no-batching`` shows the slave's
  round trip per entry).

| Column        | Meaning                                                                                       |
|---------------|-----------------------------------------------------------------------------------------------|
| mode / run    | the group (above) and the run (burst / window N)                                              |
| msg/s, MB/s   | messages (payload bytes, 10^6 B) / (last receipt - first send_async)                          |
| p50/p99/max ms| per message: ``send_async`` call -> its receipt callback (includes the batching delay, at most  |
|               | 10 ms, and, in a burst, the wait behind the messages already pending)                         |
| failed        | receipts whose result was not Ok, plus receipts still missing 120 s after the last send      |
| client CPU s  | this process's user + system CPU over the run (the official client's threads and the loop)   |
| master CPU s  | user + system CPU of the master process over the run (``/proc/<pid>/stat``, all threads)      |
| slave CPU s   | the same for the slave (``-`` for ``lone``)                                                   |

Then the ratios async / lone and sync / lone of the burst msg/s and of p99 in both runs.

**Part 2, failover.** etcd (the brokers' session lease ``--session-ttl`` seconds, default 2) and a group of a
``SYNC_MASTER`` and TWO slaves (with one slave a promoted SYNC_MASTER has no in-sync slave left and cannot
receipt anything). A subscription (initial position Earliest) is made first, then one producer (batching
off, ``--send-timeout-ms``) sends one message at a time, each carrying its sequence number, for
``--before-s`` seconds; then the master is SIGKILLed and the producer goes on sending (a failed send is
counted and the next one is tried) until the first receipt, then for ``--after-s`` seconds more. A thread
polls the surviving brokers' ``GET /admin/v2/brokers`` to see when one reports itself master. Printed:

| Line                | Meaning                                                                                  |
|---------------------|------------------------------------------------------------------------------------------|
| receipted before    | messages receipted before the kill                                                       |
| kill -> new master  | SIGKILL -> a surviving broker's admin API first lists a slave as master (0.05 s polls)   |
| kill -> 1st receipt | SIGKILL -> the first receipt of a send made after the kill                               |
| failed sends        | sends after the kill that failed (send timeout or an error) before that receipt          |
| receipted after     | messages receipted after the kill                                                        |
| consumed            | distinct sequence numbers read from the subscription on the new master afterwards;      |
|                     | ``lost`` = receipted messages missing from them (0 expected), ``extra`` = messages whose |
|                     | send failed but which were stored anyway (allowed: a retry may duplicate), ``dup`` =     |
|                     | repeated deliveries                                                                      |

The kill -> first receipt time is the lease TTL, the election, the promotion, a slave catching up with the
new master, and the official client's reconnection backoff (it doubles from 100 ms) together.

Each broker's and etcd's logs (and the client's, ``client-<mode>.log``) are in the temporary directory, which
is removed at the end (``--keep`` keeps it and prints its path); the script prints, per broker log, how many
WARNING/ERROR lines and tracebacks it holds and its three commonest such messages (``--broker-log-level``
sets the brokers' level, warning by default). Every process is stopped by its PID (slaves before the master).
Numbers are for comparisons in one sitting on one machine and are never asserted by tests.

Usage: ``python benchmarks/replication.py [--messages N] [--size B] [--no-batching] [--inflight N]
[--session-ttl S] [--send-timeout-ms MS] [--modes lone,async,sync] [--no-failover] [--keep]``; a default run
takes about 30 s on 2 cores (a failover that never receipts adds ``--failover-timeout``, 60 s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import click
import pulsar
from produce_consume import cpu_seconds, percentile
from rich.console import Console
from rich.table import Table

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.etcd import EtcdProcess

GROUP = "g"
T = TypeVar("T")
ROLES = {"lone": None, "async": "ASYNC_MASTER", "sync": "SYNC_MASTER"}


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system


class Group:
    """etcd and one broker group (a master, then ``slaves`` slaves) under ``root``; :meth:`stop` by PID."""

    def __init__(
        self, root: Path, role: str | None, slaves: int, session_ttl_s: float, log_level: str
    ) -> None:
        self.root = root
        self.log_level = log_level
        self.role = role
        self.slaves = slaves
        self.session_ttl_s = session_ttl_s
        self.etcd = EtcdProcess(root / "etcd")
        self.brokers: list[BrokerProcess] = []

    def start(self) -> Group:
        self.etcd.start()
        store = f"{self.etcd.url}?session_ttl_s={self.session_ttl_s:g}&operation_timeout_s=3"
        for broker_id in range(1 + self.slaves):
            args = ["--broker-name", GROUP, "--broker-id", str(broker_id), "--metadata-store", store,
                    "--log-level", self.log_level]  # fmt: skip
            if self.role is not None:
                args += ["--broker-role", self.role if broker_id == 0 else "SLAVE", "--ha-port", "0"]
            broker = BrokerProcess(self.root / f"{GROUP}-{broker_id}", subcommand="broker", extra_args=args)
            self.brokers.append(broker)  # appended first: stop() stops it even when start() fails
            broker.start()
        return self

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(f"{b.host}:{b.bound_port}" for b in self.brokers)

    def cpu(self) -> list[float]:
        return [cpu_seconds(b.pid) or 0.0 for b in self.brokers]

    def stop(self) -> None:
        for broker in reversed(self.brokers):  # slaves first: stopping them elects nobody
            broker.stop()
        self.etcd.stop()

    def log_report(self) -> list[str]:
        """Per broker log: how many WARNING and ERROR lines and tracebacks, and its commonest WARNING+ messages
        (digits masked so repeats of one message count together)."""
        lines = []
        for index, broker in enumerate(self.brokers):
            for log in sorted(broker.log_dir.glob("broker-*.stderr.log")):
                text = log.read_text(errors="replace")
                kinds: Counter[str] = Counter()
                messages: Counter[str] = Counter()
                for match in _LOG_LINE.finditer(text):
                    kinds[match.group(1)] += 1
                    messages[f"{match.group(1)} {re.sub(r'[0-9]+', '#', match.group(2))}"] += 1
                tracebacks = text.count("Traceback (most recent call last)")
                if kinds or tracebacks:
                    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                    lines.append(f"  {GROUP}-{index} {log.name}: {counts}, {tracebacks} tracebacks")
                    lines += [f"    {n:>4} x {message[:140]}" for message, n in messages.most_common(3)]
        return lines


_LOG_LINE = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) (\S+: .*)$", re.MULTILINE)


def _retry(what: str, action: Callable[[], T], timeout_s: float) -> T:
    """``action()`` until it returns without raising, for at most ``timeout_s`` (then the last error)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return action()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: still failing after {timeout_s:g} s: {exc!r}") from exc
            time.sleep(0.2)


# -- part 1 ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunResult:
    mode: str
    run: str
    messages: int
    seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    failed: int
    client_cpu_s: float
    broker_cpu_s: list[float]


class _Receipts:
    """Send timestamps and receipt latencies (ns) per message, filled by the client's callback thread."""

    def __init__(self, n: int, window: threading.Semaphore | None) -> None:
        self.sent_ns = array("q", bytes(8 * n))
        self.latency_ns = array("q", bytes(8 * n))
        self.done = 0
        self.failed = 0
        self.last_ns = 0
        self.all_done = threading.Event()
        self._n = n
        self._window = window

    def callback(self, i: int, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        now = time.perf_counter_ns()
        self.latency_ns[i] = now - self.sent_ns[i]
        self.last_ns = now
        if result != pulsar.Result.Ok:
            self.failed += 1
        self.done += 1
        if self._window is not None:
            self._window.release()
        if self.done == self._n:
            self.all_done.set()


def _run(
    client: pulsar.Client,
    group: Group,
    mode: str,
    run: str,
    messages: int,
    size: int,
    batching: bool,
    max_pending: int,
    inflight: int | None,
) -> RunResult:
    topic = f"persistent://public/default/{mode}-{run.split()[0]}"
    producer = _retry(
        "create_producer",
        lambda: client.create_producer(
            topic,
            batching_enabled=batching,
            batching_max_publish_delay_ms=10,
            block_if_queue_full=True,
            max_pending_messages=max_pending,
            send_timeout_millis=30_000,
        ),
        60,
    )
    try:
        _retry("warm-up send", lambda: producer.send(b"warm-up"), 60)
        window = None if inflight is None else threading.Semaphore(inflight)
        receipts = _Receipts(messages, window)
        payload = os.urandom(size)
        sent_ns, send, callback, clock = (
            receipts.sent_ns,
            producer.send_async,
            receipts.callback,
            time.perf_counter_ns,
        )
        cpu0, client0 = group.cpu(), _process_cpu()
        start_ns = clock()
        for i in range(messages):
            if window is not None:
                window.acquire()
            sent_ns[i] = clock()
            send(payload, partial(callback, i))
        producer.flush()
        receipts.all_done.wait(120)
        seconds = (max(receipts.last_ns, start_ns + 1) - start_ns) / 1e9
        cpu1, client1 = group.cpu(), _process_cpu()
    finally:
        producer.close()
    latencies = sorted(receipts.latency_ns[: receipts.done])
    return RunResult(
        mode,
        run,
        receipts.done,
        seconds,
        percentile(latencies, 50) / 1e6,
        percentile(latencies, 99) / 1e6,
        (latencies[-1] if latencies else 0) / 1e6,
        receipts.failed + messages - receipts.done,
        client1 - client0,
        [b - a for a, b in zip(cpu0, cpu1, strict=True)],
    )


def publish_cost(
    root: Path, mode: str, messages: int, size: int, batching: bool, max_pending: int, inflight: int,
    session_ttl_s: float, log_level: str, logs: list[str],
) -> list[RunResult]:  # fmt: skip
    group = Group(root / mode, ROLES[mode], 0 if mode == "lone" else 1, session_ttl_s, log_level)
    try:
        group.start()
        client = pulsar.Client(
            group.service_url,
            operation_timeout_seconds=10,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(root / f"client-{mode}.log")),
        )
        try:
            return [
                _run(client, group, mode, "burst", messages, size, batching, max_pending, None),
                _run(
                    client, group, mode, f"window {inflight}", messages, size, batching, max_pending, inflight
                ),
            ]
        finally:
            client.close()
    finally:
        group.stop()
        logs += [f"{mode}:", *group.log_report()]


# -- part 2 ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FailoverResult:
    receipted_before: list[int] = field(default_factory=list)
    receipted_after: list[int] = field(default_factory=list)
    failed_after: list[int] = field(default_factory=list)
    kill_to_master_s: float | None = None
    kill_to_receipt_s: float | None = None
    new_master: str = "?"
    consumed: list[int] = field(default_factory=list)
    consume_note: str = ""


def _live_brokers(admin_url: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(admin_url + "/admin/v2/brokers", timeout=1.0) as response:
        answer = json.loads(response.read())
    return answer if isinstance(answer, list) else answer.get("brokers", [])  # type: ignore[no-any-return]


def _watch_master(
    survivors: list[BrokerProcess], t_kill: float, result: FailoverResult, stop: threading.Event
) -> None:
    """Poll the survivors' admin APIs until one lists a broker with id > 0 as master."""
    while not stop.is_set():
        for broker in survivors:
            try:
                listed = _live_brokers(str(broker.admin_url))
            except (OSError, ValueError):
                continue
            for entry in listed:
                if str(entry.get("role", "")).lower() == "master" and str(entry.get("brokerId", "0")) != "0":
                    result.kill_to_master_s = time.perf_counter() - t_kill
                    result.new_master = f"id {entry.get('brokerId')} epoch {entry.get('epoch', '?')}"
                    return
        stop.wait(0.05)


def failover(
    root: Path, session_ttl_s: float, send_timeout_ms: int, before_s: float, after_s: float, timeout_s: float,
    size: int, log_level: str, logs: list[str],
) -> FailoverResult:  # fmt: skip
    group = Group(root / "failover", "SYNC_MASTER", 2, session_ttl_s, log_level)
    result = FailoverResult()
    topic = "persistent://public/default/failover"
    stop_watch = threading.Event()
    try:
        group.start()
        client = pulsar.Client(
            group.service_url,
            operation_timeout_seconds=5,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(root / "client-failover.log")),
        )
        try:
            _retry("subscribe", lambda: client.subscribe(topic, "check",
                   initial_position=pulsar.InitialPosition.Earliest).close(), 60)  # fmt: skip
            producer = _retry(
                "create_producer",
                lambda: client.create_producer(
                    topic, batching_enabled=False, send_timeout_millis=send_timeout_ms
                ),
                60,
            )
            _retry("warm-up send", lambda: producer.send(b"warm-up"), 60)
            seq = 0

            def payload(n: int) -> bytes:
                return f"{n:010d}".encode().ljust(size, b"x")

            end = time.perf_counter() + before_s
            while time.perf_counter() < end:
                producer.send(payload(seq))  # the group is healthy: a failure here is a finding, raise it
                result.receipted_before.append(seq)
                seq += 1
            t_kill = time.perf_counter()
            group.brokers[0].kill()
            watcher = threading.Thread(
                target=_watch_master, args=(group.brokers[1:], t_kill, result, stop_watch), daemon=True
            )
            watcher.start()
            deadline = t_kill + timeout_s
            stop_at = deadline
            while time.perf_counter() < min(deadline, stop_at):
                try:
                    producer.send(payload(seq))
                except Exception:  # noqa: BLE001 - timeouts and broker errors alike: count it, send the next
                    result.failed_after.append(seq)
                else:
                    result.receipted_after.append(seq)
                    if result.kill_to_receipt_s is None:
                        result.kill_to_receipt_s = time.perf_counter() - t_kill
                        stop_at = time.perf_counter() + after_s
                seq += 1
            stop_watch.set()
            watcher.join(5)
            producer.close()
            result.consumed, result.consume_note = _consume(client, topic, seq)
        finally:
            client.close()
    finally:
        stop_watch.set()
        group.stop()
        logs += ["failover:", *group.log_report()]
    return result


def _consume(client: pulsar.Client, topic: str, sent: int) -> tuple[list[int], str]:
    """Every sequence number the subscription delivers (warm-up skipped), until all ``sent`` arrived or 5 s of
    silence (30 s at most)."""
    try:
        consumer = _retry("subscribe after the failover", lambda: client.subscribe(topic, "check",
                          initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1000), 30)  # fmt: skip
    except RuntimeError as exc:
        return [], str(exc)
    seen: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(set(seen)) < sent:
            try:
                message = consumer.receive(5_000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            data = message.data()
            if data != b"warm-up":
                seen.append(int(data[:10]))
    finally:
        consumer.close()
    return seen, ""


# -- output ------------------------------------------------------------------------------------------------


def _print_publish(console: Console, results: list[RunResult], size: int, batching: bool) -> None:
    table = Table(title=f"publish: {results[0].messages:,} x {size} B per run, batching {'on' if batching else 'off'}"
                        f", {os.cpu_count()} cores")  # fmt: skip
    for column in ("mode", "run", "msg/s", "MB/s", "p50 ms", "p99 ms", "max ms", "failed", "client CPU s",
                   "master CPU s", "slave CPU s"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in results:
        rate = r.messages / r.seconds
        table.add_row(r.mode, r.run, f"{rate:,.0f}", f"{rate * size / 1e6:,.2f}", f"{r.p50_ms:.2f}",
                      f"{r.p99_ms:.2f}", f"{r.max_ms:.1f}", str(r.failed), f"{r.client_cpu_s:.2f}",
                      f"{r.broker_cpu_s[0]:.2f}",
                      " ".join(f"{c:.2f}" for c in r.broker_cpu_s[1:]) or "-")  # fmt: skip
    console.print(table)
    by = {(r.mode, r.run.split()[0]): r for r in results}
    lone_burst, lone_window = by.get(("lone", "burst")), by.get(("lone", "window"))
    for mode in ("async", "sync"):
        burst, window = by.get((mode, "burst")), by.get((mode, "window"))
        if lone_burst and lone_window and burst and window:
            rate_ratio = (burst.messages / burst.seconds) / (lone_burst.messages / lone_burst.seconds)
            console.print(
                f"ratio {mode} / lone: burst msg/s {rate_ratio:.2f}x"
                f", burst p99 {burst.p99_ms / lone_burst.p99_ms:.2f}x"
                f", window p99 {window.p99_ms / lone_window.p99_ms:.2f}x"
            )


def _print_failover(console: Console, r: FailoverResult, session_ttl_s: float, send_timeout_ms: int) -> None:
    def seconds(value: float | None) -> str:
        return "never (timed out)" if value is None else f"{value:.2f} s"

    receipted = set(r.receipted_before) | set(r.receipted_after)
    consumed = set(r.consumed)
    lost_before = sorted(set(r.receipted_before) - consumed)
    lost_after = sorted(set(r.receipted_after) - consumed)
    extra = sorted(consumed - receipted)
    console.print(
        f"failover: SYNC_MASTER + 2 slaves, session_ttl_s {session_ttl_s:g}, send timeout {send_timeout_ms} ms"
    )
    console.print(f"  receipted before the kill : {len(r.receipted_before):,}")
    console.print(f"  kill -> new master listed : {seconds(r.kill_to_master_s)} ({r.new_master})")
    console.print(f"  kill -> first receipt     : {seconds(r.kill_to_receipt_s)}")
    console.print(f"  failed sends after kill   : {len(r.failed_after):,}")
    console.print(f"  receipted after the kill  : {len(r.receipted_after):,}")
    console.print(
        f"  consumed afterwards       : {len(consumed):,} distinct; lost: {len(lost_before)} of those before the kill"
        f", {len(lost_after)} of those after; extra {len(extra)}; dup {len(r.consumed) - len(consumed)}"
        + (f"; {r.consume_note}" if r.consume_note else "")
    )
    if lost_before or lost_after:
        console.print(f"  lost sequence numbers (first 20): {(lost_before + lost_after)[:20]}")
    console.print(f"  none lost: {'yes' if not (lost_before or lost_after) and not r.consume_note else 'NO'}")


@click.command()
@click.option("--messages", default=20_000, show_default=True, help="Messages per publish run.")
@click.option("--size", default=100, show_default=True, help="Payload bytes.")
@click.option("--no-batching", is_flag=True, help="One message per entry.")
@click.option("--max-pending", default=5000, show_default=True, help="Producer queue in the burst run.")
@click.option(
    "--inflight", default=100, show_default=True, help="Messages awaiting a receipt in the window run."
)
@click.option("--modes", default="lone,async,sync", show_default=True, help="Publish-cost groups, in order.")
@click.option(
    "--session-ttl", default=2.0, show_default=True, help="etcd session lease TTL of the brokers, s."
)
@click.option("--send-timeout-ms", default=1000, show_default=True, help="Failover producer's send timeout.")
@click.option(
    "--before-s", default=2.0, show_default=True, help="Failover: seconds of sends before the kill."
)
@click.option(
    "--after-s", default=1.0, show_default=True, help="Failover: seconds of sends after the 1st receipt."
)
@click.option("--failover-timeout", default=60.0, show_default=True, help="Failover: give up after this, s.")
@click.option("--no-failover", is_flag=True, help="Skip part 2.")
@click.option(
    "--broker-log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="The brokers' --log-level.",
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory (data and logs) and print its path.")
def main(
    messages: int, size: int, no_batching: bool, max_pending: int, inflight: int, modes: str, session_ttl: float,
    send_timeout_ms: int, before_s: float, after_s: float, failover_timeout: float, no_failover: bool,
    broker_log_level: str, keep: bool,
) -> None:  # fmt: skip
    """Replication's cost to a producer (lone, ASYNC_MASTER, SYNC_MASTER) and a failover's duration."""
    console = Console(width=max(Console().width, 150))
    root = Path(tempfile.mkdtemp(prefix="quasar-replication-bench-"))
    logs: list[str] = []
    try:
        results: list[RunResult] = []
        for mode in (m.strip() for m in modes.split(",") if m.strip()):
            if mode not in ROLES:
                raise click.BadParameter(f"unknown mode {mode!r}", param_hint="--modes")
            results += publish_cost(root, mode, messages, size, not no_batching, max_pending, inflight,
                                    session_ttl, broker_log_level, logs)  # fmt: skip
        if results:
            _print_publish(console, results, size, not no_batching)
        if not no_failover:
            outcome = failover(root, session_ttl, send_timeout_ms, before_s, after_s, failover_timeout, size,
                               broker_log_level, logs)  # fmt: skip
            _print_failover(console, outcome, session_ttl, send_timeout_ms)
        console.print("broker stderr logs (WARNING+ lines, tracebacks; commonest messages):")
        console.print("\n".join(logs) if any(not x.endswith(":") for x in logs) else "  none")
    finally:
        if keep:
            console.print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
