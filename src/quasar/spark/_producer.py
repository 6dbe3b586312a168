"""The sink's producer adapter over :class:`quasar.client.Producer` (the blocking facade), created by
:meth:`quasar.spark._client.BrokerClient.producer`.

Two ways to send: :meth:`TopicProducer.send` queues one message (the message-by-message path: chunking, or
batching off), :meth:`TopicProducer.send_entry` queues a pre-built batch entry (the bulk path,
:mod:`quasar.spark.sink_bulk`) with at most :data:`IN_FLIGHT_ENTRIES` entries awaiting their receipts at a time.
:meth:`TopicProducer.flush` waits for every receipt and raises the first failure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from quasar.client import ClientError
from quasar.errors import QuasarError
from quasar.spark.errors import SinkWriteError

__all__ = ["IN_FLIGHT_ENTRIES", "TopicProducer"]

log = logging.getLogger("quasar.spark")

#: Batch entries one producer keeps in flight (sent, no receipt yet) at most; ``send_entry`` waits beyond.
IN_FLIGHT_ENTRIES = 64


class TopicProducer:
    """One producer; :meth:`send` is asynchronous, :meth:`flush` waits for every receipt and raises the first
    failure as SinkWriteError."""

    __slots__ = (
        "_callback",
        "_entry_callback",
        "_failures",
        "_in_flight",
        "_producer",
        "_send",
        "sent",
        "topic",
    )

    def __init__(self, producer: Any, topic: str) -> None:
        self._producer = producer
        self._send: Callable[..., None] = producer.send_async
        self._failures: list[str] = []
        self._callback = self._on_receipt
        self._entry_callback = self._on_entry_receipt
        self._in_flight = threading.BoundedSemaphore(IN_FLIGHT_ENTRIES)
        self.topic = topic
        self.sent = 0

    def _on_receipt(self, error: Any, _message_id: Any) -> None:
        # quasar.client passes None on success, else the ClientError (the loop thread runs this)
        if error is not None:
            self._failures.append(str(error))

    def _on_entry_receipt(self, error: Any, _message_id: Any) -> None:
        if error is not None:
            self._failures.append(str(error))
        self._in_flight.release()

    @property
    def num_partitions(self) -> int:
        """Partitions of the topic (1 when it is not partitioned)."""
        return int(self._producer.num_partitions())

    def next_sequence_id(self, partition: int) -> int:
        """The sequence id the producer of ``partition`` would give its next message."""
        return int(self._producer.next_sequence_id(partition))

    def partition_of(self, key: str) -> int:
        """The partition the producer's router gives messages with partition key ``key`` (the hashing scheme
        of ``quasar.producer.hashingScheme``, BoostHash by default, as the official Python client)."""
        return int(self._producer.choose_partition(key))

    def send_entry(
        self,
        partition: int,
        payload: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        partition_key: str | None,
    ) -> None:
        """Queue one pre-built batch entry (uncompressed payload of ``num_messages`` items, their sequence ids
        ``sequence_id`` .. ``highest_sequence_id``) on ``partition``; waits while :data:`IN_FLIGHT_ENTRIES`
        entries await their receipts.

        Raises:
            SinkWriteError: an earlier entry failed (fail fast), or the producer refused the entry.
        """
        if self._failures:
            raise SinkWriteError(
                f"{len(self._failures)} entries to {self.topic} were not acknowledged: {self._failures[0]}"
            )
        self._in_flight.acquire()
        try:
            self._producer.send_entry(
                partition, payload, num_messages, sequence_id, highest_sequence_id, partition_key,
                self._entry_callback,
            )  # fmt: skip
        except (IndexError, ClientError) as exc:
            self._in_flight.release()
            raise SinkWriteError(f"cannot send an entry to {self.topic}: {exc}") from exc
        self.sent += num_messages

    def send(
        self,
        value: bytes,
        key: str | None,
        properties: dict[str, str] | None,
        event_time_ms: int | None,
        sequence_id: int | None,
    ) -> None:
        """Queue one message (value bytes, key, properties, event time ms, sequence id or None).

        Raises:
            SinkWriteError: the message is refused before sending (bad value type, producer closed).
        """
        kwargs: dict[str, Any] = {}
        if key is not None:
            kwargs["partition_key"] = key
        if properties:
            kwargs["properties"] = properties
        if event_time_ms is not None:
            kwargs["event_timestamp"] = event_time_ms
        if sequence_id is not None:
            kwargs["sequence_id"] = sequence_id
        try:
            self._send(value, self._callback, **kwargs)
        except (TypeError, ValueError, ClientError) as exc:
            raise SinkWriteError(f"cannot send a message to {self.topic}: {exc}") from exc
        self.sent += 1

    def flush(self) -> None:
        """Wait for all receipts; raises SinkWriteError if any send failed."""
        try:
            self._producer.flush()
        except QuasarError as exc:
            raise SinkWriteError(f"flushing messages to {self.topic} failed: {exc}") from exc
        if self._failures:
            raise SinkWriteError(
                f"{len(self._failures)} messages to {self.topic} were not acknowledged: {self._failures[0]}"
            )

    def close(self) -> None:
        try:
            self._producer.close()
        except QuasarError as exc:  # closing after a failure must not hide the failure
            log.warning("closing the producer on %s failed: %s", self.topic, exc)
