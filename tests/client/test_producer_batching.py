"""The publish fast path's pure parts: the pre-built SingleMessageMetadata of a plain batched message, the
batch container's room rule on that path, and the C++-style round-robin partition switching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.client.batch import PLAIN, BatchMessageContainer
from quasar.client.config import PartitionsRoutingMode, ProducerConfig
from quasar.client.message import OutgoingMessage
from quasar.client.routing import MessageRouter
from quasar.protocol import decode_batch, pb


@given(
    items=st.lists(
        st.tuples(st.binary(max_size=300), st.integers(0, 2**63 - 1) | st.integers(0, 3_000_000)),
        min_size=1,
        max_size=20,
    )
)
def test_plain_items_are_byte_identical_to_protobuf_and_to_the_general_path(items):
    plain = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=1 << 30)
    general = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=1 << 30)
    for payload, sequence_id in items:
        assert plain.add_plain(payload, sequence_id, None) is False
        general.add(OutgoingMessage(payload), sequence_id, None)
    built = plain.build()
    assert built.payload == general.build().payload
    decoded = decode_batch(built.payload, len(items))
    for (single, data), (payload, sequence_id) in zip(decoded, items, strict=True):
        assert bytes(data) == payload
        expected = pb.SingleMessageMetadata(payload_size=len(payload), sequence_id=sequence_id)
        assert single.SerializeToString() == expected.SerializeToString()
    assert (built.sequence_id, built.highest_sequence_id) == (items[0][1], items[-1][1])
    assert built.first is PLAIN and built.num_messages == len(items)


def test_add_plain_refuses_without_room_unless_empty_or_forced():
    batch = BatchMessageContainer(max_messages=3, max_bytes=10, max_message_size=1000)
    assert batch.add_plain(b"x" * 50, 0, "w0") is True  # an empty batch takes anything, then it is full
    built = batch.build()
    assert (built.num_messages, built.waiters) == (1, ["w0"])
    assert batch.add_plain(b"12345", 1, None) is False
    assert batch.add_plain(b"123456", 2, None) is None  # 11 bytes > 10: nothing added
    assert batch.num_messages == 1 and batch.current_bytes == 5
    assert batch.add_plain(b"1", 2, None) is False
    assert batch.add_plain(b"1", 3, None) is True  # 3 messages: full
    assert batch.add_plain(b"", 4, None) is None  # max_messages reached
    assert batch.add_plain(b"", 4, None, force=True) is True
    assert batch.build().num_messages == 4


def _router(**config) -> tuple[MessageRouter, list[int]]:
    now = [0]
    router = MessageRouter(ProducerConfig(batching_enabled=True, **config), clock_ms=lambda: now[0])
    return router, now


def test_round_robin_with_batching_moves_on_when_a_batch_worth_of_messages_was_routed():
    router, _ = _router(batching_max_messages=3, batching_max_allowed_size_in_bytes=1 << 20)
    picks = [router.choose(b"m", None, 4, 1) for _ in range(12)]
    first = picks[0]
    assert picks == [(first + i // 3) % 4 for i in range(12)]  # 3 per partition, then the next one


def test_round_robin_with_batching_moves_on_when_the_bytes_would_overflow_the_batch():
    router, _ = _router(batching_max_messages=1000, batching_max_allowed_size_in_bytes=1000)
    picks = [router.choose(b"", None, 3, 300) for _ in range(7)]
    first = picks[0]
    # 3 x 300 = 900 fit in 1000, a 4th would make 1200: it opens the next partition's batch
    assert picks == [first, first, first, (first + 1) % 3, (first + 1) % 3, (first + 1) % 3, (first + 2) % 3]


def test_round_robin_with_batching_still_moves_on_after_the_time_window():
    router, now = _router(batching_max_publish_delay_ms=10, partition_switch_frequency_by_publish_delay=2)
    first = router.choose(b"", None, 5, 1)
    now[0] = 19
    assert router.choose(b"", None, 5, 1) == first
    now[0] = 20
    assert router.choose(b"", None, 5, 1) == (first + 1) % 5


def test_keys_and_custom_routers_ignore_the_round_robin_state():
    router, _ = _router(batching_max_messages=1)
    assert {router.choose(b"", "same-key", 7, 1) for _ in range(5)} == {router.choose(b"", "same-key", 7, 1)}
    seen = []

    def custom(message, partitions):
        seen.append(message.data())
        return 2

    chosen = MessageRouter(
        ProducerConfig(message_routing_mode=PartitionsRoutingMode.CustomPartition, message_router=custom)
    )
    assert chosen.choose(b"payload", None, 3, 7) == 2  # bare bytes reach the router as a message
    assert seen == [b"payload"]
    with pytest.raises(ValueError, match="not a partition"):
        chosen.choose(OutgoingMessage(b"x"), None, 2, 1)
