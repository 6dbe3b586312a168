"""The executors' bulk read of one range: whole stored entries over the binary protocol, decoded in bulk.

Transport: a non-durable reader per input partition, as the message path (``BrokerClient.read_range``), but
created with ``deliver_entries`` and a receiver queue of 50,000 permits (Pulsar counts permits in messages,
so that is about fifty batches of 1000 in flight): the broker dispatches the stored entries as they are
(no re-encoding), the client checks, decompresses and reassembles them as for any consumer, and queues one
:class:`quasar.client.StoredEntry` per entry. This module takes them in chunks of up to 1000 entries per
hop to the client's event loop and groups them into calls of the compiled decoder
(:func:`quasar.spark.columns.entries_to_batch`) of about :data:`~quasar.spark.schema.ARROW_BATCH_ROWS`
messages each.

The range rules are the message path's (:class:`quasar.spark._client._RangeScan`): the reader starts at the
start's entry *inclusive*, and the first entry received must be that entry, else the range between was
trimmed (DataLossError with ``failOnDataLoss``, else a warning); the scan ends after the end's entry (or at
the first entry past it); no entry for ``pollTimeoutMs`` before the end is data loss too. Messages of the
first and last entry outside ``(start, end]`` are dropped by the decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from quasar.client import ClientError
from quasar.spark._client import BrokerClient
from quasar.spark.columns import entries_to_batch
from quasar.spark.errors import BrokerUnavailableError, DataLossError
from quasar.spark.positions import Position, partition_index
from quasar.spark.schema import ARROW_BATCH_ROWS

__all__ = ["read_batches", "scan_entries"]

log = logging.getLogger("quasar.spark")

#: Entries taken from the reader per hop to the client's event loop at most.
_ENTRIES_PER_READ = 1000
#: Payload bytes after which a group is decoded even when it holds fewer rows (bounds a group's memory).
_GROUP_BYTES = 32 << 20

Entry = tuple[int, int, bytes, bytes, int]


def scan_entries(
    client: BrokerClient,
    topic_partition: str,
    start: Position,
    end: Position,
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    reader_conf: tuple[tuple[str, str], ...] = (),
    rows: int = ARROW_BATCH_ROWS,
) -> Iterator[list[Entry]]:
    """Groups of ``(ledgerId, entryId, metadata, payload, redelivery)`` covering ``(start, end]`` of one topic
    partition, each of about ``rows`` messages (or 32 MiB of payload), whole entries, in order.

    Raises:
        DataLossError: see the module docstring (only with ``fail_on_data_loss``; else a warning).
        BrokerUnavailableError: the reader cannot be opened or fails.
    """
    if end.key <= start.key:
        return
    reader = client.open_reader(
        topic_partition, start, reader_conf, inclusive_entry=True, deliver_entries=True
    )
    try:
        yield from _scan(reader, topic_partition, start, end, poll_timeout_ms, fail_on_data_loss, rows)
    finally:
        try:
            reader.close()
        except ClientError as exc:
            log.info("closing the reader on %s: %s", topic_partition, exc)


def _scan(
    reader: Any, topic_partition: str, start: Position, end: Position, poll_timeout_ms: int,
    fail_on_data_loss: bool, rows: int,
) -> Iterator[list[Entry]]:  # fmt: skip
    expect = None if start.is_earliest else (start.ledger_id, max(start.entry_id, 0))
    end_entry = end.key[:2]
    group: list[Entry] = []
    group_rows = group_bytes = 0
    done = False
    while not done:
        try:
            received = reader.read_entries(_ENTRIES_PER_READ, poll_timeout_ms)
        except ClientError as exc:
            raise BrokerUnavailableError(f"reading {topic_partition} failed: {exc}") from exc
        if not received:
            text = (
                f"{topic_partition}: no message for {poll_timeout_ms} ms (option 'pollTimeoutMs') "
                f"before the end position {end} was reached"
            )
            if fail_on_data_loss:
                raise DataLossError(text + "; set failOnDataLoss=false to skip")
            log.warning("%s; skipping the rest of the range", text)
            break
        for item in received:
            current = (item.ledger_id, item.entry_id)
            if expect is not None:
                _check_first(topic_partition, start, expect, current, fail_on_data_loss)
                expect = None
            if current > end_entry:
                done = True
                break
            group.append((item.ledger_id, item.entry_id, item.metadata, item.payload, item.redelivery_count))
            group_rows += item.num_messages
            group_bytes += len(item.payload)
            if group_rows >= rows or group_bytes >= _GROUP_BYTES:
                yield group
                group, group_rows, group_bytes = [], 0, 0
            if current == end_entry:
                done = True
                break
    if group:
        yield group


def _check_first(
    topic_partition: str, start: Position, expect: tuple[int, int], current: tuple[int, int], fail: bool
) -> None:
    """The first entry read must be the start's, else the messages between were trimmed.

    Raises:
        DataLossError: they were, and ``fail``.
    """
    if current != expect:
        text = (
            f"{topic_partition}: messages after {start} are gone (first readable entry is "
            f"{current[0]}:{current[1]}); they were trimmed or the topic was recreated"
        )
        if fail:
            raise DataLossError(text + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping them", text)


def read_batches(
    client: BrokerClient,
    topic_partition: str,
    start: Position,
    end: Position,
    *,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    reader_conf: tuple[tuple[str, str], ...] = (),
) -> Iterator[Any]:
    """Arrow record batches of the messages ``start < id <= end`` of one topic partition (the executors'
    ``read()``); errors as :func:`scan_entries`."""
    topic, index = partition_index(topic_partition)
    start_key, end_key = start.key, end.key
    for group in scan_entries(
        client, topic_partition, start, end, poll_timeout_ms=poll_timeout_ms,
        fail_on_data_loss=fail_on_data_loss, reader_conf=reader_conf,
    ):  # fmt: skip
        batch = entries_to_batch(group, topic, index, start_key, end_key)
        if batch.num_rows:
            yield batch
