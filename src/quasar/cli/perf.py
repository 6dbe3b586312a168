"""``quasar perf``: load generator with latency histograms, modelled on ``pulsar-perf``.

``quasar perf produce`` (:mod:`quasar.cli.perf_produce`) and ``quasar perf consume``
(:mod:`quasar.cli.perf_consume`); pacing in :mod:`quasar.cli.perf_pacing`, HdrHistogram recording and
reporting in :mod:`quasar.cli.perf_stats`, the client adapter in :mod:`quasar.cli.perf_clients`.
"""

from __future__ import annotations

import click

from quasar.cli.perf_consume import consume
from quasar.cli.perf_produce import produce

__all__ = ["perf"]


@click.group()
def perf() -> None:
    """Load generator with latency histograms (like pulsar-perf)."""


perf.add_command(produce)
perf.add_command(consume)
