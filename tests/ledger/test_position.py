"""Position ordering and bounds (Pulsar PositionImpl.compareTo: ledger id, then entry id)."""

from hypothesis import given
from hypothesis import strategies as st

from quasar.ledger.position import EARLIEST, INT64_MAX, LATEST, Position

positions = st.builds(Position, st.integers(0, 50), st.integers(-1, 50))


def test_orders_by_ledger_then_entry():
    assert Position(1, 99) < Position(2, 0)
    assert Position(2, 0) < Position(2, 1)
    assert Position(2, -1) < Position(2, 0)
    assert sorted([Position(3, 1), Position(1, 5), Position(3, 0)]) == [
        Position(1, 5),
        Position(3, 0),
        Position(3, 1),
    ]


def test_is_immutable_and_hashable():
    p = Position(4, 2)
    assert {p: "x"}[Position(4, 2)] == "x"
    try:
        p.ledger_id = 5  # type: ignore[misc]
    except AttributeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("Position must be immutable")
    assert not hasattr(p, "__dict__")
    assert str(p) == "4:2" and repr(p) == "Position(4:2)"


@given(positions)
def test_bounds_enclose_every_position(p):
    assert EARLIEST < p < LATEST
    assert Position(INT64_MAX, INT64_MAX) == LATEST


@given(positions, positions)
def test_order_matches_tuple_order(a, b):
    assert (a < b) == ((a.ledger_id, a.entry_id) < (b.ledger_id, b.entry_id))
    assert (a == b) == ((a.ledger_id, a.entry_id) == (b.ledger_id, b.entry_id))
