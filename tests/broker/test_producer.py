"""Broker-side Producer: how a failed entry is answered (quasar.broker.producer.Producer.release_receipts).

A SYNC_MASTER whose replicas did not take an entry (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT: docs/replication.md
"What a receipt means") closes that producer with CLOSE_PRODUCER: the official client answers any SEND_ERROR by
dropping the whole connection, consumers included. Every other failure still gets SEND_ERROR.
"""

from __future__ import annotations

import pytest

from quasar.broker.dedup import DisabledDeduplication
from quasar.broker.producer import Producer, PublishCallback
from quasar.broker.topic_stats import TopicCounters
from quasar.ledger import ManagedLedgerFlushTimeoutError
from quasar.ledger.position import Position
from quasar.protocol import TopicName
from quasar.protocol.enums import ServerError


class FakeCnx:
    """Records what the producer asks its connection to send; ``close_producer`` detaches the producer as
    ``ServerCnx`` does (``producer.closed``), so later receipts are dropped."""

    non_persistent_pending = 0
    max_non_persistent_pending = 1000

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int | ServerError]] = []

    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None:
        self.sent.append(("SEND_RECEIPT", producer_id, sequence_id))

    def send_send_error(self, producer_id: int, sequence_id: int, error: ServerError, message: str) -> None:
        self.sent.append(("SEND_ERROR", producer_id, error))

    def close_producer(self, producer: Producer) -> None:
        producer.closed = True
        self.sent.append(("CLOSE_PRODUCER", producer.producer_id, 0))

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        raise AssertionError("not a waiting producer")

    def refuse_producer(self, producer: Producer, error: object) -> None:
        raise AssertionError("not a waiting producer")

    def publish_completed(self) -> None:
        """One SEND answered (the connection's pending-publish count, max_pending_publish_requests)."""


class FakeTopic:
    """A persistent topic whose adds are answered by the test (``answer``), in publish order."""

    is_persistent = True

    def __init__(self) -> None:
        self.name = TopicName.parse("persistent://public/default/t")
        self.dedup = DisabledDeduplication()
        self.callbacks: list[PublishCallback] = []
        self.counters = TopicCounters()

    def publish(self, data: memoryview, callback: PublishCallback) -> None:
        self.callbacks.append(callback)

    def remove_producer(self, producer: Producer) -> None:
        pass


def producer_with_three_sends() -> tuple[Producer, FakeCnx, FakeTopic]:
    cnx, topic = FakeCnx(), FakeTopic()
    producer = Producer(7, "p", topic, cnx, True)  # type: ignore[arg-type]
    for sequence_id in range(3):
        producer.publish(sequence_id, sequence_id, 1, memoryview(b"entry"))
    assert len(topic.callbacks) == 3 and producer.pending_count == 3
    return producer, cnx, topic


@pytest.mark.parametrize("status", ["SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT"])
def test_an_entry_the_replicas_did_not_take_closes_the_producer_without_send_error(status: str) -> None:
    producer, cnx, topic = producer_with_three_sends()
    first, second, third = topic.callbacks
    second(None, ManagedLedgerFlushTimeoutError(f"store refused an entry of t: {status}", status=status))
    third(Position(3, 2), None)
    assert cnx.sent == []  # receipts keep send order: the head is not answered yet
    first(Position(3, 0), None)
    # the first is receipted, the failed one closes the producer, and nothing is sent for it after that
    assert cnx.sent == [("SEND_RECEIPT", 7, 0), ("CLOSE_PRODUCER", 7, 0)]
    assert producer.closed and producer.pending_count == 0


def test_other_flush_failures_still_answer_send_error() -> None:
    producer, cnx, topic = producer_with_three_sends()
    first, second, third = topic.callbacks
    first(Position(3, 0), None)
    second(
        None, ManagedLedgerFlushTimeoutError("store refused: FLUSH_DISK_TIMEOUT", status="FLUSH_DISK_TIMEOUT")
    )
    third(Position(3, 2), None)
    assert [kind for kind, *_ in cnx.sent] == ["SEND_RECEIPT", "SEND_ERROR", "SEND_RECEIPT"]
    assert cnx.sent[1][2] is ServerError.PersistenceError
    assert not producer.closed


def test_publishing_counts_messages_bytes_and_latencies_per_entry() -> None:
    """The topic's counters take each SEND's messages and bytes; every stored entry adds one storage write
    latency and every receipt one publish latency; a failed entry adds neither."""
    producer, _cnx, topic = producer_with_three_sends()
    producer.publish(3, 3, 5, memoryview(b"batch-of-five"))  # one entry holding five messages
    counters = topic.counters
    assert (counters.msg_in, counters.bytes_in) == (3 + 5, 3 * len(b"entry") + len(b"batch-of-five"))
    assert counters.storage_write_latency.count == 0 and counters.publish_latency.count == 0
    topic.callbacks[0](Position(1, 0), None)
    topic.callbacks[1](Position(1, 1), None)
    topic.callbacks[2](None, ManagedLedgerFlushTimeoutError("timed out", status="FLUSH_DISK_TIMEOUT"))
    topic.callbacks[3](Position(1, 2), None)
    assert counters.storage_write_latency.count == 3
    assert counters.publish_latency.count == 3  # receipts; the failed entry got SEND_ERROR
    assert sum(counters.publish_latency.counts) == 3 and counters.publish_latency.sum_ms >= 0
