"""CursorSnapshot codec (hypothesis round trip, range cap) and the ledger-id allocator's reservations."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.ledger.cursor_store import CursorSnapshot, CursorStore
from quasar.ledger.errors import MetadataError
from quasar.ledger.ledger_id_allocator import LEDGER_ID_COUNTER_KEY, LedgerIdAllocator
from quasar.ledger.position import Position
from quasar.ledger.range_set import PositionRangeSet
from quasar.testing.fake_store import FakeMetadataStore

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
    metadata = FakeMetadataStore()
    store = CursorStore(metadata, "persistent://t/n/x")
    store.save_now(snapshot)
    assert store.load_all() == {name: snapshot}
    assert store.load(name) == snapshot


def test_corrupt_stored_state_raises_metadata_error():
    metadata = FakeMetadataStore()
    store = CursorStore(metadata, "t")
    metadata.put(store.key("sub"), {"version": 99})
    with pytest.raises(MetadataError):
        store.load_all()
    metadata.put(store.key("sub"), {"version": 1, "name": "other", "mark_delete": [1, 1],
                                    "individually_deleted": [], "last_active_ms": 0})  # fmt: skip
    with pytest.raises(MetadataError):
        store.load_all()


def test_ledger_ids_are_reserved_before_use_and_never_reused():
    metadata = FakeMetadataStore()
    first = LedgerIdAllocator(metadata, block_size=3)
    ids = [first.allocate() for _ in range(4)]  # crosses a block boundary
    assert ids == [1, 2, 3, 4]
    assert metadata.get(LEDGER_ID_COUNTER_KEY) == 7  # the whole second block is reserved
    second = LedgerIdAllocator(metadata, block_size=3)  # e.g. after a crash
    assert second.allocate() == 7
    metadata.fail_writes(1)
    third = LedgerIdAllocator(metadata)
    with pytest.raises(MetadataError):
        third.allocate()
    metadata.put(LEDGER_ID_COUNTER_KEY, "junk")
    with pytest.raises(MetadataError):
        LedgerIdAllocator(metadata).allocate()
