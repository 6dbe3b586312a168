"""PositionRangeSet against a naive model (a Python set of positions), as Pulsar's OpenLongPairRangeSetTest
checks against Guava's TreeRangeSet."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from quasar.ledger.position import EARLIEST, LATEST, Position
from quasar.ledger.range_set import PositionRangeSet

LEDGERS = [0, 1, 2, 5]
MAX_ENTRY = 14
DOMAIN = [Position(ledger, entry) for ledger in LEDGERS for entry in range(MAX_ENTRY + 1)]
positions = st.builds(Position, st.sampled_from(LEDGERS), st.integers(-1, MAX_ENTRY))


def model_add(model, lower, upper):
    first = lower.entry_id + 1 if lower.ledger_id == upper.ledger_id else 0
    model.update(Position(upper.ledger_id, e) for e in range(first, upper.entry_id + 1))


def model_runs(model):
    runs = []
    for p in sorted(model):
        if runs and runs[-1][0] == p.ledger_id and runs[-1][2] + 1 == p.entry_id:
            runs[-1][2] = p.entry_id
        else:
            runs.append([p.ledger_id, p.entry_id, p.entry_id])
    return [tuple(r) for r in runs]


class RangeSetMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.ranges = PositionRangeSet()
        self.model: set[Position] = set()

    @rule(a=positions, b=positions)
    def add_open_closed(self, a, b):
        lower, upper = min(a, b), max(a, b)
        self.ranges.add_open_closed(lower, upper)
        model_add(self.model, lower, upper)

    @rule(p=positions)
    def add_one(self, p):
        if p.entry_id >= 0:
            self.ranges.add_open_closed(Position(p.ledger_id, p.entry_id - 1), p)
            self.model.add(p)

    @rule(p=st.one_of(positions, st.just(EARLIEST), st.just(LATEST)))
    def remove_at_most(self, p):
        self.ranges.remove_at_most(p)
        self.model = {q for q in self.model if q > p}

    @rule()
    def clear(self):
        self.ranges.clear()
        self.model.clear()

    @invariant()
    def same_members(self):
        for p in DOMAIN:
            assert self.ranges.contains(p) == (p in self.model), p
        assert self.ranges.cardinality == len(self.model)

    @invariant()
    def maximal_runs_in_order(self):
        runs = model_runs(self.model)
        assert list(self.ranges.runs()) == runs
        assert len(self.ranges) == len(runs)
        assert self.ranges.is_empty == (not runs)
        expected = [(Position(lg, lo - 1), Position(lg, hi)) for lg, lo, hi in runs]
        assert list(self.ranges) == expected
        assert self.ranges.first_range() == (expected[0] if expected else None)
        assert self.ranges.last_range() == (expected[-1] if expected else None)

    @invariant()
    def range_containing_agrees(self):
        for p in self.model:
            lower, upper = self.ranges.range_containing(p)
            assert lower < p <= upper and lower.ledger_id == upper.ledger_id == p.ledger_id


TestRangeSetMachine = RangeSetMachine.TestCase
TestRangeSetMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


def test_adjacent_ranges_merge_within_a_ledger_only():
    ranges = PositionRangeSet()
    ranges.add_open_closed(Position(1, -1), Position(1, 2))
    ranges.add_open_closed(Position(1, 2), Position(1, 5))
    ranges.add_open_closed(Position(1, 5), Position(2, 0))  # crosses a ledger: only 2:0 is added
    assert list(ranges) == [(Position(1, -1), Position(1, 5)), (Position(2, -1), Position(2, 0))]
    assert len(ranges) == 2 and ranges.cardinality == 7


def test_remove_at_most_cuts_a_range():
    ranges = PositionRangeSet([(Position(3, 1), Position(3, 9))])
    ranges.remove_at_most(Position(3, 4))
    assert ranges.first_range() == (Position(3, 4), Position(3, 9))
    assert not ranges.contains(Position(3, 4)) and ranges.contains(Position(3, 5))
    assert ranges.span() == (Position(3, 4), Position(3, 9))


def test_bad_ranges_raise_value_error():
    ranges = PositionRangeSet()
    with pytest.raises(ValueError):
        ranges.add_open_closed(Position(2, 5), Position(2, 1))
    with pytest.raises(ValueError):
        ranges.add_open_closed(Position(-1, -1), Position(-1, 3))
    assert ranges.is_empty


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=60))
def test_many_single_acks_compact_to_runs(acks):
    ranges = PositionRangeSet()
    for ledger, entry in acks:
        ranges.add_open_closed(Position(ledger, entry - 1), Position(ledger, entry))
    assert list(ranges.runs()) == model_runs({Position(lg, e) for lg, e in acks})
