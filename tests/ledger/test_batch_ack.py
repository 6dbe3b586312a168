"""Batch-index ack sets (PIP-54, semantics.md B2/B7): AND into the stored set, entry deleted when it empties,
persisted with the cursor, dropped by whole-entry / cumulative acks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.ledger.ack_state import AckState
from quasar.ledger.cursor_store import CursorSnapshot
from quasar.ledger.errors import InvalidCursorPositionError, MetadataError
from quasar.ledger.ledger_table import LedgerInfo, LedgerTable
from quasar.ledger.position import Position

TOPIC = "persistent://public/default/batch-acks"
SIZE = 70  # more than one 64-bit word


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sets(st.integers(0, SIZE - 1), max_size=SIZE)), max_size=20))
def test_batch_acks_match_a_model_of_acked_indexes(acks):
    table = LedgerTable([LedgerInfo(1, 0, 0)], 4)
    state = AckState(table.position_of(-1))
    full = (1 << SIZE) - 1
    acked: dict[int, set[int]] = {i: set() for i in range(4)}
    for entry, indexes in acks:
        before = state.mark_delete_position
        acked[entry] |= indexes
        ack_set = full & ~sum(1 << i for i in indexes)  # the client's view: bit set = not acked
        state.ack_batch_indexes(Position(1, entry), ack_set, table.next_position)
        assert state.mark_delete_position >= before
        for e in range(4):
            position = Position(1, e)
            done = len(acked[e]) == SIZE
            assert state.is_acked(position) == done
            stored = state.batch_deleted_indexes.get(position)
            if done:
                assert stored is None
            elif not acked[e]:
                assert stored in (None, full)  # an ack_set that acks nothing changes nothing
            else:
                assert stored == full & ~sum(1 << i for i in acked[e])
        assert all(p > state.mark_delete_position for p in state.batch_deleted_indexes)


def test_whole_entry_and_cumulative_acks_drop_partial_sets():
    table = LedgerTable([LedgerInfo(1, 0, 0)], 5)
    state = AckState(table.position_of(-1))
    for entry in (1, 2, 3):
        state.ack_batch_indexes(Position(1, entry), 0b110, table.next_position)
    state.ack_individual([Position(1, 2)], table.next_position)
    assert Position(1, 2) not in state.batch_deleted_indexes
    state.ack_cumulative(Position(1, 1), table.next_position)
    assert list(state.batch_deleted_indexes) == [Position(1, 3)]
    state.reset(Position(1, -1))
    assert state.batch_deleted_indexes == {}


def test_snapshot_round_trip_and_bad_words():
    bits = (1 << 100) | 0b101
    snapshot = CursorSnapshot.take(
        "c",
        Position(1, 0),
        AckState(Position(1, 0)).individually_deleted,
        max_ranges=10,
        now_ms=1,
        batch_deleted={Position(1, 5): bits, Position(1, 3): 1},
        max_batch_entries=1,
    )
    assert snapshot.batch_deleted == ((1, 3, 1),)  # lowest positions first, capped
    value = CursorSnapshot.take(
        "c",
        Position(1, 0),
        AckState(Position(1, 0)).individually_deleted,
        max_ranges=10,
        now_ms=1,
        batch_deleted={Position(1, 5): bits},
    ).to_json()
    assert value["batch_deleted"] == [[1, 5, [0b101, 1 << 36]]]
    assert CursorSnapshot.from_json(value).batch_deleted_map() == {Position(1, 5): bits}
    for bad in ([[1, 5, [-1]]], [[1, 5, [0]]], [[1, 5, "x"]], [[1, -2, [1]]]):
        with pytest.raises(MetadataError):
            CursorSnapshot.from_json({**value, "batch_deleted": bad})


async def test_cursor_batch_sets_survive_restart(any_env):
    ledger = await any_env.factory.open(TOPIC)
    positions = [await ledger.add_entry(b"batch%d" % i) for i in range(3)]
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.delete_batch_indexes(positions[1], 0b1010)
    cursor.delete_batch_indexes(positions[1], 0b0110)  # AND: only index 1 left
    cursor.delete_batch_indexes(positions[0], 0)  # empty: the whole entry goes
    assert cursor.mark_delete_position == positions[0]
    assert cursor.batch_ack_set(positions[1]) == 0b0010
    with pytest.raises(InvalidCursorPositionError):
        cursor.delete_batch_indexes(Position(positions[0].ledger_id + 99, 0), 1)
    with pytest.raises(ValueError):
        cursor.delete_batch_indexes(positions[2], -1)
    factory = await any_env.restart()
    cursor = (await factory.open(TOPIC)).cursors["sub"]
    assert cursor.batch_ack_set(positions[1]) == 0b0010
    cursor.delete_batch_indexes(positions[1], 0b0001)
    assert cursor.batch_ack_set(positions[1]) is None
    assert cursor.mark_delete_position == positions[1]
