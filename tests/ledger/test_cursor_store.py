"""CursorSnapshot codec (hypothesis round trip, range cap) and CursorStore on the async metadata port."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.errors import MetadataError
from quasar.ledger.position import Position
from quasar.ledger.range_set import PositionRangeSet
from quasar.metadata.port import encode_json
from quasar.testing.fake_store import FakeMetadataStore, FakeStoreError

acks = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 60)), max_size=80)


@given(st.integers(0, 9), st.integers(-1, 9), acks, st.integers(0, 30), st.text(min_size=1, max_size=12))
def test_snapshot_round_trips_and_keeps_the_lowest_ranges(md_ledger, md_entry, points, cap, name):
    ranges = PositionRangeSet()
    for ledger, entry in points:
        ranges.add_open_closed(Position(ledger, entry - 1), Position(ledger, entry))
    snapshot = CursorSnapshot.take(name, Position(md_ledger, md_entry), ranges, max_ranges=cap, now_ms=7)
    assert CursorSnapshot.from_json(snapshot.to_json()) == snapshot
    restored = snapshot.range_set()
    assert list(restored) == list(ranges)[:cap]


@pytest.mark.parametrize("name", ["sub", "a/b", "100%", "ü ß"])
async def test_store_saves_loads_and_deletes_under_encoded_paths(name):
    metadata = FakeMetadataStore()
    store = CursorStore(metadata, "persistent://t/n/x")
    other = CursorStore(metadata, "persistent://t/n/x/y")  # a ledger whose name extends the first one
    snapshot = CursorSnapshot.take(name, Position(3, 4), PositionRangeSet(), max_ranges=5, now_ms=7)
    await store.save(snapshot)
    await other.save(CursorSnapshot.take("z", Position(1, 1), PositionRangeSet(), max_ranges=5, now_ms=7))
    assert await store.load_all() == {name: snapshot}
    assert await store.load(name) == snapshot
    assert await store.load("missing") is None
    assert store.path(name).count("/") == 3  # /cursors/<ledger>/<cursor>: one segment each
    await store.delete(name)
    await store.delete(name)  # absent: no error
    assert await store.load_all() == {}
    assert list(await other.load_all()) == ["z"]


async def test_corrupt_state_and_port_failures_raise_metadata_error():
    metadata = FakeMetadataStore()
    store = CursorStore(metadata, "t")
    await metadata.put(store.path("sub"), encode_json({"version": 99}))
    with pytest.raises(MetadataError):
        await store.load_all()
    other = {
        "version": 1,
        "name": "other",
        "mark_delete": [1, 1],
        "individually_deleted": [],
        "last_active_ms": 0,
    }
    await metadata.put(store.path("sub"), encode_json(other))
    with pytest.raises(MetadataError, match="names cursor 'other'"):
        await store.load("sub")
    await metadata.put(store.path("sub"), b"not json")
    with pytest.raises(MetadataError):
        await store.load("sub")
    metadata.fail_writes(1)
    snapshot = CursorSnapshot.take("sub", Position(1, 1), PositionRangeSet(), max_ranges=5, now_ms=7)
    with pytest.raises(MetadataError) as info:
        await store.save(snapshot)
    assert isinstance(info.value.__cause__, FakeStoreError)  # the port's error, chained
