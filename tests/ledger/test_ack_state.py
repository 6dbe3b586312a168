"""AckState invariants (hypothesis): the mark-delete position never moves backwards, nothing at or below it
stays in the range set, and the acked set equals a naive model of acked queue offsets."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.ledger.ack_state import AckState
from quasar.ledger.errors import MarkDeletingMarkedPositionError
from quasar.ledger.ledger_table import LedgerInfo, LedgerTable
from quasar.ledger.position import Position


def make_table(sizes):
    """Ledgers with ids 3, 5, 7, ... and the given entry counts (0 = an empty ledger)."""
    rows, offset = [], 0
    for i, size in enumerate(sizes):
        rows.append(LedgerInfo(3 + 2 * i, offset, 0))
        offset += size
    return LedgerTable(rows, offset)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("individual"), st.lists(st.integers(0, 40), max_size=6)),
        st.tuples(st.just("cumulative"), st.integers(0, 40)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), ops)
def test_ack_state_matches_model(sizes, operations):
    table = make_table(sizes)
    total = table.next_offset
    state = AckState(table.position_of(-1))
    acked: set[int] = set()
    for kind, arg in operations:
        before = state.mark_delete_position
        if kind == "individual":
            offsets = [o for o in arg if o < total]
            state.ack_individual([table.position_of(o) for o in offsets], table.next_position)
            acked.update(offsets)
        else:
            if arg >= total:
                continue
            target = table.position_of(arg)
            if target < before:
                with pytest.raises(MarkDeletingMarkedPositionError):
                    state.ack_cumulative(target, table.next_position)
                continue
            state.ack_cumulative(target, table.next_position)
            acked.update(range(arg + 1))
        after = state.mark_delete_position
        assert after >= before
        first = state.individually_deleted.first_range()
        assert first is None or first[1] > after
        assert not any(state.individually_deleted.contains(table.position_of(o)) for o in range(total) if
                       table.position_of(o) <= after)  # fmt: skip
        prefix = 0
        while prefix in acked:
            prefix += 1
        if prefix:
            assert after == table.position_of(prefix - 1)
        for o in range(total):
            assert state.is_acked(table.position_of(o)) == (o in acked)


def test_individual_acks_advance_across_a_ledger_boundary():
    table = make_table([3, 2])  # 3:0..3:2, 5:0..5:1
    state = AckState(Position(3, -1))
    assert state.ack_individual([Position(5, 0), Position(3, 2), Position(3, 1)], table.next_position) == (
        3,
        -1,
    )
    assert len(state.individually_deleted) == 2  # (3:0, 3:2] and (5:-1, 5:0] stay apart: different ledgers
    assert state.ack_individual([Position(3, 0)], table.next_position) == Position(5, 0)
    assert state.individually_deleted.is_empty


def test_cumulative_ack_jumps_over_following_ranges_and_rejects_going_back():
    table = make_table([4, 0, 3])  # 3:0..3:3, empty ledger 5, 7:0..7:2
    state = AckState(Position(3, -1))
    state.ack_individual([Position(7, 0), Position(3, 3)], table.next_position)
    assert state.ack_cumulative(Position(3, 2), table.next_position) == Position(7, 0)
    with pytest.raises(MarkDeletingMarkedPositionError) as info:
        state.ack_cumulative(Position(3, 1), table.next_position)
    assert info.value.mark_delete_position == Position(7, 0)
    assert state.ack_cumulative(Position(7, 0), table.next_position) == Position(7, 0)  # same: no-op


def test_acks_at_or_below_mark_delete_are_ignored_and_reset_clears():
    table = make_table([5])
    state = AckState(Position(3, 1))
    state.ack_individual([Position(3, 0), Position(3, 1), Position(3, 3)], table.next_position)
    assert list(state.individually_deleted.runs()) == [(3, 3, 3)]
    state.reset(Position(3, -1))
    assert state.mark_delete_position == Position(3, -1) and state.individually_deleted.is_empty
    assert not state.is_acked(Position(3, 0))
