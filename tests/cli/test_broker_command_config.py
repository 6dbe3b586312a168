"""``quasar broker --config FILE``: the file's cluster name and broker id take effect (options still win, and
the cluster name defaults to ``quasar-cluster`` only when neither gives one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quasar.cli import broker as broker_cli


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The configs ``quasar broker`` would serve, without starting anything."""
    configs: list[Any] = []
    monkeypatch.setattr(broker_cli, "serve", lambda config, *args, **kwargs: configs.append(config))
    monkeypatch.setattr(broker_cli, "run_broker", lambda coroutine: None)
    monkeypatch.setattr(broker_cli, "install_event_loop_policy", lambda: None)
    return configs


def _run(tmp_path: Path, *args: str) -> None:
    result = CliRunner().invoke(
        broker_cli.broker,
        [
            "--data-dir",
            str(tmp_path / "data"),
            "--metadata-store",
            "etcd://127.0.0.1:2379",
            "--broker-name",
            "g1",
            *args,
        ],
    )
    assert result.exit_code == 0, result.output


def test_config_file_cluster_name_and_broker_id_take_effect(tmp_path: Path, started: list[Any]) -> None:
    config_file = tmp_path / "broker.toml"
    config_file.write_text('cluster_name = "east"\nbroker_id = 2\n')
    _run(tmp_path, "--config", str(config_file))
    assert (started[-1].cluster_name, started[-1].broker_id, started[-1].broker_name) == ("east", 2, "g1")

    _run(tmp_path, "--config", str(config_file), "--cluster", "west", "--broker-id", "1")
    assert (started[-1].cluster_name, started[-1].broker_id) == ("west", 1)  # options win over the file

    _run(tmp_path)
    assert (started[-1].cluster_name, started[-1].broker_id) == (broker_cli.DEFAULT_CLUSTER_NAME, 0)
