"""StoreState: the one write gate the store's parts share (the publish path tests only ``refusing``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quasar.storage import PutStatus, StoreClosedError
from quasar.storage.store_state import StorePhase, StoreState

from .conftest import open_store


def test_refusing_follows_phase_writable_and_disk_full():
    state = StoreState()
    assert state.refusing and not state.is_open  # new
    state.phase = StorePhase.OPEN
    assert not state.refusing
    state.disk_full = True
    assert state.refusing
    state.disk_full = False
    assert not state.refusing
    state.writable = False
    assert state.refusing
    state.writable = True
    state.phase = StorePhase.CLOSING
    assert state.refusing and str(state.phase) == "closing"


def test_the_parts_share_one_gate(root: Path):
    """A failure seen by one part (here the disk guard of the retention) closes the writer's gate for put and
    put_batch alike; closing the facade makes both raise."""
    store = open_store(root)
    store._state.disk_full = True  # what a clean round does above the warning ratio
    assert store.put("t", 0, b"x").status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.put_batch("t", 0, [b"x"]).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.disk_full and store.disk_full_refusals == 2
    store._state.disk_full = False
    assert store.put("t", 0, b"x").status is PutStatus.PUT_OK
    store.close_sync()
    with pytest.raises(StoreClosedError):
        store.put("t", 0, b"x")
    with pytest.raises(StoreClosedError):
        store.put_batch("t", 0, [b"x"])
