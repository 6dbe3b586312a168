"""Shared helpers for the storage tests: tiny segments so every test that appends also rolls files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quasar.storage import MessageStore, StoreConfig

SEGMENT_SIZE = 4096
"""Commit log segment size in tests (4 KiB): a few dozen small records per file."""
CQ_FILE_SIZE = 200
"""Consume queue file size in tests: 10 units per file."""
INDEX_SLOTS = 64
"""Hash slots per index file in tests (collisions are common)."""
INDEX_ITEMS = 100
"""Index items per index file in tests (99 usable: files roll often)."""


def make_config(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "root_dir": root,
        "commit_log_file_size": SEGMENT_SIZE,
        "consume_queue_file_size": CQ_FILE_SIZE,
        "max_hash_slot_num": INDEX_SLOTS,
        "max_index_num": INDEX_ITEMS,
    }
    values.update(overrides)
    return StoreConfig(**values)


def open_store(root: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(make_config(root, **overrides))
    store.open()
    return store


def abandon(store: MessageStore) -> None:
    """Leave the store as a SIGKILL would: written bytes stay in the files, no final flush, no checkpoint
    update, the abort file stays. (Stops the flush threads and unmaps; white-box.)"""
    store.flusher.shutdown()
    if store.reput is not None:
        store.reput.shutdown()
    store.allocator.shutdown(destroy_unused=False)  # a pre-allocated next segment stays, as after a kill
    store._release_files()


def body_for(i: int) -> bytes:
    """A deterministic body of varying length (12..~110 bytes)."""
    return f"message-{i:05d}|".encode() * (1 + i % 7)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def run_writer_until_killed(
    tmp_path: Path, script_text: str, root: Path, confirmations: int
) -> list[tuple[int, ...]]:
    """Run ``script_text`` (a writer that prints ``ready`` and then one line of four ints per confirmed record)
    as ``python writer.py ROOT``, SIGKILL it once ``confirmations`` lines were read, and return every confirmed
    line, including those printed before the kill but not read yet."""
    script = tmp_path / "writer.py"
    script.write_text(script_text)
    process = subprocess.Popen(
        [sys.executable, str(script), str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    confirmed: list[tuple[int, ...]] = []
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", process.stderr.read() if process.stderr else ""
        while len(confirmed) < confirmations:
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else "writer exited"
            confirmed.append(tuple(int(x) for x in line.split()))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.stdout is not None
    for line in process.stdout.read().splitlines():
        fields = line.split()
        if len(fields) == 4 and all(f.isdigit() for f in fields):
            confirmed.append(tuple(int(x) for x in fields))
    process.stdout.close()
    if process.stderr is not None:
        process.stderr.close()
    return confirmed
