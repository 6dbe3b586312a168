"""MessageId against the official client's ``pulsar.MessageId`` (C++ MessageId.cc semantics)."""

from __future__ import annotations

import pulsar
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.protocol import EARLIEST, INT64_MAX, LATEST, LocalProtocolError, MessageId
from quasar.protocol.pb import MessageIdData

SMALL = st.integers(-1, 3)  # small ranges so that ties happen
IDS = st.builds(MessageId, st.integers(-1, 3), SMALL, SMALL, SMALL)
U64_MAX = (1 << 64) - 1


def official(message_id: MessageId) -> pulsar.MessageId:
    return pulsar.MessageId(
        message_id.partition, message_id.ledger_id, message_id.entry_id, message_id.batch_index
    )


@given(
    ledger_id=st.integers(-1, 2**63 - 1),
    entry_id=st.integers(-1, 2**63 - 1),
    partition=st.integers(-1, 2**31 - 1),
    batch_index=st.integers(-1, 2**31 - 1),
)
def test_serialize_is_byte_identical_to_the_official_client(
    ledger_id: int, entry_id: int, partition: int, batch_index: int
) -> None:
    ours = MessageId(ledger_id, entry_id, partition, batch_index)
    theirs = official(ours)
    assert ours.serialize() == theirs.serialize()
    assert MessageId.deserialize(theirs.serialize()) == ours
    back = pulsar.MessageId.deserialize(ours.serialize())
    assert (back.ledger_id(), back.entry_id(), back.partition(), back.batch_index()) == (
        ledger_id,
        entry_id,
        partition,
        batch_index,
    )


def test_earliest_and_latest_match_the_official_client() -> None:
    assert MessageId(-1, -1) == EARLIEST
    assert MessageId(INT64_MAX, INT64_MAX) == LATEST
    assert EARLIEST.serialize() == pulsar.MessageId.earliest.serialize()
    assert LATEST.serialize() == pulsar.MessageId.latest.serialize()


@given(a=IDS, b=IDS)
def test_ordering_and_equality_match_the_official_client(a: MessageId, b: MessageId) -> None:
    assert (a < b) == (official(a) < official(b))
    assert (a == b) == (official(a) == official(b))
    assert (a <= b) == (official(a) <= official(b))
    assert (a > b) == (official(a) > official(b))
    assert (a >= b) == (official(a) >= official(b))
    assert (a != b) == (official(a) != official(b))


def test_partition_is_part_of_equality_but_not_of_ordering() -> None:
    a, b = MessageId(1, 2, partition=0), MessageId(1, 2, partition=1)
    assert a != b
    assert not a < b and not b < a
    assert a > b and b > a  # C++: operator> is !(operator<=)
    assert MessageId(1, 2, batch_index=0) < MessageId(1, 2, batch_index=1)
    assert MessageId(1, 2, batch_size=3) == MessageId(1, 2, batch_size=5)
    assert hash(MessageId(1, 2, batch_size=3)) == hash(MessageId(1, 2, batch_size=5))
    assert sorted([MessageId(2, 0), MessageId(1, 5), MessageId(1, 4, batch_index=1)]) == [
        MessageId(1, 4, batch_index=1),
        MessageId(1, 5),
        MessageId(2, 0),
    ]


def test_from_pb_reads_uint64_max_as_minus_one() -> None:
    data = MessageIdData(ledgerId=U64_MAX, entryId=U64_MAX)
    assert MessageId.from_pb(data) == EARLIEST
    assert EARLIEST.to_pb() == data


def test_to_pb_sets_optional_fields_only_when_meaningful() -> None:
    data = MessageId(5, 7).to_pb()
    assert (
        not data.HasField("partition")
        and not data.HasField("batch_index")
        and not data.HasField("batch_size")
    )
    data = MessageId(5, 7, 2, 1, 3).to_pb()
    assert (data.partition, data.batch_index, data.batch_size) == (2, 1, 3)
    assert MessageId.from_pb(data) == MessageId(5, 7, 2, 1, 3)
    assert MessageId.from_pb(data).batch_size == 3


@pytest.mark.parametrize(
    "args",
    [(2**63, 0), (0, -(2**63) - 1), (0, 0, 2**31), (0, 0, -1, -(2**31) - 1), ("1", 0), (1.0, 0)],
)
def test_out_of_range_fields_raise(args: tuple[object, ...]) -> None:
    with pytest.raises(LocalProtocolError):
        MessageId(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data", [b"\xff\xff", b"", MessageIdData(ledgerId=1, entryId=2).SerializeToString()[:2]]
)
def test_deserialize_rejects_garbage(data: bytes) -> None:
    with pytest.raises(LocalProtocolError):
        MessageId.deserialize(data)
