"""The broker process's garbage collector settings (quasar.broker.gc_tuning, BrokerConfig gc_*)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quasar.broker.config import BrokerConfig


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_tune_gc_freezes_the_survivors_and_raises_the_young_threshold() -> None:
    out = _run(
        "import gc; from quasar.broker.gc_tuning import tune_gc; tune_gc(50000, True); "
        "print(gc.get_threshold(), gc.get_freeze_count() > 1000)"
    )
    assert out.split() == ["(50000,", "20,", "100)", "True"]


def test_zero_threshold_and_no_freeze_leave_the_collector_as_it_was() -> None:
    out = _run(
        "import gc; before = gc.get_threshold(); from quasar.broker.gc_tuning import tune_gc; "
        "tune_gc(0, False); print(gc.get_threshold() == before, gc.get_freeze_count())"
    )
    assert out.split() == ["True", "0"]


def test_config_defaults_and_validation() -> None:
    config = BrokerConfig()
    assert (config.gc_gen0_threshold, config.gc_freeze_after_start) == (50_000, True)
    with pytest.raises(ValueError, match="gc_gen0_threshold"):
        BrokerConfig(gc_gen0_threshold=-1)
    with pytest.raises(ValueError, match="dispatcher_max_read_batch_size must be positive"):
        BrokerConfig(dispatcher_max_read_batch_size=0)
