"""Unit tests of the acknowledgement, negative-ack and ack-timeout trackers (seed 001) and the configs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.client.ack_grouping import AckGroupingTracker, BatchAcker
from quasar.client.config import ClientConfig, ConsumerConfig, DeadLetterPolicy, ProducerConfig, ReaderConfig
from quasar.client.negative_acks import NegativeAcksTracker, UnackedMessageTracker
from quasar.protocol import AckType
from quasar.protocol.ack_set import ack_set_words


def test_individual_acks_group_until_flush_and_flush_at_max_size():
    tracker = AckGroupingTracker(group_time_ms=100, max_size=3)
    assert tracker.add_individual((1, 0)) is False
    assert tracker.add_individual((1, 1)) is False
    assert tracker.add_individual((1, 1)) is False  # same entry counted once
    assert tracker.add_individual((1, 2)) is True  # 3 pending = max size
    [ack] = tracker.flush()
    assert ack.ack_type == AckType.Individual and ack.entries == [(1, 0), (1, 1), (1, 2)]
    assert ack.ack_sets == [None, None, None]
    assert tracker.flush() == []


def test_group_time_zero_or_properties_flush_immediately():
    assert AckGroupingTracker(group_time_ms=0).add_individual((1, 0)) is True
    assert AckGroupingTracker().add_individual((1, 0), has_properties=True) is True
    assert AckGroupingTracker(group_time_ms=0).add_cumulative(1, 0) is True


def test_cumulative_keeps_only_the_highest_id():
    tracker = AckGroupingTracker()
    tracker.add_cumulative(1, 5)
    tracker.add_cumulative(1, 3)  # lower: ignored
    tracker.add_cumulative(1, 7)
    tracker.add_cumulative(1, 6)
    [ack] = tracker.flush()
    assert ack.ack_type == AckType.Cumulative and ack.entries == [(1, 7)]
    assert tracker.flush() == []  # nothing new
    tracker.add_cumulative(1, 7)
    assert tracker.flush() == []


def test_is_duplicate_covers_cumulative_and_pending_whole_entries():
    tracker = AckGroupingTracker()
    tracker.add_cumulative(2, 4)
    assert tracker.is_duplicate(2, 4) and tracker.is_duplicate(1, 99) and tracker.is_duplicate(2, 4, 3)
    assert not tracker.is_duplicate(2, 5)
    tracker.add_individual((3, 1))
    tracker.add_individual((3, 2), [0b101])
    assert tracker.is_duplicate(3, 1) and not tracker.is_duplicate(3, 2)
    partial = AckGroupingTracker()
    partial.add_cumulative(5, 1, 2, [0b1000])
    assert partial.is_duplicate(5, 1, 2) and not partial.is_duplicate(5, 1, 3)


def test_partial_batch_ack_sets_are_anded():
    tracker = AckGroupingTracker()
    tracker.add_individual((1, 0), [0b110])
    tracker.add_individual((1, 0), [0b011])
    [ack] = tracker.flush()
    assert ack.ack_sets == [[0b010]]


def test_ack_set_words_follow_java_bitset_layout():
    # reference §6.11: acking index 1 of a 3-message batch sends ack_set [5] (0b101)
    acker = BatchAcker()
    acker.track((7, 0), 3)
    complete, bitmap, size = acker.ack((7, 0), 1)
    assert not complete and ack_set_words(bitmap, size) == [5]
    assert ack_set_words(1 << 63, 64) == [-(1 << 63)]  # int64 words, sign bit = index 63
    assert ack_set_words(1 << 64, 65) == [0, 1]


@given(st.integers(1, 200), st.data())
def test_batch_acker_completes_exactly_when_every_index_is_acked(size, data):
    acker = BatchAcker()
    acker.track((1, 1), size)
    order = data.draw(st.permutations(range(size)))
    for count, index in enumerate(order, start=1):
        complete, bitmap, _ = acker.ack((1, 1), index)
        assert complete == (count == size)
        assert bin(bitmap).count("1") == size - count


def test_batch_acker_cumulative_and_forget():
    acker = BatchAcker()
    acker.track((1, 1), 4)
    assert acker.ack_up_to((1, 1), 1)[:2] == (False, 0b1100)
    assert acker.ack_up_to((1, 1), 3)[0] is True
    acker.track((1, 2), 2)
    acker.track((1, 3), 2)
    acker.forget_up_to((1, 2))
    assert len(acker) == 1


def test_negative_acks_wait_for_the_delay_and_backoff():
    now = [0.0]
    nacks = NegativeAcksTracker(delay_ms=1000, clock=lambda: now[0])
    nacks.add((1, 2))
    nacks.add((1, 1))
    assert nacks.pop_expired() == []
    now[0] = 1.0
    assert nacks.pop_expired() == [(1, 1), (1, 2)]
    assert len(nacks) == 0
    backoff = NegativeAcksTracker(backoff=lambda count: 100 * 2**count, clock=lambda: now[0])
    backoff.add((2, 0), redelivery_count=3)  # 800 ms
    now[0] = 1.7
    assert backoff.pop_expired() == []
    now[0] = 1.8
    assert backoff.pop_expired() == [(2, 0)]
    nacks.add((3, 0))
    nacks.remove((3, 0))
    assert nacks.next_deadline() is None


def test_unacked_tracker_expires_handed_out_entries():
    now = [0.0]
    tracker = UnackedMessageTracker(10_000, clock=lambda: now[0])
    tracker.add((1, 0))
    tracker.add((1, 1))
    tracker.add((1, 2))
    tracker.remove((1, 1))
    now[0] = 5
    tracker.add((1, 3))
    now[0] = 10
    assert tracker.pop_expired() == [(1, 0), (1, 2)]
    tracker.remove_up_to((1, 3))
    assert len(tracker) == 0


@pytest.mark.parametrize(
    ("factory", "kwargs", "error", "name"),
    [
        (ClientConfig, {"operation_timeout_seconds": 0}, ValueError, "operation_timeout_seconds"),
        (ClientConfig, {"connection_timeout_ms": "1"}, TypeError, "connection_timeout_ms"),
        (ProducerConfig, {"max_pending_messages": 0}, ValueError, "max_pending_messages"),
        (ProducerConfig, {"batching_enabled": 1}, TypeError, "batching_enabled"),
        (
            ProducerConfig,
            {"batching_enabled": True, "chunking_enabled": True},
            ValueError,
            "chunking_enabled",
        ),
        (ProducerConfig, {"compression_type": 9}, ValueError, "compression_type"),
        (ProducerConfig, {"message_routing_mode": 2}, ValueError, "message_router"),
        (ProducerConfig, {"send_timeout_millis": True}, TypeError, "send_timeout_millis"),
        (ConsumerConfig, {"receiver_queue_size": -1}, ValueError, "receiver_queue_size"),
        (ConsumerConfig, {"unacked_messages_timeout_ms": 500}, ValueError, "unacked_messages_timeout_ms"),
        (ConsumerConfig, {"consumer_type": "Shared"}, TypeError, "consumer_type"),
        (ConsumerConfig, {"dead_letter_policy": 3}, TypeError, "dead_letter_policy"),
        (ConsumerConfig, {"properties": {"a": 1}}, TypeError, "properties"),
        (DeadLetterPolicy, {"max_redeliver_count": 0}, ValueError, "max_redeliver_count"),
        (ReaderConfig, {"start_message_id": "earliest"}, TypeError, "start_message_id"),
    ],
)
def test_config_validation_names_the_parameter(factory, kwargs, error, name):
    with pytest.raises(error, match=name):
        factory(**kwargs)


def test_config_defaults_follow_pulsar():
    producer = ProducerConfig()
    assert (producer.send_timeout_millis, producer.max_pending_messages, producer.batching_enabled) == (
        30000,
        1000,
        False,
    )
    assert (producer.batching_max_messages, producer.batching_max_allowed_size_in_bytes) == (1000, 128 * 1024)
    consumer = ConsumerConfig()
    assert (consumer.receiver_queue_size, consumer.acknowledgements_group_time_ms) == (1000, 100)
    assert (consumer.negative_ack_redelivery_delay_ms, consumer.max_pending_chunked_message) == (60000, 10)
    assert ConsumerConfig(consumer_type=1).consumer_type.name == "Shared"


def test_tracker_active_only_when_duplicates_are_possible():
    tracker = AckGroupingTracker()
    assert not tracker.active
    tracker.add_individual((1, 0))
    assert tracker.active
    tracker.flush()
    assert not tracker.active
    tracker.add_cumulative(1, 0)
    tracker.flush()
    assert tracker.active  # the cumulative position is kept for is_duplicate
