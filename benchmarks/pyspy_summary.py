"""Summarize a py-spy collapsed-stack file (``py-spy record -F -f raw -o FILE``): where the samples went.

Prints the share of samples per thread (the event loop, or the service thread's ``run``), then the functions
with the most samples on top of the stack ("self") and anywhere on it ("inclusive"). With ``-F`` py-spy names
functions without line numbers, so the same function aggregates across lines. Time spent inside a compiled
extension or a C library is counted to the Python function that called it (use ``py-spy --native`` to see
below it). Shares are of samples, and with ``--idle`` absent py-spy samples only running threads.

Usage: ``python benchmarks/pyspy_summary.py FILE [--top 30]``
"""

from __future__ import annotations

import collections
from pathlib import Path

import click


def _thread_of(frames: list[str]) -> str:
    if any("Runner.run" in frame for frame in frames):
        return "event loop"
    for frame in frames:
        if ".run (" in frame and not frame.startswith("Thread.run"):
            return "thread: " + frame
    return "thread: " + frames[-1]


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--top", default=30, show_default=True, help="Rows in the self and inclusive lists.")
def main(path: Path, top: int) -> None:
    """Summarize the py-spy collapsed stacks in PATH."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        threads[_thread_of(frames)] += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        raise click.ClickException(f"no samples in {path}")
    click.echo(f"{total} samples")
    for name, count in threads.most_common(10):
        click.echo(f"{100 * count / total:5.1f}%  {name}")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        click.echo(f"--- {title}")
        for name, count in counter.most_common(top):
            click.echo(f"{100 * count / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
