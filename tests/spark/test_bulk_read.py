"""The executors' bulk read (``quasar.spark.entry_scan``: whole entries from a ``deliver_entries`` reader,
decoded in compiled code) against the message-by-message path (``BrokerClient.read_range`` +
``schema.to_arrow_batches``) on the same topics of one broker process: the same rows, the same columns,
byte for byte, for batched, compressed, chunked and keyed messages, whole ranges and ranges that start and end
inside batches; and the data-loss rule of the first entry. No Spark session (``read()`` runs this code)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pyarrow as pa
import pytest

from quasar.client import EARLIEST as EARLIEST_ID
from quasar.spark._client import BrokerClient
from quasar.spark.entry_scan import read_batches
from quasar.spark.errors import DataLossError
from quasar.spark.positions import EARLIEST, Position, partition_index
from quasar.spark.schema import arrow_read_schema, to_arrow_batches
from quasar.testing.broker_process import BrokerProcess
from tests.spark.helpers import client as official_client
from tests.spark.helpers import create_topic, new_topic


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with tempfile.TemporaryDirectory(prefix="quasar-bulk-read-") as tmp:
        process = BrokerProcess(Path(tmp) / "broker").start()
        try:
            yield process
        finally:
            process.stop()


@pytest.fixture(scope="module")
def mixed_topic(broker) -> str:
    """A 2-partition topic holding every kind of entry: LZ4 batches with keys, properties (one repeated) and
    event times, ZSTD-compressed single messages, messages without key or properties, and a chunked one."""
    topic = new_topic("bulk")
    create_topic(broker, topic, partitions=2)
    c = official_client(broker)
    try:
        batched = c.create_producer(
            topic, batching_enabled=True, batching_max_messages=7, batching_max_publish_delay_ms=50,
            compression_type=pulsar.CompressionType.LZ4, block_if_queue_full=True,
        )  # fmt: skip
        results: list[object] = []
        for i in range(120):
            kwargs: dict[str, object] = {"event_timestamp": 1_700_000_000_000 + i} if i % 3 else {}
            if i % 4:
                kwargs["partition_key"] = f"k{i % 5}"
            if i % 5:
                kwargs["properties"] = {"n": str(i), "é": "ü" * (i % 3)}
            batched.send_async(f"batched-{i}".encode(), lambda r, _id: results.append(r), **kwargs)
        batched.flush()
        single = c.create_producer(
            topic, batching_enabled=False, compression_type=pulsar.CompressionType.ZSTD
        )
        for i in range(10):
            single.send(f"single-{i}".encode() * 50, partition_key=f"s{i}", properties={"i": str(i)})
        single.send(b"no key, no properties")
        chunked = c.create_producer(
            f"{topic}-partition-1", batching_enabled=False, chunking_enabled=True,
            compression_type=pulsar.CompressionType.LZ4,
        )  # fmt: skip
        chunked.send(bytes(range(256)) * 8000, partition_key="big", event_timestamp=42)  # > 1 MiB: chunks
        chunked.send(b"after the chunks", partition_key="big")
        assert results.count(pulsar.Result.Ok) == 120
    finally:
        c.close()
    return topic


def _adapter(broker) -> BrokerClient:
    return BrokerClient(broker.service_url, broker.admin_url)


def _bulk(adapter: BrokerClient, tp: str, start: Position, end: Position) -> pa.Table:
    batches = list(read_batches(adapter, tp, start, end, poll_timeout_ms=5000, fail_on_data_loss=True))
    return pa.Table.from_batches(batches, schema=arrow_read_schema())


def _messages(adapter: BrokerClient, tp: str, start: Position, end: Position) -> pa.Table:
    topic, index = partition_index(tp)
    rows = adapter.read_range(tp, start, end, poll_timeout_ms=5000, fail_on_data_loss=True)
    return pa.Table.from_batches(list(to_arrow_batches(rows, topic, index)), schema=arrow_read_schema())


def test_whole_partitions_are_the_message_paths_rows_byte_for_byte(broker, mixed_topic):
    adapter = _adapter(broker)
    total = 0
    for index in range(2):
        tp = f"{mixed_topic}-partition-{index}"
        end = adapter.last_position(tp)
        bulk, messages = _bulk(adapter, tp, EARLIEST, end), _messages(adapter, tp, EARLIEST, end)
        assert bulk.num_rows == messages.num_rows > 0
        for name in bulk.column_names:
            assert bulk[name].equals(messages[name]), name
        total += bulk.num_rows
        values = bulk["value"].to_pylist()
        if index == 1:
            assert bytes(range(256)) * 8000 in values  # the chunked message, reassembled
            assert bulk["batchIndex"].to_pylist().count(-1) < bulk.num_rows  # batched entries too
    assert total == 120 + 11 + 2


def test_ranges_starting_and_ending_inside_batches_match(broker, mixed_topic):
    adapter = _adapter(broker)
    tp = f"{mixed_topic}-partition-0"
    ids = _messages(adapter, tp, EARLIEST, adapter.last_position(tp))
    batched = [
        (ledger, entry, batch)
        for ledger, entry, batch in zip(
            ids["ledgerId"].to_pylist(),
            ids["entryId"].to_pylist(),
            ids["batchIndex"].to_pylist(),
            strict=True,
        )
        if batch >= 1
    ]
    assert len(batched) > 6
    first, last = batched[1], batched[-2]
    ranges = [
        (Position(*first), Position(*last)),  # inside a batch to inside a batch
        (Position(first[0], first[1], -1), Position(last[0], last[1], -1)),  # whole entries
        (Position(first[0], first[1] - 1, -1), Position(*first)),  # one entry's head
    ]
    for start, end in ranges:
        bulk, messages = _bulk(adapter, tp, start, end), _messages(adapter, tp, start, end)
        assert bulk.num_rows == messages.num_rows > 0, (start, end)
        assert bulk.equals(messages), (start, end)
        keys = list(zip(bulk["ledgerId"].to_pylist(), bulk["entryId"].to_pylist(), strict=True))
        assert min(keys) >= (start.ledger_id, start.entry_id) and max(keys) <= (end.ledger_id, end.entry_id)


def test_a_reader_of_entries_hands_out_whole_entries_and_counts_messages(broker, mixed_topic):
    adapter = _adapter(broker)
    tp = f"{mixed_topic}-partition-0"
    reader = adapter.client().create_reader(tp, EARLIEST_ID, deliver_entries=True, receiver_queue_size=30)
    try:
        entries = []
        while chunk := reader.read_entries(5, 2000):
            entries.extend(chunk)
    finally:
        reader.close()
    # the receiver queue (30 permits) is smaller than the partition: permits came back per message handed out
    assert (
        sum(e.num_messages for e in entries)
        == _messages(adapter, tp, EARLIEST, adapter.last_position(tp)).num_rows
    )
    assert any(e.batch_size > 1 for e in entries) and any(e.batch_size == 0 for e in entries)
    assert [(e.ledger_id, e.entry_id) for e in entries] == sorted(
        {(e.ledger_id, e.entry_id) for e in entries}
    )


def test_a_trimmed_start_is_data_loss_as_on_the_message_path(broker, mixed_topic):
    adapter = _adapter(broker)
    ends = {
        adapter.last_position(f"{mixed_topic}-partition-{i}"): f"{mixed_topic}-partition-{i}" for i in (0, 1)
    }
    end = max(ends, key=lambda p: p.ledger_id)
    tp = ends[end]
    assert end.ledger_id >= 1  # ledger ids are per broker: two partitions cannot both have ledger 0
    gone = Position(end.ledger_id - 1, 3, -1)  # not a ledger of this partition: "its entries are gone"
    with pytest.raises(DataLossError, match="are gone"):
        _bulk(adapter, tp, gone, end)
    tolerant = read_batches(adapter, tp, gone, end, poll_timeout_ms=5000, fail_on_data_loss=False)
    assert sum(b.num_rows for b in tolerant) == _messages(adapter, tp, EARLIEST, end).num_rows


def test_entry_readers_are_refused_where_they_cannot_work(broker, mixed_topic):
    client = _adapter(broker).client()
    with pytest.raises(ValueError, match="reads one topic partition"):
        client.create_reader(mixed_topic, EARLIEST_ID, deliver_entries=True)  # the partitioned parent
    with pytest.raises(ValueError, match="reader_listener"):
        client.create_reader(f"{mixed_topic}-partition-0", EARLIEST_ID, deliver_entries=True,
                             reader_listener=lambda r, m: None)  # fmt: skip
    messages = client.create_reader(f"{mixed_topic}-partition-0", EARLIEST_ID)
    try:
        with pytest.raises(TypeError, match="deliver_entries=True"):
            messages.read_entries(5, 2000)
    finally:
        messages.close()
