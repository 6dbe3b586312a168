"""Broker-side producer: receives CommandSend entries and answers with receipts in send order.

Pulsar's ``Producer.publishMessage``: each SEND is one entry (a whole client batch, never unpacked here), which
is appended to the topic's managed ledger; the SEND_RECEIPT carries the (ledgerId, entryId) of that entry.
Receipts go out strictly in the order the SENDs arrived (the C++ client closes the connection on a receipt
for a later sequence id, reference/pulsar-protocol.md §6.7), so completions are queued per producer and
released from the head.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from quasar.broker.access_modes import ProducerAccess, ProducerAccessMode
from quasar.broker.dedup import DUPLICATE_POSITION, DedupStatus, DisabledDeduplication, MessageDeduplication
from quasar.broker.errors import BrokerError, PersistenceError, send_error_of
from quasar.broker.topic_stats import TopicCounters
from quasar.ledger.position import Position
from quasar.protocol.enums import ServerError

if TYPE_CHECKING:
    from quasar.protocol import TopicName

__all__ = ["DROPPED_POSITION", "Producer", "ProducerConnection", "ProducerTopic", "PublishCallback"]

DROPPED_POSITION = Position(-1, -1)
"""Receipt id of a non-persistent publish dropped by the connection's in-flight limit."""

PublishCallback = Callable[[Position | None, BaseException | None], None]
"""``callback(position, None)`` once an entry is stored (or fanned out), ``callback(None, error)`` if not."""


def _later(op: _PendingSend, position: Position | None, error: BaseException | None) -> None:
    """Answer ``op`` on the next loop iteration, as a store's answer would come (receipts keep send order)."""
    asyncio.get_running_loop().call_soon(op, position, error)


log = logging.getLogger(__name__)

_REPLICAS_UNAVAILABLE = frozenset({"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT"})
"""Store statuses of a SYNC_MASTER whose replicas did not take an entry (quasar.replication): answered by closing
the producer, not with SEND_ERROR."""

_STORE_REFUSES = frozenset({"SERVICE_NOT_AVAILABLE"})
"""The store refuses every put (the disk is full, or an I/O failure latched it): answered by closing the
producer, not with SEND_ERROR. The C++ client answers any SEND_ERROR but ChecksumError by closing the whole
connection (consumers too) and resending at once, a loop of about ten a second for as long as the disk stays
full; after CLOSE_PRODUCER it re-creates that producer alone, with its backoff (100 ms doubling to 60 s),
and the broker refuses the new PRODUCER with a retryable ServiceNotReady while the store refuses writes
(``BrokerService.write_refusal``); pending sends fail at the client's send timeout."""

REFUSAL_LOG_INTERVAL_S = 10.0
"""Producers closed because the store refuses writes are logged at most once per this many seconds, with a
count of the ones in between (the log may be on the full disk)."""


class _RateLimitedLog:
    """One warning per :data:`REFUSAL_LOG_INTERVAL_S` at most, saying how many were suppressed since."""

    def __init__(self) -> None:
        self._log_after = 0.0
        self._suppressed = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._log_after:
            self._suppressed += 1
            return
        self._log_after = now + REFUSAL_LOG_INTERVAL_S
        suffix = f" ({self._suppressed} more since the last such line)" if self._suppressed else ""
        self._suppressed = 0
        log.warning(message + suffix, *args)


_refusal_log = _RateLimitedLog()


class ProducerConnection(Protocol):
    """What a producer needs from its connection (ServerCnx implements it)."""

    def send_receipt(
        self, producer_id: int, sequence_id: int, highest_sequence_id: int, position: Position
    ) -> None: ...

    def send_send_error(
        self, producer_id: int, sequence_id: int, error: ServerError, message: str
    ) -> None: ...

    non_persistent_pending: int
    max_non_persistent_pending: int

    def close_producer(self, producer: Producer) -> None: ...

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None: ...

    def refuse_producer(self, producer: Producer, error: BrokerError) -> None: ...

    def publish_completed(self) -> None:
        """One SEND of this connection got its answer (counted against the pending-publish limit)."""


class ProducerTopic(Protocol):
    """What a producer and the producer commands use of its topic (``PersistentTopic``,
    ``NonPersistentTopic``)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def is_persistent(self) -> bool: ...

    @property
    def dedup(self) -> MessageDeduplication | DisabledDeduplication: ...

    @property
    def access(self) -> ProducerAccess[Producer]: ...

    @property
    def counters(self) -> TopicCounters:
        """The topic's message/byte counters and latency buckets (``topic_stats``)."""
        ...

    def publish(
        self,
        data: memoryview,
        callback: PublishCallback,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """Append (or fan out) one entry; ``callback(position, None)`` or ``callback(None, error)`` runs once,
        on the loop thread, never before this returns, in publish order. ``properties`` / ``tag_hash``: the
        store record's (``PersistentTopic.publish``)."""
        ...

    def remove_producer(self, producer: Producer) -> None: ...


class _PendingSend:
    """One SEND waiting for its receipt; it is itself the add's completion callback (no future per entry)."""

    __slots__ = (
        "dedup",
        "done",
        "error",
        "highest_sequence_id",
        "non_persistent",
        "position",
        "producer",
        "sequence_id",
        "started",
    )

    def __init__(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        *,
        dedup: bool,
        non_persistent: bool = False,
    ) -> None:
        self.producer = producer
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.dedup = dedup  # stored with deduplication on: record the outcome in the topic's dedup maps
        self.non_persistent = non_persistent  # counted in the connection's non-persistent in-flight messages
        self.done = False
        self.position: Position | None = None
        self.error: BaseException | None = None
        self.started = time.perf_counter()  # the SEND was handled: publish and storage write latency start

    def __call__(self, position: Position | None, error: BaseException | None) -> None:
        """The add's answer (``PublishCallback``): record it (and, for a stored entry, its storage write
        latency) and release the receipts now in order."""
        self.position = position
        self.error = error
        self.done = True
        if error is None and not self.non_persistent:
            self.producer.topic.counters.storage_write_latency.observe(time.perf_counter() - self.started)
        self.producer.release_receipts()


@dataclass(eq=False, slots=True)
class Producer:
    """A producer attached to a topic. ``producer_name`` is unique per topic."""

    producer_id: int
    producer_name: str
    topic: ProducerTopic
    cnx: ProducerConnection
    user_provided_name: bool
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared  # CommandProducer.producer_access_mode
    request_id: int = 0  # of the PRODUCER command (a WaitForExclusive producer is answered again with it)
    requested_epoch: int | None = None  # CommandProducer.topic_epoch: the epoch a reconnecting holder had
    schema_version: bytes = b""  # PRODUCER_SUCCESS.schema_version: 8-byte version of its schema, empty: none
    _pending: deque[_PendingSend] = field(default_factory=deque)
    msg_in_counter: int = 0
    bytes_in_counter: int = 0
    closed: bool = False

    def publish(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        data: memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
    ) -> None:
        """Append one entry (``data`` = the SEND's bytes after the command, stored verbatim) and schedule its
        receipt. ``num_messages`` counts the messages in the entry (for stats). ``properties`` / ``tag_hash``
        go on the store record (the RocketMQ endpoint's keys, message id and tag hash; none for Pulsar SENDs).

        With deduplication enabled on the topic (semantics.md B4), a definite duplicate is not stored and gets
        a receipt for (-1, -1); an undecidable one (an earlier copy still in flight) gets SEND_ERROR
        PersistenceError, so the client reconnects and resends. Receipts keep send order either way.
        """
        dedup = self.topic.dedup
        if dedup.enabled:
            status = dedup.is_duplicate(self.producer_name, sequence_id, highest_sequence_id)
            if status is not DedupStatus.NOT_DUP:
                op = _PendingSend(self, sequence_id, highest_sequence_id, dedup=False)
                self._pending.append(op)
                if status is DedupStatus.DUP:
                    _later(op, DUPLICATE_POSITION, None)
                else:
                    _later(
                        op,
                        None,
                        PersistenceError(
                            f"cannot tell whether sequence id {sequence_id} of {self.producer_name} is a "
                            "duplicate: an earlier copy is not persisted yet"
                        ),
                    )
                return
        if not self.topic.is_persistent:
            self._publish_non_persistent(sequence_id, highest_sequence_id, num_messages, data)
            return
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(data)
        counters = self.topic.counters
        counters.msg_in += num_messages
        counters.bytes_in += len(data)
        op = _PendingSend(self, sequence_id, highest_sequence_id, dedup=dedup.enabled)
        self._pending.append(op)
        if properties is None and not tag_hash:
            self.topic.publish(data, op)
        else:
            self.topic.publish(data, op, properties=properties, tag_hash=tag_hash)

    def _publish_non_persistent(
        self, sequence_id: int, highest_sequence_id: int, num_messages: int, data: memoryview
    ) -> None:
        """Non-persistent publish: fanned out and answered with (0, 0), or, past the connection's in-flight
        limit, dropped and answered with (-1, -1) (Pulsar ServerCnx ``maxConcurrentNonPersistentMessage``)."""
        cnx = self.cnx
        if cnx.non_persistent_pending >= cnx.max_non_persistent_pending:
            op = _PendingSend(self, sequence_id, highest_sequence_id, dedup=False)
            self._pending.append(op)
            _later(op, DROPPED_POSITION, None)
            return
        cnx.non_persistent_pending += 1
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(data)
        counters = self.topic.counters
        counters.msg_in += num_messages
        counters.bytes_in += len(data)
        # the fan-out runs now; the receipt still goes through the queue so receipts keep send order
        op = _PendingSend(self, sequence_id, highest_sequence_id, dedup=False, non_persistent=True)
        self._pending.append(op)
        self.topic.publish(data, op)

    def release_receipts(self) -> None:
        """Answer the SENDs at the head of the queue whose adds are done, in send order (receipt or
        SEND_ERROR), and record their outcome for deduplication."""
        pending = self._pending
        cnx = self.cnx
        now = time.perf_counter() if pending else 0.0
        publish_latency = self.topic.counters.publish_latency
        while pending and pending[0].done:
            op = pending.popleft()
            cnx.publish_completed()
            if op.non_persistent:
                cnx.non_persistent_pending -= 1
            error = op.error
            if op.dedup:
                dedup = self.topic.dedup
                if error is None:
                    assert op.position is not None
                    dedup.record_persisted(
                        self.producer_name, max(op.sequence_id, op.highest_sequence_id), op.position
                    )
                else:
                    dedup.record_failed(self.producer_name)
            if self.closed:
                continue
            if error is None:
                assert op.position is not None
                cnx.send_receipt(self.producer_id, op.sequence_id, op.highest_sequence_id, op.position)
                publish_latency.observe(now - op.started)
                continue
            status = getattr(error, "status", None)
            if status in _REPLICAS_UNAVAILABLE or status in _STORE_REFUSES:
                # a Pulsar client answers SEND_ERROR by closing the whole connection, consumers included;
                # CLOSE_PRODUCER makes it reconnect this producer alone and resend what has no receipt
                _refusal_log.warning(
                    "%s: %s; closing the producer %s", self.topic.name.full_name, error, self.producer_name
                )
                self.fence()
                continue
            code, text = send_error_of(error)
            cnx.send_send_error(self.producer_id, op.sequence_id, code, text)

    def fence(self) -> None:
        """Disconnect this producer from its client (CLOSE_PRODUCER): fenced, or the backlog quota is
        exceeded; the client reconnects by itself."""
        self.cnx.close_producer(self)

    def grant(self, topic_epoch: int) -> None:
        """This waiting (WaitForExclusive) producer now holds the topic: its client may send."""
        self.cnx.producer_ready(self, topic_epoch)

    def refuse(self, error: BrokerError) -> None:
        """This waiting (WaitForExclusive) producer will not get the topic (fenced out, or its epoch is stale):
        its PRODUCER request is answered with ``error`` and it is dropped."""
        self.cnx.refuse_producer(self, error)

    @property
    def pending_count(self) -> int:
        return len(self._pending)
