"""``quasar.testing.broker_process``: readiness-line parsing and the subprocess lifecycle, driven with a fake
broker script (no real broker needed), so the harness the interop tests rely on is itself tested."""

from __future__ import annotations

import signal
import sys
import textwrap
from pathlib import Path

import pytest

from quasar.testing.broker_process import BrokerProcess, BrokerProcessError, parse_ready_line

FAKE_BROKER = textwrap.dedent(
    """
    import signal, sys, time
    mode, args = sys.argv[1], sys.argv[2:]
    port = int(args[args.index("--port") + 1]) or 41001
    admin_port = int(args[args.index("--admin-port") + 1]) or 41002
    print("booting", args, flush=True)
    print("log line on stderr", file=sys.stderr, flush=True)
    if mode == "exit":
        print("fatal: cannot open data dir", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if mode != "silent":
        print(f"quasar standalone ready: pulsar://127.0.0.1:{port} http://127.0.0.1:{admin_port}")
    while True:
        time.sleep(0.05)
    """
)


class FakeBrokerProcess(BrokerProcess):
    def __init__(self, data_dir: Path, mode: str, **kwargs: object) -> None:
        super().__init__(data_dir, **kwargs)  # type: ignore[arg-type]
        self.mode = mode
        self.script = data_dir.with_name("fake_broker.py")
        self.script.write_text(FAKE_BROKER)

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), self.mode, *super().command()[3:]]


def test_parse_ready_line() -> None:
    text = "x\nquasar standalone ready: pulsar://127.0.0.1:6650 http://127.0.0.1:8080\n"
    assert parse_ready_line(text) == ("pulsar://127.0.0.1:6650", "http://127.0.0.1:8080")
    assert parse_ready_line("quasar standalone starting") is None


def test_command_runs_quasar_standalone_with_ports_and_extra_args(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", extra_args=("--log-level", "DEBUG"), port=6651)
    command = process.command()
    assert command[0] == sys.executable and "standalone" in command
    tail = command[command.index("standalone") :]
    assert tail == [
        *("standalone", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1"),
        *("--port", "6651", "--admin-port", "0", "--no-rocketmq", "--log-level", "DEBUG"),
    ]


def test_start_reads_urls_and_stop_sends_sigterm(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "ready")
    with process:
        assert process.running and process.pid is not None
        assert process.service_url == "pulsar://127.0.0.1:41001"
        assert process.admin_url == "http://127.0.0.1:41002"
        assert (process.bound_port, process.bound_admin_port) == (41001, 41002)
        assert "log line on stderr" in process.stderr_text()
        assert (tmp_path / "data").is_dir() and process.stderr_path.parent == tmp_path / "data.logs"
    assert process.returncode == 0  # the SIGTERM handler ran: a clean shutdown
    assert process.pid is None and process.stop() == 0


def test_kill_is_sigkill(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "ready").start()
    assert process.kill() == -signal.SIGKILL
    assert not process.running


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "stubborn").start()
    assert process.stop(timeout_s=0.3) == -signal.SIGKILL


def test_early_exit_raises_with_stderr_tail(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "exit")
    with pytest.raises(BrokerProcessError, match=r"exited with status 3(.|\n)*cannot open data dir"):
        process.start()


def test_no_readiness_line_times_out_and_kills(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "silent", startup_timeout_s=0.5)
    with pytest.raises(BrokerProcessError, match=r"no readiness line within 0\.5 s"):
        process.start()
    assert process.returncode == -signal.SIGKILL


def test_restart_reuses_bound_ports_and_keeps_logs(tmp_path: Path) -> None:
    process = FakeBrokerProcess(tmp_path / "data", "ready").start()
    try:
        first_log = process.stdout_path
        process.restart(kill=True)
        assert "'--port', '41001'" in process.stdout_text()  # the new process was given the bound port
        assert process.port == 0  # the configured port is unchanged
        assert process.stdout_path != first_log and first_log.exists()
        assert process.starts == 2
        with pytest.raises(BrokerProcessError, match="already running"):
            process.start()
    finally:
        process.stop()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="port"):
        BrokerProcess(tmp_path, port=70000)
    with pytest.raises(ValueError, match="startup_timeout_s"):
        BrokerProcess(tmp_path, startup_timeout_s=0)
    with pytest.raises(BrokerProcessError, match="not reported"):
        _ = BrokerProcess(tmp_path).bound_port
