"""The consumer's incoming side without a broker: batch unpacking (fast boundary scan vs protobuf), lazily
parsed Message accessors, per-entry duplicate filtering and the batch acker's hot-path method."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.client.ack_grouping import AckGroupingTracker, BatchAcker
from quasar.client.consumer_incoming import DeliveryFilter
from quasar.client.errors import InvalidMessageError
from quasar.client.message import Message, ReceivedEntry, encode_single_metadata, unpack_batch
from quasar.protocol import MessageId, pb


def _entry(count: int, *, sequence_id: int = 7, properties: dict[str, str] | None = None) -> ReceivedEntry:
    metadata = pb.MessageMetadata(producer_name="prod", sequence_id=sequence_id, publish_time=1234)
    metadata.num_messages_in_batch = count
    metadata.schema_version = b"v1"
    for key, value in (properties or {}).items():
        metadata.properties.add(key=key, value=value)
    return ReceivedEntry(5, 9, 2, count, "persistent://public/default/t-partition-2", metadata, 3, "consumer")


def _item(single: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(single)) + single + data


def _oracle(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    pos, out = 0, []
    for _ in range(count):
        (size,) = struct.unpack_from(">I", payload, pos)
        single = pb.SingleMessageMetadata.FromString(payload[pos + 4 : pos + 4 + size])
        start = pos + 4 + size
        out.append((single, payload[start : start + single.payload_size]))
        pos = start + single.payload_size
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=20_000) | st.sampled_from([b"", b"x" * 127, b"x" * 128, b"y" * 16_383]),
            st.integers(0, 2**64 - 1) | st.sampled_from([0, 127, 128, 16_383, 16_384, 2**21]),
            st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
            st.none() | st.text(max_size=5),
            st.none() | st.integers(0, 2**40),
            st.none() | st.binary(max_size=4),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_unpack_batch_matches_protobuf(items):
    payload = b"".join(
        _item(
            encode_single_metadata(
                len(data), seq, properties=props, partition_key=key, event_time=event, ordering_key=ordering
            ),
            data,
        )
        for data, seq, props, key, event, ordering in items
    )
    entry = _entry(len(items))
    messages, skipped = unpack_batch(payload, entry)
    assert skipped == 0
    expected = _oracle(payload, len(items))
    assert [m.data() for m in messages] == [data for _, data in expected]
    for index, (message, (single, _)) in enumerate(zip(messages, expected, strict=True)):
        assert message.sequence_id() == single.sequence_id
        assert message.properties() == {kv.key: kv.value for kv in single.properties}
        assert message.partition_key() == single.partition_key
        assert message.ordering_key() == single.ordering_key
        assert message.event_timestamp() == single.event_time
        assert message.message_id() == MessageId(5, 9, 2, index, len(items))
        assert message.message_id().batch_size == len(items)
    # the same batch read at an offset inside a larger buffer
    again, _ = unpack_batch(b"junk" + payload, entry, offset=4)
    assert [m.data() for m in again] == [m.data() for m in messages]


def test_fast_scan_keeps_metadata_unparsed_and_accessors_parse_it():
    payload = _item(b"\x18\x02\x40\x05", b"ab") + _item(b"\x18\x01", b"c")
    messages, _ = unpack_batch(payload, _entry(2, sequence_id=40))
    assert [m._single for m in messages] == [b"\x18\x02\x40\x05", b"\x18\x01"]
    assert [m.sequence_id() for m in messages] == [5, 41]  # no sequence_id: the entry's + index
    assert messages[0].properties() == {}
    assert messages[0].publish_timestamp() == 1234
    assert messages[0].producer_name() == "prod"
    assert messages[0].redelivery_count() == 3
    assert messages[0].schema_version() == b"v1"
    assert messages[0].topic_name().endswith("-partition-2")
    assert messages[0].entry.consumer == "consumer"
    assert messages[0].message_id() is messages[0].message_id()  # built once


def test_fields_out_of_order_are_parsed_with_protobuf():
    single = b"\x40\x05\x18\x02"  # sequence_id before payload_size: valid protobuf, not the fast form
    messages, _ = unpack_batch(_item(single, b"ab"), _entry(1))
    assert messages[0].data() == b"ab"
    assert messages[0].sequence_id() == 5


@pytest.mark.parametrize(
    "payload",
    [
        _item(b"\x18\x02\x40", b"ab"),  # sequence_id tag without its varint
        _item(b"\x18\x02\x40\x85", b"ab"),  # unterminated varint
        _item(b"\x18\x02\x40\x05\x07", b"ab"),  # a byte after the last field
        _item(b"\x18\x02\x40\x05\x85", b"ab"),  # an unterminated varint after the last field
        _item(b"\x18\x02\x40\x05\x80\x01", b"ab"),  # "varint" with a clear continuation bit inside
        _item(b"\x18\x05", b"ab"),  # payload runs past the batch
        _item(b"\x18\x02", b"ab") + b"\x00",  # a byte left over
        b"\x00\x00\x00\x09\x18",  # metadata size runs past the batch
        b"\x00\x00",  # not even a size
    ],
)
def test_malformed_batches_are_rejected_as_before(payload):
    with pytest.raises(InvalidMessageError):
        unpack_batch(payload, _entry(1))


def test_keep_skips_items_and_counts_them():
    payload = b"".join(_item(encode_single_metadata(1, i), bytes([65 + i])) for i in range(4))
    messages, skipped = unpack_batch(payload, _entry(4), keep=lambda index: index % 2 == 1)
    assert [m.data() for m in messages] == [b"B", b"D"]
    assert [m.batch_index for m in messages] == [1, 3]
    assert skipped == 2


def test_non_batched_message_reads_the_entry_metadata():
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=11, publish_time=5, partition_key="k")
    metadata.properties.add(key="a", value="b")
    metadata.event_time = 99
    entry = ReceivedEntry(1, 2, -1, 0, "t", metadata, 0, None)
    message = Message(b"data", entry)
    assert message.message_id() == MessageId(1, 2)
    assert message.message_id().batch_index == -1
    assert (message.properties(), message.partition_key(), message.sequence_id()) == ({"a": "b"}, "k", 11)
    assert message.event_timestamp() == 99
    assert repr(message).endswith("topic='t', 4 bytes)")


def test_batch_acker_ack_index_returns_the_remaining_bitmap():
    acker = BatchAcker()
    acker.track((1, 1), 3)
    assert acker.size((1, 1)) == 3
    assert acker.ack_index((1, 1), 1) == 0b101
    assert acker.ack_index((1, 1), 1) == 0b101  # acking twice changes nothing
    assert acker.ack((1, 1), 0) == (False, 0b100, 3)
    assert acker.ack_index((1, 1), 2) == 0  # complete: forgotten
    assert len(acker) == 0
    assert acker.ack_index((9, 9), 0) == 0  # untracked: a whole entry
    assert acker.size((9, 9)) == 0


def _filter_host(acks: AckGroupingTracker, start: MessageId | None = None) -> DeliveryFilter:
    return DeliveryFilter(SimpleNamespace(grouping=acks), SimpleNamespace(last_dequeued=None), start, False)


def test_batch_filter_decides_duplicates_per_entry_when_it_can():
    acks = AckGroupingTracker()
    host = _filter_host(acks)
    assert host.batch_filter(1, 5, None) is None  # nothing acked: keep everything
    acks.add_individual((1, 5))
    keep = host.batch_filter(1, 5, None)
    assert keep is not None and not any(keep(i) for i in range(3))  # the whole entry is acked
    assert host.batch_filter(1, 6, None) is None
    keep = host.batch_filter(1, 6, 0b010)  # ack_set from the broker: only item 1 unacked
    assert keep is not None and [keep(i) for i in range(3)] == [False, True, False]
    acks.add_cumulative(1, 7, 1)  # cumulative ack inside entry (1, 7): per item
    keep = host.batch_filter(1, 7, None)
    assert keep is not None and [keep(i) for i in range(4)] == [False, False, True, True]
    assert not any(keep(i) for i in range(2))
    keep = host.batch_filter(1, 3, None)
    assert keep is not None and not keep(0)  # before the cumulative ack


def test_batch_filter_applies_the_start_message_id():
    host = _filter_host(AckGroupingTracker(), start=MessageId(1, 5, -1, 1))
    keep = host.batch_filter(1, 5, None)
    assert keep is not None and [keep(i) for i in range(4)] == [False, False, True, True]
    keep = host.batch_filter(1, 6, None)
    assert keep is not None and all(keep(i) for i in range(4))
