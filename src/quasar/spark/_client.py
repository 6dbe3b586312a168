"""The one module that talks to the broker: an adapter over the official ``pulsar-client`` (C++ core) and the
admin REST API. Quasar's own client (issue 5) replaces this file alone; the rest of :mod:`quasar.spark` sees
only :class:`BrokerClient`, :class:`TopicProducer` and the tuples they yield.

What goes over which channel:

| need                          | how                                                                    |
|-------------------------------|------------------------------------------------------------------------|
| partitions of a topic         | admin ``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions``     |
| does a topic exist            | admin ``GET .../{topic}/lastMessageId`` (404: none; never auto-creates) |
| last message id               | admin ``GET .../lastMessageId`` (see below)                            |
| topics of a namespace         | admin ``GET /admin/v2/persistent/{tenant}/{ns}`` and ``.../partitioned`` |
| read a range                  | binary protocol: a non-durable Reader per topic partition              |
| first message at/after a time | Reader ``seek(publish time ms)``                                       |
| write                         | binary protocol: a Producer per (task, topic)                          |

The last message id comes from the admin API because the official Python ``Reader`` does not expose
GET_LAST_MESSAGE_ID and a ``Consumer`` would need a durable subscription; Quasar's client will send
GET_LAST_MESSAGE_ID on the reader instead.

Clients are cached per process (executor Python workers are reused across tasks, reference/spark.md §1.3).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from quasar.spark.errors import (
    BrokerUnavailableError,
    DataLossError,
    OptionError,
    SinkWriteError,
    TopicNotFoundError,
)
from quasar.spark.positions import EARLIEST, ENTRY_END, Position, partition_index, position_before

__all__ = ["BrokerClient", "RawMessage", "TopicProducer"]

log = logging.getLogger("quasar.spark")

#: One message read: (key or None, value bytes, ledgerId, entryId, batchIndex, publish ms, event ms (0 =
#: unset), properties dict, redelivery count, serialized MessageId bytes).
RawMessage = tuple[Any, bytes, int, int, int, int, int, dict, int, bytes]

_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _pulsar():
    try:
        import pulsar
    except ImportError as exc:  # pragma: no cover - the demo extra is a dependency of the connector
        raise OptionError(
            "the 'pulsar-client' package is needed by quasar.spark; pip install pulsar-client"
        ) from exc
    return pulsar


# ---------------------------------------------------------------------------------------------------------
# passthrough options: lower-cased names (Spark lower-cases option keys) -> pulsar-client keyword and type
# ---------------------------------------------------------------------------------------------------------
def _norm(name: str) -> str:
    return name.replace("_", "").replace(".", "").replace("-", "").lower()


_CLIENT_PARAMS = {
    "operationtimeoutseconds": ("operation_timeout_seconds", int),
    "connectiontimeoutms": ("connection_timeout_ms", int),
    "iothreads": ("io_threads", int),
}
_READER_PARAMS = {
    "receiverqueuesize": ("receiver_queue_size", int),
    "readername": ("reader_name", str),
    "subscriptionroleprefix": ("subscription_role_prefix", str),
    "readcompacted": ("is_read_compacted", bool),
    "isreadcompacted": ("is_read_compacted", bool),
}
_PRODUCER_PARAMS = {
    "sendtimeoutmillis": ("send_timeout_millis", int),
    "sendtimeoutms": ("send_timeout_millis", int),
    "compressiontype": ("compression_type", "CompressionType"),
    "maxpendingmessages": ("max_pending_messages", int),
    "maxpendingmessagesacrosspartitions": ("max_pending_messages_across_partitions", int),
    "blockifqueuefull": ("block_if_queue_full", bool),
    "batchingenabled": ("batching_enabled", bool),
    "enablebatching": ("batching_enabled", bool),
    "batchingmaxmessages": ("batching_max_messages", int),
    "batchingmaxallowedsizeinbytes": ("batching_max_allowed_size_in_bytes", int),
    "batchingmaxpublishdelayms": ("batching_max_publish_delay_ms", int),
    "chunkingenabled": ("chunking_enabled", bool),
    "messageroutingmode": ("message_routing_mode", "PartitionsRoutingMode"),
    "lazystartpartitionedproducers": ("lazy_start_partitioned_producers", bool),
    "batchingtype": ("batching_type", "BatchingType"),
}


def _convert(conf: tuple[tuple[str, str], ...], table: dict, prefix: str) -> dict[str, Any]:
    """Map passthrough pairs to pulsar-client keyword arguments; OptionError for unknown keys or values."""
    out: dict[str, Any] = {}
    for key, raw in conf:
        entry = table.get(_norm(key))
        if entry is None:
            valid = ", ".join(sorted({prefix + name for name in table}))
            raise OptionError(f"unknown option {prefix + key!r}; valid: {valid}")
        name, kind = entry
        text = str(raw).strip()
        try:
            if kind is bool:
                if text.lower() not in ("true", "false"):
                    raise ValueError("expected true or false")
                value: Any = text.lower() == "true"
            elif kind is int:
                value = int(text)
            elif kind is str:
                value = text
            else:
                enum = getattr(_pulsar(), kind)
                members = {k.lower(): v for k, v in enum.__members__.items()}
                if text.lower() not in members:
                    raise ValueError(f"expected one of {', '.join(enum.__members__)}")
                value = members[text.lower()]
        except ValueError as exc:
            raise OptionError(f"option {prefix + key!r}: bad value {raw!r}: {exc}") from None
        out[name] = value
    return out


def _is_timeout(exc: BaseException) -> bool:
    return type(exc).__name__ == "Timeout"


class BrokerClient:
    """Picklable handle on one broker: connects lazily, caches the client per process.

    Args:
        service_url: ``pulsar://host:port``.
        admin_url: ``http://host:port`` of the admin REST API.
        client_conf: ``quasar.client.*`` passthrough pairs (lower-cased keys without the prefix).
        timeout_s: admin REST timeout (s).
    """

    def __init__(
        self,
        service_url: str,
        admin_url: str,
        client_conf: tuple[tuple[str, str], ...] = (),
        timeout_s: float = 30.0,
    ) -> None:
        self.service_url = service_url
        self.admin_url = admin_url
        self.client_conf = client_conf
        self.timeout_s = timeout_s
        self._client_kwargs = _convert(client_conf, _CLIENT_PARAMS, "quasar.client.")

    # ------------------------------------------------------------------ plumbing
    def client(self) -> Any:
        """The process-wide ``pulsar.Client`` for this URL and configuration (created on first use)."""
        key = (self.service_url, self.client_conf)
        with _CLIENTS_LOCK:
            existing = _CLIENTS.get(key)
            if existing is None:
                pulsar = _pulsar()
                kwargs = {"operation_timeout_seconds": 30, **self._client_kwargs}
                quiet = logging.getLogger("quasar.spark.pulsar-client")
                quiet.setLevel(logging.ERROR)
                existing = _CLIENTS[key] = pulsar.Client(self.service_url, logger=quiet, **kwargs)
            return existing

    def _admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin REST call: (status, decoded JSON or None). BrokerUnavailableError if unreachable."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.admin_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BrokerUnavailableError(
                f"cannot reach the broker's admin API (option 'admin.url' = {self.admin_url}): {reason}"
            ) from exc
        try:
            return status, (json.loads(raw) if raw.strip() else None)
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    @staticmethod
    def _path(topic: str) -> str:
        rest = topic.split("://", 1)[1]
        return "/admin/v2/persistent/" + "/".join(quote(part, safe="") for part in rest.split("/"))

    # ------------------------------------------------------------------ metadata (driver)
    def topic_partitions(self, topic: str) -> list[str]:
        """Full names of ``topic``'s partitions (``[topic]`` if it is not partitioned).

        Raises:
            TopicNotFoundError: neither a partitioned nor a non-partitioned topic of that name exists.
            BrokerUnavailableError: the admin API cannot be reached.
        """
        status, body = self._admin("GET", self._path(topic) + "/partitions")
        count = body.get("partitions", 0) if status == 200 and isinstance(body, dict) else 0
        if count > 0:
            return [f"{topic}-partition-{i}" for i in range(count)]
        self.last_position(topic)  # raises TopicNotFoundError when missing
        return [topic]

    def list_topics(self, namespace: str) -> list[str]:
        """Topics of ``tenant/namespace`` as full names: partitioned topics once, not their partitions."""
        path = "/admin/v2/persistent/" + "/".join(quote(p, safe="") for p in namespace.split("/"))
        status, partitioned = self._admin("GET", path + "/partitioned")
        status2, plain = self._admin("GET", path)
        if status != 200 or status2 != 200:
            raise TopicNotFoundError(f"cannot list the topics of namespace {namespace!r} (HTTP {status2})")
        names = set(partitioned or [])
        for name in plain or []:
            parent, index = partition_index(name)
            if index < 0 or parent not in names:
                names.add(name if index < 0 else parent)
        return sorted(names)

    def last_position(self, topic_partition: str) -> Position:
        """Position of the last message of one topic partition (:data:`EARLIEST` when it is empty).

        Raises:
            TopicNotFoundError: the topic does not exist (the call never creates it).
        """
        status, body = self._admin("GET", self._path(topic_partition) + "/lastMessageId")
        if status == 404:
            raise TopicNotFoundError(f"topic {topic_partition} does not exist")
        if status != 200 or not isinstance(body, dict):
            raise BrokerUnavailableError(
                f"GET lastMessageId of {topic_partition} answered {status}: {body!r}"
            )
        ledger, entry = int(body.get("ledgerId", -1)), int(body.get("entryId", -1))
        if ledger < 0 or entry < 0:
            return EARLIEST
        # The last message is the last of its entry: "through the end of entry E" (batch index -1). This also
        # covers brokers that report -1 for a one-message batch, and lets commit() acknowledge the entry.
        return Position(ledger, entry, -1)

    def set_deduplication(self, namespace: str, enabled: bool) -> int:
        """``POST /admin/v2/namespaces/{tenant}/{ns}/deduplication``; returns the HTTP status."""
        status, _ = self._admin("POST", f"/admin/v2/namespaces/{namespace}/deduplication", enabled)
        return status

    # ------------------------------------------------------------------ reading (driver and executors)
    def _reader(
        self, topic_partition: str, start: Position, reader_conf: tuple, *, inclusive_entry: bool
    ) -> Any:
        pulsar = _pulsar()
        kwargs = {"receiver_queue_size": 2000, **_convert(reader_conf, _READER_PARAMS, "quasar.reader.")}
        if start.is_earliest:
            message_id = pulsar.MessageId.earliest
        else:
            message_id = pulsar.MessageId(-1, start.ledger_id, max(start.entry_id, 0), -1)
        try:
            return self.client().create_reader(
                topic_partition, message_id, start_message_id_inclusive=inclusive_entry, **kwargs
            )
        except pulsar.PulsarException as exc:
            raise BrokerUnavailableError(
                f"cannot open a reader on {topic_partition} at {self.service_url} (option 'service.url'): {exc}"
            ) from exc

    def read_range(
        self,
        topic_partition: str,
        start: Position,
        end: Position,
        *,
        poll_timeout_ms: int,
        fail_on_data_loss: bool,
        reader_conf: tuple = (),
    ) -> Iterator[RawMessage]:
        """Yield the messages ``start < id <= end`` of one topic partition, batch messages unpacked.

        The reader starts at ``start``'s entry *inclusive* and drops what was already consumed, so the first
        message received proves the start was still there: if it is not ``start``'s entry (or entry 0 of
        ``start``'s ledger for a position before an entry 0), the range between was trimmed.

        Raises:
            DataLossError: the start was trimmed, or no message arrived for ``poll_timeout_ms`` before ``end``
                was reached (only when ``fail_on_data_loss``; otherwise a warning is logged and reading stops
                or goes on past the gap).
            BrokerUnavailableError: the reader cannot be opened.
        """
        if end.key <= start.key:
            return
        reader = self._reader(topic_partition, start, reader_conf, inclusive_entry=True)
        raw_reader = reader._reader  # the C++ reader: skips the Python wrapper per message
        start_key, end_key, end_entry = start.key, end.key, (end.ledger_id, end.entry_id)
        expect = None if start.is_earliest else (start.ledger_id, max(start.entry_id, 0))
        try:
            while True:
                try:
                    msg = raw_reader.read_next(poll_timeout_ms)
                except Exception as exc:
                    if not _is_timeout(exc):
                        raise BrokerUnavailableError(f"reading {topic_partition} failed: {exc}") from exc
                    text = (
                        f"{topic_partition}: no message for {poll_timeout_ms} ms (option 'pollTimeoutMs') "
                        f"before the end position {end} was reached"
                    )
                    if fail_on_data_loss:
                        raise DataLossError(text + "; set failOnDataLoss=false to skip") from None
                    log.warning("%s; skipping the rest of the range", text)
                    return
                mid = msg.message_id()
                ledger, entry, batch = mid.ledger_id(), mid.entry_id(), mid.batch_index()
                if expect is not None:
                    if (ledger, entry) != expect:
                        text = (
                            f"{topic_partition}: messages after {start} are gone (first readable message is "
                            f"{ledger}:{entry}:{batch}); they were trimmed or the topic was recreated"
                        )
                        if fail_on_data_loss:
                            raise DataLossError(text + "; set failOnDataLoss=false to skip them")
                        log.warning("%s; skipping them", text)
                    expect = None
                key = (ledger, entry, batch if batch >= 0 else ENTRY_END)
                if key <= start_key:
                    continue
                if key > end_key:
                    return
                partition_key = msg.partition_key()
                yield (
                    partition_key or None,
                    msg.data(),
                    ledger,
                    entry,
                    batch,
                    msg.publish_timestamp(),
                    msg.event_timestamp(),
                    msg.properties(),
                    msg.redelivery_count(),
                    mid.serialize(),
                )
                if key >= end_key:
                    return
                if (ledger, entry) == end_entry and not raw_reader.has_message_available():
                    return  # end's entry is done (a 1-message batch entry may be reported with batch -1)
        finally:
            reader.close()

    def position_at_time(
        self, topic_partition: str, publish_time_ms: int, poll_timeout_ms: int = 5000
    ) -> Position:
        """Consumed-through position just before the first message published at or after ``publish_time_ms``
        (the last message's position when there is none)."""
        last = self.last_position(topic_partition)
        if last.is_earliest:
            return EARLIEST
        reader = self._reader(topic_partition, EARLIEST, (), inclusive_entry=True)
        try:
            reader.seek(int(publish_time_ms))
            try:
                msg = reader._reader.read_next(poll_timeout_ms)
            except Exception as exc:
                if _is_timeout(exc):
                    return last
                raise BrokerUnavailableError(f"seeking {topic_partition} by time failed: {exc}") from exc
            mid = msg.message_id()
            return position_before(mid.ledger_id(), mid.entry_id(), mid.batch_index())
        finally:
            reader.close()

    def peek_position(
        self, topic_partition: str, start: Position, end: Position, count: int, poll_timeout_ms: int
    ) -> Position:
        """Position of the ``count``-th message after ``start`` (``end`` if fewer are in ``(start, end]``).
        Used for ``maxMessagesPerTrigger``: it reads the ids of up to ``count`` messages on the driver."""
        seen = 0
        last = start
        for message in self.read_range(
            topic_partition, start, end, poll_timeout_ms=poll_timeout_ms, fail_on_data_loss=False
        ):
            seen += 1
            last = Position(message[2], message[3], message[4])
            if seen >= count:
                return last
        return end if seen < count else last

    @staticmethod
    def position_of_serialized(raw: bytes) -> tuple[int, int, int, int]:
        """``(partition, ledgerId, entryId, batchIndex)`` of a serialized MessageId (the ``messageId`` column).

        Raises:
            OptionError: the bytes are not a serialized MessageId.
        """
        pulsar = _pulsar()
        try:
            mid = pulsar.MessageId.deserialize(raw)
        except Exception as exc:
            raise OptionError(f"{raw!r} is not a serialized MessageId: {exc}") from None
        return mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()

    # ------------------------------------------------------------------ retention (driver)
    def advance_subscription(self, topic_partition: str, subscription: str, position: Position) -> None:
        """Move the durable ``subscription`` of one topic partition to ``position`` (a cumulative ack through
        the last whole entry consumed; created at the earliest position if missing), so the broker may trim
        what it no longer has to keep. The consumer is closed at once, which flushes the ack (the client
        groups acks, and the Spark process running ``commit`` may be killed any time). Best effort: failures
        are logged, never raised (the stream's positions live in Spark's checkpoint, not here)."""
        pulsar = _pulsar()
        entry = position.entry_id if position.batch_index < 0 else position.entry_id - 1
        try:
            consumer = self.client().subscribe(
                topic_partition,
                subscription,
                consumer_type=pulsar.ConsumerType.Exclusive,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=0,  # nothing is dispatched to it: it only acknowledges
            )
            try:
                if not position.is_earliest and entry >= 0:
                    _, index = partition_index(topic_partition)
                    consumer.acknowledge_cumulative(pulsar.MessageId(index, position.ledger_id, entry, -1))
            finally:
                consumer.close()
        except Exception as exc:
            log.warning(
                "could not move subscription %s on %s to %s: %s", subscription, topic_partition, position, exc
            )

    # ------------------------------------------------------------------ writing (executors)
    def producer(self, topic: str, producer_conf: tuple, producer_name: str | None = None) -> TopicProducer:
        """A producer on ``topic`` (``quasar.producer.*`` passthrough applied)."""
        kwargs = _convert(producer_conf, _PRODUCER_PARAMS, "quasar.producer.")
        kwargs.setdefault("block_if_queue_full", True)
        kwargs.setdefault("batching_enabled", True)
        kwargs.setdefault("batching_max_publish_delay_ms", 5)
        if producer_name is not None:
            kwargs["producer_name"] = producer_name
            if kwargs["batching_enabled"]:
                # The official C++ client does not carry the caller's sequence ids through a batch (the batch
                # is judged by one id), so deduplication needs one entry per message. Quasar's own client
                # will keep batching with highest_sequence_id.
                log.info("batching is off for the exactly-once producer %s", producer_name)
                kwargs["batching_enabled"] = False
        pulsar = _pulsar()
        try:
            return TopicProducer(self.client().create_producer(topic, **kwargs), topic)
        except pulsar.PulsarException as exc:
            raise BrokerUnavailableError(
                f"cannot create a producer on {topic} at {self.service_url} (option 'service.url'): {exc}"
            ) from exc


class TopicProducer:
    """One producer; :meth:`send` is asynchronous, :meth:`flush` waits for every receipt and raises the first
    failure as SinkWriteError."""

    __slots__ = ("_failures", "_ok", "_producer", "_send", "sent", "topic")

    def __init__(self, producer: Any, topic: str) -> None:
        self._producer = producer
        self._send: Callable = producer.send_async
        self._ok = _pulsar().Result.Ok
        self._failures: list[str] = []
        self.topic = topic
        self.sent = 0

    def _callback(self, result: Any, _message_id: Any) -> None:
        if result != self._ok:
            self._failures.append(str(result))

    def send(
        self,
        value: bytes,
        key: str | None,
        properties: dict | None,
        event_time_ms: int | None,
        sequence_id: int | None,
    ) -> None:
        """Queue one message (value bytes, key, properties, event time ms, sequence id or None)."""
        kwargs: dict[str, Any] = {}
        if key is not None:
            kwargs["partition_key"] = key
        if properties:
            kwargs["properties"] = properties
        if event_time_ms is not None:
            kwargs["event_timestamp"] = event_time_ms
        if sequence_id is not None:
            kwargs["sequence_id"] = sequence_id
        self._send(value, self._callback, **kwargs)
        self.sent += 1

    def flush(self) -> None:
        """Wait for all receipts; raises SinkWriteError if any send failed."""
        try:
            self._producer.flush()
        except Exception as exc:
            raise SinkWriteError(f"flushing messages to {self.topic} failed: {exc}") from exc
        if self._failures:
            raise SinkWriteError(
                f"{len(self._failures)} messages to {self.topic} were not acknowledged: {self._failures[0]}"
            )

    def close(self) -> None:
        try:
            self._producer.close()
        except Exception as exc:  # closing after a failure must not hide the failure
            log.warning("closing the producer on %s failed: %s", self.topic, exc)
