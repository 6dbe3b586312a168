"""``quasar perf produce|consume`` against a real ``quasar standalone`` process (one per module), with the
official client and with Quasar's own: the summary counts what was asked, the HDR log holds one histogram
entry per message, consume counts what was produced, and an unreachable broker is a clear exit 1."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from quasar.cli.main import main
from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import QUASAR_COMMAND

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("perf") / "data").start()
    yield process
    process.stop()


def perf(*args: str) -> Result:
    return CliRunner().invoke(main, ["perf", *args], catch_exceptions=False)


def perf_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``quasar perf ...`` in a fresh interpreter: its exit status shows how the process really ends."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, *QUASAR_COMMAND, "perf", *args], capture_output=True, text=True, timeout=120, env=env
    )


def summary_count(output: str, label: str) -> int:
    match = re.search(rf"{label}\s*\S\s*(\d+)", output)
    assert match, output
    return int(match.group(1))


def hdr_total(path: Path) -> int:
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000_000, 3))
    total = 0
    while (histogram := reader.get_next_interval_histogram()) is not None:
        total += histogram.get_total_count()
    reader.close()
    return total


def test_official_client_produce_then_consume_counts_match(broker: BrokerProcess, tmp_path: Path) -> None:
    url = broker.service_url
    assert url is not None
    produced = tmp_path / "produce.hlog"
    # in a subprocess: given a Python logging.Logger, the official client made most runs abort at exit
    # ("terminate called without an active exception") after a good summary
    process = perf_subprocess("produce", "perf-a", "-u", url, "-r", "1000", "-m", "300", "-s", "64",
                              "--histogram-file", str(produced))  # fmt: skip
    assert process.returncode == 0, process.stdout + process.stderr
    assert "terminate called" not in process.stderr
    output = process.stdout
    assert "Producing to 1 topic(s) with 1 producer(s) through the pulsar client" in output
    assert re.search(
        r"\] \d+ msgs sent \| .* msg/s .* MB/s \| latency ms p50 \S+ p99 \S+ p99.9 \S+ max", output
    )
    assert summary_count(output, "Messages sent") == 300
    assert summary_count(output, "Failed") == 0
    assert hdr_total(produced) == 300

    consumed = tmp_path / "consume.hlog"
    result = perf("consume", "perf-a", "-u", url, "-m", "300", "-sp", "Earliest", "-time", "60",
                  "--histogram-file", str(consumed))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert summary_count(result.output, "Messages received") == 300
    assert hdr_total(consumed) == 300


def test_quasar_client_with_topics_producers_and_no_batching(broker: BrokerProcess) -> None:
    url = broker.service_url
    assert url is not None
    result = perf("produce", "perf-b", "-u", url, "--client", "quasar", "-t", "2", "-n", "2", "-r", "0",
                  "-m", "400", "-s", "32", "-b", "0", "-z", "LZ4")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 topic(s) with 4 producer(s) through the quasar client: rate max, 32 bytes, batching off" in (
        result.output
    )
    assert summary_count(result.output, "Messages sent") == 400
    # both topics were written: a Shared subscription over perf-b-0 and perf-b-1 reads all 400 back
    result = perf("consume", "perf-b", "-u", url, "--client", "quasar", "-t", "2", "-st", "Shared",
                  "-sp", "Earliest", "-m", "400", "-time", "60")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Consuming 2 topic(s) with 2 consumer(s) through the quasar client" in result.output
    assert summary_count(result.output, "Messages received") == 400


def test_the_duration_ends_a_paced_run(broker: BrokerProcess) -> None:
    url = broker.service_url
    assert url is not None
    result = perf("produce", "perf-c", "-u", url, "--client", "quasar", "-r", "20", "--duration", "1")
    assert result.exit_code == 0, result.output
    sent = summary_count(result.output, "Messages sent")
    assert 0 < sent <= 21  # at 20 msg/s, messages 0..20 are the most that can be due within 1 s


def test_an_unreachable_broker_exits_1_with_the_reason() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        for command in ("produce", "consume"):
            result = CliRunner().invoke(
                main, ["perf", command, "t", "-u", f"pulsar://127.0.0.1:{port}", "-m", "1"]
            )
            assert result.exit_code == 1
            assert f"broker unreachable at pulsar://127.0.0.1:{port}" in result.output
