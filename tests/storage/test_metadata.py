"""MetadataStore: a transactional JSON key-value store on SQLite, sync and async, one worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.storage import InvalidMetadataError, MetadataError, MetadataStore, StoreClosedError


@pytest.fixture
def db(tmp_path: Path):
    store = MetadataStore(tmp_path / "meta" / "metadata.db")
    yield store
    store.close()


def test_put_get_list_delete(db: MetadataStore):
    assert db.get("/ledgers/a") is None
    db.put("/ledgers/a", {"ledgers": [{"id": 1, "entries": 5}], "state": "open"})
    db.put("/ledgers/b", [1, 2, 3])
    db.put("/ledgersX", "not under /ledgers/")
    db.put("/cursors/a/c1", 7)
    assert db.get("/ledgers/a") == {"ledgers": [{"id": 1, "entries": 5}], "state": "open"}
    assert db.list("/ledgers/") == {"/ledgers/a": db.get("/ledgers/a"), "/ledgers/b": [1, 2, 3]}
    assert list(db.list("/ledgers")) == ["/ledgers/a", "/ledgers/b", "/ledgersX"]
    assert db.keys() == ["/cursors/a/c1", "/ledgers/a", "/ledgers/b", "/ledgersX"]
    db.put("/ledgers/b", {"replaced": True})
    assert db.get("/ledgers/b") == {"replaced": True}
    db.delete("/ledgers/b")
    db.delete("/never/there")
    assert db.get("/ledgers/b") is None
    assert db.keys("/ledgers/") == ["/ledgers/a"]


def test_put_many_and_update_are_all_or_nothing(db: MetadataStore, tmp_path: Path):
    db.put_many({"/a/1": 1, "/a/2": 2, "/a/3": 3})
    assert db.list("/a/") == {"/a/1": 1, "/a/2": 2, "/a/3": 3}
    with pytest.raises(InvalidMetadataError):
        db.put_many({"/a/4": 4, "/a/5": object()})  # not JSON: refused before anything is written
    assert db.get("/a/4") is None
    db.update(puts={"/a/4": 4}, deletes=["/a/1", "/a/2"])
    assert db.list("/a/") == {"/a/3": 3, "/a/4": 4}
    db.delete_many(["/a/3", "/a/4"])
    assert db.list("/a/") == {}

    # a failure inside the transaction (after the first row is written) rolls everything back
    side = sqlite3.connect(tmp_path / "meta" / "metadata.db")
    side.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON kv WHEN NEW.key = '/bad' BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    side.commit()
    side.close()
    with pytest.raises(MetadataError, match="boom"):
        db.put_many({"/good": 1, "/bad": 2})
    assert db.get("/good") is None
    db.put("/good", 1)  # the store is still usable
    assert db.get("/good") == 1


def test_reopen_keeps_committed_data_in_wal_mode(tmp_path: Path):
    path = tmp_path / "metadata.db"
    with MetadataStore(path) as db:
        db.put_many({f"/k/{i}": {"i": i} for i in range(50)})
        db.delete("/k/7")
    side = sqlite3.connect(path)
    assert side.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    side.close()
    with MetadataStore(path) as db:
        values = db.list("/k/")
        assert len(values) == 49 and "/k/7" not in values and values["/k/42"] == {"i": 42}


async def test_async_api_runs_off_the_loop(db: MetadataStore):
    await db.aput("/x", 1)
    await db.aput_many({"/y/1": "a", "/y/2": "b"})
    assert await db.aget("/x") == 1
    assert await db.alist("/y/") == {"/y/1": "a", "/y/2": "b"}
    assert await db.akeys("/y") == ["/y/1", "/y/2"]
    await db.aupdate(puts={"/z": None}, deletes=["/x"])
    await db.adelete_many(["/y/1"])
    await db.adelete("/y/2")
    assert db.keys() == ["/z"] and db.get("/z") is None
    results = await asyncio.gather(*(db.aput(f"/n/{i}", i) for i in range(40)))
    assert results == [None] * 40
    assert len(db.list("/n/")) == 40


def test_sync_calls_from_many_threads(db: MetadataStore):
    def writer(t: int) -> None:
        for i in range(20):
            db.put(f"/t/{t}/{i}", i)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(db.list("/t/")) == 80


def test_bad_keys_and_closed_store(tmp_path: Path):
    db = MetadataStore(tmp_path / "m.db")
    for bad in ("", None, 5):
        with pytest.raises(InvalidMetadataError):
            db.put(bad, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidMetadataError):
        db.delete_many("/not/a/list")
    with pytest.raises(InvalidMetadataError):
        db.put("/nan", float("nan"))
    db.close()
    db.close()  # idempotent
    with pytest.raises(StoreClosedError):
        db.get("/a")
    with pytest.raises(StoreClosedError):
        asyncio.run(db.aput("/a", 1))


def test_unopenable_database_is_a_metadata_error(tmp_path: Path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(MetadataError):
        MetadataStore(tmp_path / "dir.db")


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(
    items=st.dictionaries(
        st.text(min_size=1, max_size=30).filter(lambda k: "\x00" not in k), _json, max_size=5
    )
)
def test_json_values_round_trip(items):
    with tempfile.TemporaryDirectory() as scratch, MetadataStore(Path(scratch) / "m.db") as db:
        db.put_many(items)
        assert {key: db.get(key) for key in items} == items
        assert db.list("") == dict(sorted(items.items()))
