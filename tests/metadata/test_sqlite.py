"""SqliteMetadataStore specifics: SQLite only on the writer thread, group commit, durability, range scans,
legacy table adoption, failures."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from quasar.metadata import (
    BadVersionError,
    InvalidPathError,
    MetadataStoreClosedError,
    MetadataStoreError,
    Put,
    encode_json,
)
from quasar.metadata.sqlite import SqliteMetadataStore

Trace = list[tuple[int, str]]


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Trace:
    """Every SQL statement run by stores opened in the test, with the id of the thread that ran it."""
    statements: Trace = []
    real_connect = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(lambda sql: statements.append((threading.get_ident(), sql)))
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    return statements


def count(trace: Trace, predicate: Callable[[str], bool]) -> int:
    return sum(1 for _, sql in trace if predicate(sql.strip().upper()))


async def test_sqlite_never_runs_on_the_event_loop_thread(tmp_path: Path, trace: Trace):
    loop_thread = threading.get_ident()
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    await store.put("/a", b"1", ephemeral=True)
    await store.multi([Put("/b", b"2"), Put("/a/c", b"3")])
    await store.get("/a")
    await store.get_children("/")
    await store.exists("/b")
    await store.delete("/b")
    await store.delete_recursive("/a")
    await store.close()
    threads = {ident for ident, _ in trace}
    assert trace and loop_thread not in threads
    assert len(threads) == 1  # one writer thread owns the connection


async def test_concurrent_puts_share_commits(tmp_path: Path, trace: Trace):
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    stats = await asyncio.gather(*(store.put(f"/g/{i}", encode_json(i)) for i in range(200)))
    assert [s.version for s in stats] == [0] * 200
    commits = count(trace, lambda sql: sql == "COMMIT")
    assert 1 <= commits < 50, commits  # group commit: far fewer fsyncs than puts
    store = await _reopen(store)
    assert len(await store.get_children("/g")) == 200
    await store.close()


async def _reopen(store: SqliteMetadataStore) -> SqliteMetadataStore:
    await store.close()
    return await SqliteMetadataStore.open(store.path)


async def test_a_failed_call_in_a_batch_rolls_back_alone(tmp_path: Path):
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    await store.put("/cas", b"0")
    outcomes = await asyncio.gather(
        store.put("/ok/1", b""), store.put("/cas", b"x", 5), store.multi([Put("/ok/2", b""), Put("/cas", b"y", 9)]),
        store.put("/ok/3", b""), return_exceptions=True,
    )  # fmt: skip
    assert isinstance(outcomes[1], BadVersionError) and isinstance(outcomes[2], BadVersionError)
    assert await store.get_children("/ok") == ["1", "3"]
    got = await store.get("/cas")
    assert got is not None and got.value == b"0" and got.stat.version == 0
    await store.close()


async def test_sqlite_failure_inside_a_call(tmp_path: Path):
    path = tmp_path / "m.db"
    store = await SqliteMetadataStore.open(path)
    side = sqlite3.connect(path)
    side.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON metadata WHEN NEW.path = '/bad'"
        " BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    side.commit()
    side.close()
    with pytest.raises(MetadataStoreError, match="boom"):
        await store.multi([Put("/good", b""), Put("/bad", b"")])
    assert not await store.exists("/good")
    results = await asyncio.gather(store.put("/bad", b""), store.put("/good", b""), return_exceptions=True)
    assert isinstance(results[0], MetadataStoreError) and not isinstance(results[1], BaseException)
    assert await store.get_children("/") == ["good"]
    await store.close()


async def test_cancelled_call_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    gate = threading.Event()
    real_connect = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(lambda sql: gate.wait(5) if "'/hold/'" in sql else None)  # expanded SQL
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    blocker = asyncio.create_task(store.get_children("/hold"))
    await asyncio.sleep(0.05)
    queued = asyncio.create_task(store.put("/skipped", b""))
    await asyncio.sleep(0.01)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued  # the cancellation reaches the queued call (its concurrent future) before it runs
    gate.set()
    await blocker
    assert not await store.exists("/skipped")
    await store.close()


async def test_children_of_a_large_tree_use_range_seeks(tmp_path: Path, trace: Trace):
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    for ledger in range(100):  # 100 ledgers x 1000 cursors = 100k paths
        await store.multi([Put(f"/cursors/l{ledger}/c{c}", b"{}") for c in range(1000)])
    trace.clear()
    children = await store.get_children("/cursors")
    assert children == sorted(f"l{i}" for i in range(100))
    selects = count(trace, lambda sql: sql.startswith("SELECT"))
    assert selects <= 2 * 100 + 1, selects  # two seeks per child, not a scan of 100k rows
    assert len(await store.get_children("/cursors/l42")) == 1000
    await store.close()


async def test_leaf_children_are_listed_in_batches_not_a_query_each(tmp_path: Path, trace: Trace):
    """The managed-ledger names at broker start: 100,000 leaves under one parent must not take 100,000 queries."""
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    names = [f"t{i:05d}" for i in range(3000)] + ["t1-x", "t1.y"]  # siblings sorting around t1's subtree
    await store.multi([Put(f"/ml/{name}", b"{}") for name in names] + [Put("/ml/t00001/deep/er", b"{}")])
    trace.clear()
    assert await store.get_children("/ml") == sorted(names)
    selects = count(trace, lambda sql: sql.startswith("SELECT"))
    assert selects <= 3002 // 256 + 3, selects
    await store.close()


async def test_ephemeral_rows_of_a_crashed_process_are_dropped_at_open(tmp_path: Path):
    path = tmp_path / "m.db"
    crashed = await SqliteMetadataStore.open(path)
    await crashed.put("/live/broker-1", b"", ephemeral=True)
    await crashed.put("/durable", b"")
    # a second process opens the file while the first is "dead" (never closed cleanly)
    successor = await SqliteMetadataStore.open(path)
    assert await successor.get_children("/") == ["durable"]
    await successor.close()
    await crashed.close()


async def test_wal_and_full_sync(tmp_path: Path):
    path = tmp_path / "m.db"
    store = await SqliteMetadataStore.open(path)
    await store.put("/x", b"")
    side = sqlite3.connect(path)
    assert side.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    side.close()
    await store.close()


async def test_unopenable_file_is_a_metadata_store_error(tmp_path: Path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(MetadataStoreError):
        await SqliteMetadataStore.open(tmp_path / "dir.db")


async def test_close_waits_for_queued_calls_then_refuses(tmp_path: Path):
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    puts = [asyncio.create_task(store.put(f"/q/{i}", b"")) for i in range(20)]
    await asyncio.sleep(0)
    await store.close()
    assert all(task.done() and not task.exception() for task in puts)
    with pytest.raises(MetadataStoreClosedError):
        await store.get("/q/1")
    store = await SqliteMetadataStore.open(tmp_path / "m.db")
    assert len(await store.get_children("/q")) == 20
    await store.close()


def _legacy_file(path: Path, rows: dict[str, str]) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
    conn.executemany("INSERT INTO kv VALUES (?, ?)", rows.items())
    conn.commit()
    conn.close()


async def test_adopt_legacy_table(tmp_path: Path):
    path = tmp_path / "m.db"
    _legacy_file(path, {"old/a": '{"x":1}', "old/b": "2", "skip": "3"})

    def convert(rows: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
        return [("/new/" + key.split("/")[1], value.encode()) for key, value in rows if key != "skip"]

    store = await SqliteMetadataStore.open(path)
    await store.put("/new/b", b"present")
    assert await store.adopt_legacy_table("kv", convert) == 2
    assert await store.get_children("/new") == ["a", "b"]
    got = await store.get("/new/b")
    assert got is not None and got.value == b"2" and got.stat.version == 1
    assert await store.adopt_legacy_table("kv", convert) is None  # the table is gone
    with pytest.raises(Exception, match="not a legacy table"):
        await store.adopt_legacy_table("metadata; DROP TABLE metadata", convert)
    await store.close()


async def test_adopt_legacy_table_is_all_or_nothing(tmp_path: Path):
    path = tmp_path / "m.db"
    _legacy_file(path, {"a": "1", "b": "2"})
    store = await SqliteMetadataStore.open(path)
    with pytest.raises(InvalidPathError):
        await store.adopt_legacy_table("kv", lambda rows: [("/fine", b"1"), ("bad path", b"2")])
    with pytest.raises(ZeroDivisionError):
        await store.adopt_legacy_table("kv", lambda rows: [("/fine", b"1")] if 1 / 0 else [])
    assert not await store.exists("/fine")
    assert await store.adopt_legacy_table("kv", lambda rows: [(f"/{k}", v.encode()) for k, v in rows]) == 2
    await store.close()
