"""LedgerTable: Position <-> queue offset mapping across ledgers, empty ledgers and unknown ledger ids."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.ledger.errors import MetadataError
from quasar.ledger.ledger_table import LedgerInfo, LedgerTable
from quasar.ledger.position import EARLIEST, LATEST, Position


def table():
    # ledger 7: offsets 0..2, ledger 9: empty, ledger 12: offsets 3..7 (open-ended)
    return LedgerTable([LedgerInfo(7, 0, 1), LedgerInfo(9, 3, 2), LedgerInfo(12, 3, 3)], 8)


def test_positions_and_offsets_round_trip():
    t = table()
    assert [t.position_of(o) for o in range(8)] == [
        Position(7, 0), Position(7, 1), Position(7, 2),
        Position(12, 0), Position(12, 1), Position(12, 2), Position(12, 3), Position(12, 4),
    ]  # fmt: skip
    for o in range(8):
        assert t.offset_of(t.position_of(o)) == o
    assert t.position_of(-1) == Position(7, -1)
    assert t.position_of(8) == Position(12, 5)  # the next position to be written


def test_positions_that_name_no_entry():
    t = table()
    assert t.offset_of(Position(7, 3)) is None
    assert t.offset_of(Position(9, 0)) is None
    assert t.offset_of(Position(8, 0)) is None
    assert t.offset_of(Position(12, 5)) is None
    assert t.ceil_offset(Position(7, 3)) == 3  # past ledger 7's end: the next ledger's first entry
    assert t.ceil_offset(Position(10, 4)) == 3  # an unknown ledger between 9 and 12
    assert t.ceil_offset(EARLIEST) == 0
    assert t.ceil_offset(LATEST) == 8
    assert t.offset_after(Position(12, 100)) == 8  # capped at next_offset


def test_next_and_previous_cross_ledgers():
    t = table()
    assert t.next_position(Position(7, 2)) == Position(12, 0)
    assert t.previous_position(Position(12, 0)) == Position(7, 2)
    assert t.previous_position(Position(7, 0)) == Position(7, -1)
    assert t.next_position(Position(7, -1)) == Position(7, 0)
    assert t.next_position(Position(12, 4)) == Position(12, 5)


@given(st.lists(st.integers(0, 4), min_size=1, max_size=6), st.integers(0, 30), st.integers(-1, 8))
def test_ordering_of_positions_is_ordering_of_offsets(sizes, ledger_pick, entry):
    rows, offset = [], 0
    for i, size in enumerate(sizes):
        rows.append(LedgerInfo(2 + 3 * i, offset, 0))
        offset += size
    t = LedgerTable(rows, offset)
    p = Position(ledger_pick, entry)
    after = t.offset_after(p)
    ceil = t.ceil_offset(p)
    for o in range(offset):
        q = t.position_of(o)
        assert (q > p) == (o >= after)
        assert (q >= p) == (o >= ceil)


def test_bad_rows_are_rejected():
    with pytest.raises(MetadataError):
        LedgerTable([], 0)
    with pytest.raises(MetadataError):
        LedgerTable([LedgerInfo(5, 0, 0), LedgerInfo(4, 3, 0)], 3)
    with pytest.raises(MetadataError):
        LedgerInfo.from_json({"ledger_id": "x", "first_queue_offset": 0, "created_ms": 0})
    with pytest.raises(MetadataError):
        LedgerInfo.from_json({"first_queue_offset": 0})
    t = table()
    with pytest.raises(ValueError):
        t.append(LedgerInfo(13, 5, 0))  # must start at next_offset
    with pytest.raises(ValueError):
        t.position_of(-2)


def test_rows_round_trip_through_json():
    t = table()
    again = LedgerTable([LedgerInfo.from_json(r) for r in t.to_json()["ledgers"]], t.next_offset)
    assert again.rows == t.rows
