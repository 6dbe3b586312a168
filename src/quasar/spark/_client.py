"""The one module that talks to the broker: an adapter over Quasar's own client (:mod:`quasar.client`, the
blocking :class:`quasar.client.Client`) and the admin REST API. The rest of :mod:`quasar.spark` sees only
:class:`BrokerClient`, :class:`TopicProducer` and the tuples they yield.

What goes over which channel:

| need                          | how                                                                      |
|-------------------------------|--------------------------------------------------------------------------|
| partitions of a topic         | admin ``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions``       |
| does a topic exist            | admin ``GET .../{topic}/lastMessageId`` (404: none; never auto-creates)   |
| last message id               | admin ``GET .../lastMessageId`` (see below)                              |
| topics of a namespace         | admin ``GET /admin/v2/persistent/{tenant}/{ns}`` and ``.../partitioned``   |
| read a range (executors)      | ``open_reader(deliver_entries=True)``: whole entries, decoded in bulk by  |
|                               | :mod:`quasar.spark.entry_scan`; ``read_range`` (messages, in chunks of    |
|                               | ``read_batch``) for the driver's ``maxMessagesPerTrigger`` peek          |
| end of the last entry         | the batch size carried in each MessageId; ``has_message_available``      |
|                               | (GET_LAST_MESSAGE_ID) only when it is unknown                            |
| first message at/after a time | Reader ``seek(publish time ms)``                                         |
| move a retention subscription | binary protocol: Exclusive consumer, ``acknowledge_cumulative``, close   |
| write                         | binary protocol: a Producer per (task, topic), ``send_async``            |

The last message id and the existence check stay on the admin API: :class:`quasar.client.Reader` does not
expose GET_LAST_MESSAGE_ID (only its internal consumer does, through a subscription), and any reader or
consumer would SUBSCRIBE, which auto-creates a missing topic; one admin GET answers both needs at once.

Clients are cached per process (executor Python workers are reused across tasks, reference/spark.md §1.3);
the cache key includes the process id, so a forked worker never reuses its parent's event-loop thread.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from quasar.client import (
    EARLIEST as EARLIEST_ID,
)
from quasar.client import (
    Client,
    ClientError,
    ConsumerType,
    InitialPosition,
    MessageId,
    ReceiveTimeoutError,
)
from quasar.errors import QuasarError
from quasar.spark._producer import TopicProducer
from quasar.spark.errors import (
    BrokerUnavailableError,
    DataLossError,
    OptionError,
    TopicNotFoundError,
)
from quasar.spark.passthrough import (
    PRODUCER_PARAMS,
    READER_PARAMS,
    admin_headers,
    admin_ssl_context,
    client_kwargs,
    convert,
)
from quasar.spark.positions import EARLIEST, ENTRY_END, Position, partition_index, position_before

__all__ = ["BrokerClient", "RawMessage", "TopicProducer"]

log = logging.getLogger("quasar.spark")

#: One message read: (key or None, value bytes, ledgerId, entryId, batchIndex, publish ms, event ms (0 =
#: unset), properties dict, redelivery count, serialized MessageId bytes).
RawMessage = tuple[Any, bytes, int, int, int, int, int, dict[str, str], int, bytes]

_CLIENTS: dict[tuple[int, str, tuple[tuple[str, str], ...]], Client] = {}
_CLIENTS_LOCK = threading.Lock()

#: Messages taken from a reader per loop round trip at most (its receiver queue bounds it too).
_CHUNK = 1000
#: Receiver queue (flow permits, counted in messages) of an entry reader: ~50 batches of 1000 in flight.
_ENTRY_QUEUE = 50_000


def _close(reader: Any, topic_partition: str) -> None:
    try:
        reader.close()
    except ClientError as exc:
        log.info("closing the reader on %s: %s", topic_partition, exc)


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
        client_kwargs(client_conf)  # checked on the driver: a bad option fails the query, not a task
        # per process: client kwargs (an authentication object), admin headers and TLS context (not picklable)
        self._resolved: tuple[dict[str, Any], dict[str, str], ssl.SSLContext | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_resolved"] = None  # rebuilt in the process that unpickles it
        return state

    def _settings(self) -> tuple[dict[str, Any], dict[str, str], ssl.SSLContext | None]:
        """(client kwargs, admin headers, admin TLS context or None), built once per process from the options."""
        if self._resolved is None:
            kwargs = client_kwargs(self.client_conf)
            https = self.admin_url.startswith("https://")
            self._resolved = (
                kwargs,
                admin_headers(kwargs.get("authentication")),
                admin_ssl_context(kwargs) if https else None,
            )
        return self._resolved

    # ------------------------------------------------------------------ plumbing
    def client(self) -> Client:
        """The process-wide :class:`quasar.client.Client` for this URL and configuration (created on first
        use; BrokerUnavailableError / OptionError if it cannot be)."""
        key = (os.getpid(), self.service_url, self.client_conf)
        with _CLIENTS_LOCK:
            existing = _CLIENTS.get(key)
            if existing is None:
                kwargs = {"operation_timeout_seconds": 30, **self._settings()[0]}
                try:
                    existing = _CLIENTS[key] = Client(self.service_url, **kwargs)
                except (TypeError, ValueError) as exc:
                    raise OptionError(f"bad client option (quasar.client.*): {exc}") from None
                except ClientError as exc:
                    raise BrokerUnavailableError(
                        f"cannot connect to {self.service_url} (option 'service.url'): {exc}"
                    ) from exc
            return existing

    def _admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin REST call: (status, decoded JSON or None). BrokerUnavailableError if unreachable."""
        data = None if body is None else json.dumps(body).encode()
        _, auth_headers, context = self._settings()
        headers = {"Content-Type": "application/json", **auth_headers}
        request = urllib.request.Request(self.admin_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as response:
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
    def open_reader(
        self,
        topic_partition: str,
        start: Position,
        reader_conf: tuple[tuple[str, str], ...],
        *,
        inclusive_entry: bool,
        deliver_entries: bool = False,
    ) -> Any:
        """A non-durable :class:`quasar.client.Reader` at ``start``'s entry (OptionError for bad
        ``quasar.reader.*`` values, BrokerUnavailableError when it cannot be opened); ``deliver_entries``: one
        that hands out whole entries (:class:`quasar.client.StoredEntry`) with a larger receiver queue."""
        queue = _ENTRY_QUEUE if deliver_entries else 2000
        kwargs = {"receiver_queue_size": queue, **convert(reader_conf, READER_PARAMS, "quasar.reader.")}
        if deliver_entries:
            kwargs["deliver_entries"] = True
        message_id = EARLIEST_ID if start.is_earliest else MessageId(start.ledger_id, max(start.entry_id, 0))
        client = self.client()
        try:
            return client.create_reader(
                topic_partition, message_id, start_message_id_inclusive=inclusive_entry, **kwargs
            )
        except (TypeError, ValueError) as exc:
            raise OptionError(f"bad reader option (quasar.reader.*): {exc}") from None
        except ClientError as exc:
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
        reader_conf: tuple[tuple[str, str], ...] = (),
    ) -> Iterator[RawMessage]:
        """Yield the messages ``start < id <= end`` of one topic partition, batch messages unpacked.

        The reader starts at ``start``'s entry *inclusive* and drops what was already consumed, so the first
        message received proves the start was still there: if it is not ``start``'s entry (or entry 0 of
        ``start``'s ledger for a position before an entry 0), the range between was trimmed. Messages are
        taken from the reader's queue in chunks of up to 1000, one hop to the client's event loop per chunk.
        Each row's ``messageId`` is ``MessageId.serialize()`` of the message's id (the official client's format).

        Raises:
            DataLossError: the start was trimmed, or no message arrived for ``poll_timeout_ms`` before ``end``
                was reached (only when ``fail_on_data_loss``; otherwise a warning is logged and reading stops
                or goes on past the gap).
            BrokerUnavailableError: the reader cannot be opened or fails.
        """
        if end.key <= start.key:
            return
        reader = self.open_reader(topic_partition, start, reader_conf, inclusive_entry=True)
        try:
            yield from _RangeScan(reader, topic_partition, start, end, poll_timeout_ms, fail_on_data_loss)
        finally:
            _close(reader, topic_partition)

    def position_at_time(
        self, topic_partition: str, publish_time_ms: int, poll_timeout_ms: int = 5000
    ) -> Position:
        """Consumed-through position just before the first message published at or after ``publish_time_ms``
        (the last message's position when there is none)."""
        last = self.last_position(topic_partition)
        if last.is_earliest:
            return EARLIEST
        reader = self.open_reader(topic_partition, EARLIEST, (), inclusive_entry=True)
        try:
            reader.seek(int(publish_time_ms))
            mid = reader.read_next(poll_timeout_ms).message_id()
        except ReceiveTimeoutError:
            return last
        except ClientError as exc:
            raise BrokerUnavailableError(f"seeking {topic_partition} by time failed: {exc}") from exc
        finally:
            _close(reader, topic_partition)
        return position_before(mid.ledger_id, mid.entry_id, mid.batch_index)

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
        """``(partition, ledgerId, entryId, batchIndex)`` of a serialized MessageId (the ``messageId`` column;
        the official client's ``MessageId.serialize()`` bytes are the same format).

        Raises:
            OptionError: the bytes are not a serialized MessageId.
        """
        try:
            mid = MessageId.deserialize(bytes(raw))
        except (QuasarError, TypeError, ValueError) as exc:
            raise OptionError(f"{raw!r} is not a serialized MessageId: {exc}") from None
        return mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index

    # ------------------------------------------------------------------ retention (driver)
    def advance_subscription(self, topic_partition: str, subscription: str, position: Position) -> None:
        """Move the durable ``subscription`` of one topic partition to ``position`` (a cumulative ack through
        the last whole entry consumed; created at the earliest position if missing), so the broker may trim
        what it no longer has to keep. The consumer is closed at once, which flushes the ack (the client
        groups acks, and the Spark process running ``commit`` may be killed any time). Best effort: failures
        are logged, never raised (the stream's positions live in Spark's checkpoint, not here)."""
        entry = position.entry_id if position.batch_index < 0 else position.entry_id - 1
        try:
            consumer = self.client().subscribe(
                topic_partition,
                subscription,
                consumer_type=ConsumerType.Exclusive,
                initial_position=InitialPosition.Earliest,
                receiver_queue_size=0,  # nothing is dispatched to it: it only acknowledges
            )
            try:
                if not position.is_earliest and entry >= 0:
                    _, index = partition_index(topic_partition)
                    consumer.acknowledge_cumulative(MessageId(position.ledger_id, entry, index, -1))
            finally:
                consumer.close()
        except (QuasarError, TypeError, ValueError, OSError) as exc:
            log.warning(
                "could not move subscription %s on %s to %s: %s", subscription, topic_partition, position, exc
            )

    # ------------------------------------------------------------------ writing (executors)
    def producer(
        self,
        topic: str,
        producer_conf: tuple[tuple[str, str], ...],
        producer_name: str | None = None,
        *,
        bulk: bool = False,
    ) -> TopicProducer:
        """A producer on ``topic`` (``quasar.producer.*`` passthrough applied). ``bulk``: the caller sends
        pre-built batch entries (:meth:`TopicProducer.send_entry`), so the producer's own batcher is off.

        Raises:
            OptionError: a passthrough value quasar.client rejects (e.g. chunking together with batching).
            BrokerUnavailableError: the producer cannot be created.
        """
        kwargs = convert(producer_conf, PRODUCER_PARAMS, "quasar.producer.")
        kwargs.setdefault("block_if_queue_full", True)
        kwargs.setdefault("batching_enabled", not kwargs.get("chunking_enabled", False))
        kwargs.setdefault("batching_max_publish_delay_ms", 5)
        if bulk:
            kwargs["batching_enabled"] = False
        if producer_name is not None:
            kwargs["producer_name"] = producer_name
            if kwargs["batching_enabled"]:
                # Broker-side deduplication judges a batch entry by one sequence id, so the exactly-once
                # producer sends one entry per message (its sequence ids are the caller's, per message).
                log.info("batching is off for the exactly-once producer %s", producer_name)
                kwargs["batching_enabled"] = False
        client = self.client()
        try:
            return TopicProducer(client.create_producer(topic, **kwargs), topic)
        except (TypeError, ValueError) as exc:
            raise OptionError(f"bad producer option (quasar.producer.*): {exc}") from None
        except ClientError as exc:
            raise BrokerUnavailableError(
                f"cannot create a producer on {topic} at {self.service_url} (option 'service.url'): {exc}"
            ) from exc


class _RangeScan:
    """The messages ``start < id <= end`` of one open reader (see :meth:`BrokerClient.read_range`); per-entry
    checks are done once per entry, not per message."""

    def __init__(
        self,
        reader: Any,
        topic_partition: str,
        start: Position,
        end: Position,
        poll_timeout_ms: int,
        fail_on_data_loss: bool,
    ) -> None:
        self._reader = reader
        self._topic_partition = topic_partition
        self._start = start
        self._end = end
        self._poll_timeout_ms = poll_timeout_ms
        self._fail_on_data_loss = fail_on_data_loss
        #: the entry the first message must come from (None: nothing to check)
        self._expect = None if start.is_earliest else (start.ledger_id, max(start.entry_id, 0))

    def __iter__(self) -> Iterator[RawMessage]:
        reader, end = self._reader, self._end
        start_key, end_key = self._start.key, end.key
        start_entry, end_entry = start_key[:2], end_key[:2]
        cur_ledger = cur_entry = None  # entry of the previous message: per-entry work is done once per entry
        at_start = at_end = False
        size = 0
        while True:
            chunk = self._next_chunk()
            if not chunk:
                return
            last = chunk[-1]
            for msg in chunk:
                mid = msg.message_id()
                ledger, entry, batch = mid.ledger_id, mid.entry_id, mid.batch_index
                if entry != cur_entry or ledger != cur_ledger:
                    cur_ledger, cur_entry = ledger, entry
                    current = (ledger, entry)
                    self._check_first_entry(current, batch)
                    if current > end_entry:
                        return
                    at_start, at_end = current <= start_entry, current == end_entry
                    size = mid.batch_size
                if at_start and (ledger, entry, batch if batch >= 0 else ENTRY_END) <= start_key:
                    continue
                if at_end and (ledger, entry, batch if batch >= 0 else ENTRY_END) > end_key:
                    return
                yield (
                    msg.partition_key() or None,
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
                if at_end:
                    # end's entry is done at end's message or at the entry's last one: the batch size tells,
                    # else (size unknown) ask the broker whether anything follows once the chunk is used up
                    # (a later message there would be past the end anyway)
                    if batch < 0 or (size > 0 and batch >= size - 1) or batch == end.batch_index:
                        return
                    if size <= 0 and msg is last and not reader.has_message_available():
                        return

    def _next_chunk(self) -> list[Any]:
        """Up to 1000 queued messages; [] when none came for ``poll_timeout_ms`` (DataLossError if that is
        not allowed, else a warning and the end of the scan).

        Raises:
            BrokerUnavailableError: reading failed. DataLossError: see above.
        """
        try:
            chunk: list[Any] = self._reader.read_batch(_CHUNK, self._poll_timeout_ms)
        except ClientError as exc:
            raise BrokerUnavailableError(f"reading {self._topic_partition} failed: {exc}") from exc
        if not chunk:
            text = (
                f"{self._topic_partition}: no message for {self._poll_timeout_ms} ms (option 'pollTimeoutMs') "
                f"before the end position {self._end} was reached"
            )
            if self._fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to skip")
            log.warning("%s; skipping the rest of the range", text)
        return chunk

    def _check_first_entry(self, current: tuple[int, int], batch: int) -> None:
        """The first message read must come from the start's entry, else the messages between were trimmed.

        Raises:
            DataLossError: they were, and ``fail_on_data_loss``.
        """
        expect = self._expect
        if expect is None:
            return
        self._expect = None
        if current != expect:
            text = (
                f"{self._topic_partition}: messages after {self._start} are gone (first readable message is "
                f"{current[0]}:{current[1]}:{batch}); they were trimmed or the topic was recreated"
            )
            if self._fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipping them", text)
