"""Storage benchmark: appends to the MessageStore directly, beside a sequential-write baseline of the same disk.

Cases, each on a fresh store in ``--dir``:

| case            | what is timed                                                                          |
|-----------------|----------------------------------------------------------------------------------------|
| ASYNC <size>    | ``put`` of N bodies in a loop (ASYNC_FLUSH: flush thread every 500 ms), then the final  |
|                 | ``flush()`` (fdatasync of everything)                                                   |
| SYNC <size>     | ``--producers`` asyncio tasks, each ``await put_and_wait`` in a loop (SYNC_FLUSH, group |
|                 | commit: every append waits for the fdatasync covering it)                              |
| ASYNC <size>    | ``put_batch`` of ``--batch`` bodies in a loop (RocketMQ ``putMessages``: one record per |
| batch<B>        | body, one call, one segment), then the final ``flush()``                                |
| SYNC <size>     | ``--producers`` tasks, each ``await put_batch_and_wait`` of ``--batch`` bodies in a     |
| batch<B> x<P>   | loop (one flush wait per batch)                                                        |

Columns: appends/s; body MB/s (10^6 B of bodies per second); log MB/s (commit log bytes: bodies plus the
~110-130 bytes of record header, topic and properties per record); ratio = log MB/s / baseline MB/s; CPU µs =
the process's CPU time (user + system, every thread: the loop, the flush and allocation threads, the kernel's
page faults and writeback done on their behalf) over the timed part, per append.

Baseline: ``fio --rw=write --bs=1M --ioengine=sync --end_fsync=1`` (buffered sequential write of the same
number of bytes, then fsync; the same write-then-sync pattern as the store), or, without fio,
``dd bs=1M conv=fdatasync``; run ``--baseline-runs`` times (the disk is shared and its figure varies by 2-3x
between runs on the development VM), the best run is the baseline, so the ratios err low. Issue 3's targets:
ASYNC 1 KiB >= 50 % of the baseline, SYNC 1 KiB with 64 producers >= 25 %. Numbers are for comparison on one
machine, never asserted by tests.

Appends/s counts records (a batch of 64 is 64 appends). The SYNC single-put rows are bounded by the disk's
fdatasync latency, not by CPU: at most ``--producers`` records are in flight, so each group commit round
covers at most that many (64 records per ~150-400 µs fdatasync on the development VM); the batch rows lift
that bound by ``--batch``.

Usage: ``python benchmarks/storage.py [--dir DIR] [--mib 256] [--sizes 100,1024] [--producers 64] [--batch 64]
[--baseline-runs 3]``
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from quasar.storage import FlushDiskType, MessageStore, PutStatus, StoreConfig

TOPIC = "bench"


@dataclass
class Row:
    case: str
    appends: int
    seconds: float
    body_bytes: int
    log_bytes: int
    cpu_seconds: float = 0.0

    @property
    def appends_per_s(self) -> float:
        return self.appends / self.seconds

    @property
    def body_mb_s(self) -> float:
        return self.body_bytes / self.seconds / 1e6

    @property
    def log_mb_s(self) -> float:
        return self.log_bytes / self.seconds / 1e6

    @property
    def cpu_us(self) -> float:
        """CPU time of the whole process per append (µs)."""
        return self.cpu_seconds / self.appends * 1e6


def baseline_mb_s(directory: Path, total_bytes: int) -> tuple[str, float]:
    """Sequential write bandwidth (10^6 B/s) of ``directory``'s disk: fio if installed, else dd."""
    target = directory / "baseline.bin"
    mib = max(1, total_bytes // (1024 * 1024))
    try:
        if shutil.which("fio"):
            out = subprocess.run(
                [
                    "fio",
                    "--name=seqwrite",
                    f"--filename={target}",
                    "--rw=write",
                    "--bs=1M",
                    f"--size={mib}M",
                    "--ioengine=sync",
                    "--end_fsync=1",
                    "--output-format=json",
                ],
                capture_output=True,
                check=True,
                text=True,
            ).stdout
            job = json.loads(out[out.index("{") :])["jobs"][0]["write"]
            return "fio seq write 1M + fsync", job["bw_bytes"] / 1e6
        started = time.perf_counter()
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=fdatasync"],
            capture_output=True,
            check=True,
        )
        return "dd bs=1M conv=fdatasync", mib * 1024 * 1024 / (time.perf_counter() - started) / 1e6
    finally:
        target.unlink(missing_ok=True)


def _store(directory: Path, flush: FlushDiskType, segment_mib: int) -> MessageStore:
    config = StoreConfig(
        root_dir=directory,
        commit_log_file_size=segment_mib * 1024 * 1024,
        flush_disk_type=flush,
        message_index_enable=False,
    )
    store = MessageStore(config)
    store.open()
    return store


async def run_async(directory: Path, size: int, count: int, segment_mib: int, batch: int = 0) -> Row:
    """ASYNC_FLUSH: ``count`` bodies appended in a loop (``put``, or ``put_batch`` of ``batch`` bodies), then the
    final ``flush()``."""
    store = _store(directory, FlushDiskType.ASYNC_FLUSH, segment_mib)
    await store.start()
    body = os.urandom(size)
    loop = asyncio.get_running_loop()
    if batch:
        rounds, append, args = max(1, count // batch), store.put_batch, (TOPIC, 0, [body] * batch)
    else:
        rounds, append, args = count, store.put, (TOPIC, 0, body)
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        result = append(*args)
    await loop.run_in_executor(None, store.flush)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    assert result.status is PutStatus.PUT_OK, result
    log_bytes = store.max_commit_log_offset - store.min_commit_log_offset
    await store.close()
    appends = rounds * (batch or 1)
    return Row(
        f"ASYNC {size} B" + (f" batch{batch}" if batch else ""),
        appends,
        elapsed,
        size * appends,
        log_bytes,
        cpu,
    )


async def run_sync(
    directory: Path, size: int, count: int, producers: int, segment_mib: int, batch: int = 0
) -> Row:
    """SYNC_FLUSH: ``producers`` tasks, each awaiting ``put_and_wait`` (or ``put_batch_and_wait`` of ``batch``
    bodies) in a loop until ``count`` bodies are written in all."""
    store = _store(directory, FlushDiskType.SYNC_FLUSH, segment_mib)
    await store.start()
    body = os.urandom(size)
    if batch:
        per_producer, append, payload = (
            max(1, count // producers // batch),
            store.put_batch_and_wait,
            [body] * batch,
        )
    else:
        per_producer, append, payload = count // producers, store.put_and_wait, body

    async def producer(queue_id: int) -> None:
        for _ in range(per_producer):
            result = await append(TOPIC, queue_id, payload)
            if result.status is not PutStatus.PUT_OK:
                raise RuntimeError(result)

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(producer(i % 8) for i in range(producers)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    log_bytes = store.max_commit_log_offset - store.min_commit_log_offset
    rounds = store.statistics().group_commit_rounds
    await store.close()
    appends = per_producer * producers * (batch or 1)
    name = f"SYNC {size} B" + (f" batch{batch}" if batch else "") + f" x{producers}"
    row = Row(name, appends, elapsed, size * appends, log_bytes, cpu)
    row.case += f" ({row.appends / max(rounds, 1):.0f}/fsync)"
    return row


@click.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--mib", default=256, show_default=True, help="Body MiB written per case.")
@click.option("--sizes", default="100,1024", show_default=True)
@click.option("--producers", default=64, show_default=True)
@click.option("--batch", default=64, show_default=True, help="Bodies per put_batch in the batch rows.")
@click.option("--baseline-runs", default=3, show_default=True, help="fio runs; the best one is the baseline.")
@click.option("--segment-mib", default=128, show_default=True, help="Commit log segment size.")
def main(
    directory: Path | None,
    mib: int,
    sizes: str,
    producers: int,
    batch: int,
    baseline_runs: int,
    segment_mib: int,
) -> None:
    """Run the storage benchmark and print one table."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    parent = Path(tempfile.mkdtemp(prefix="quasar-bench-", dir=directory))
    console = Console()
    try:
        total = mib * 1024 * 1024
        runs = [baseline_mb_s(parent, total) for _ in range(baseline_runs)]
        tool, base = max(runs, key=lambda run: run[1])
        tool += f", best of {baseline_runs}: " + " / ".join(f"{run[1]:,.0f}" for run in runs)
        rows: list[Row] = []
        for size in (int(s) for s in re.split(r"[,\s]+", sizes) if s):
            count = max(1000, total // size)
            if size < 512:
                count = min(count, 1_000_000)  # per-append cost dominates: cap the run time
            for case in ("async", "sync", "async-batch", "sync-batch"):
                case_dir = parent / f"{case}-{size}"
                if case == "async":
                    row = asyncio.run(run_async(case_dir, size, count, segment_mib))
                elif case == "sync":
                    row = asyncio.run(run_sync(case_dir, size, count // 4, producers, segment_mib))
                elif case == "async-batch":
                    row = asyncio.run(run_async(case_dir, size, count, segment_mib, batch))
                else:
                    row = asyncio.run(run_sync(case_dir, size, count, producers, segment_mib, batch))
                rows.append(row)
                shutil.rmtree(case_dir, ignore_errors=True)
                console.print(
                    f"{row.case}: {row.appends_per_s:,.0f} appends/s, {row.log_mb_s:,.1f} MB/s, "
                    f"{row.cpu_us:.2f} µs CPU/append"
                )
        table = Table(title=f"MessageStore appends vs. baseline {tool}: {base:,.1f} MB/s ({parent})")
        for column in ("case", "appends", "appends/s", "body MB/s", "log MB/s", "ratio", "CPU µs"):
            table.add_column(column, justify="left" if column == "case" else "right")
        for row in rows:
            table.add_row(
                row.case,
                f"{row.appends:,}",
                f"{row.appends_per_s:,.0f}",
                f"{row.body_mb_s:,.1f}",
                f"{row.log_mb_s:,.1f}",
                f"{row.log_mb_s / base:.0%}",
                f"{row.cpu_us:.2f}",
            )
        console.print(table)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
