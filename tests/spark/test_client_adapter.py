"""The broker adapter (``quasar.spark._client``) on Quasar's own client, without Spark: ranges read with a
non-durable reader, message ids byte-compatible with the official client, writes, option mapping, errors.
Data is produced / checked with the official ``pulsar-client`` where that makes the interop point."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pulsar
import pytest

from quasar.client import Client, CompressionType, MessageId, PartitionsRoutingMode
from quasar.spark._client import _CLIENTS, BrokerClient
from quasar.spark.errors import BrokerUnavailableError, OptionError
from quasar.spark.passthrough import PRODUCER_PARAMS, convert
from quasar.spark.positions import EARLIEST, Position
from tests.spark.helpers import client as official_client
from tests.spark.helpers import create_topic, new_topic, produce


def _adapter(broker) -> BrokerClient:
    return BrokerClient(broker.service_url, broker.admin_url, (("operationtimeoutseconds", "15"),))


def _read(adapter: BrokerClient, topic: str, start: Position, end: Position) -> list[tuple]:
    # fail_on_data_loss: a range that only ended by running out of messages would raise DataLossError
    return list(adapter.read_range(topic, start, end, poll_timeout_ms=3000, fail_on_data_loss=True))


# ------------------------------------------------------------------------------------------ units
def test_serialized_ids_are_the_client_codec_and_round_trip_with_the_official_client():
    # the messageId column is quasar.client.MessageId.serialize(); the official client reads it and back
    raw = MessageId(7, 9, 3, 4, 10).serialize()
    official = pulsar.MessageId.deserialize(raw)
    assert (official.partition(), official.ledger_id(), official.entry_id(), official.batch_index()) == (
        3,
        7,
        9,
        4,
    )
    assert BrokerClient.position_of_serialized(raw) == (3, 7, 9, 4)
    assert BrokerClient.position_of_serialized(official.serialize()) == (3, 7, 9, 4)
    with pytest.raises(OptionError, match="not a serialized MessageId"):
        BrokerClient.position_of_serialized(b"\xff\xff")


def test_passthrough_maps_to_quasar_client_names_and_drops_official_only_options():
    kwargs = convert(
        (
            ("compressiontype", "zlib"),
            ("messageroutingmode", "usesinglepartition"),
            ("maxpendingmessagesacrosspartitions", "5000"),
            ("batchingtype", "keybased"),
            ("lazystartpartitionedproducers", "true"),
        ),
        PRODUCER_PARAMS,
        "quasar.producer.",
    )
    assert kwargs == {
        "compression_type": CompressionType.ZLIB,
        "message_routing_mode": PartitionsRoutingMode.UseSinglePartition,
    }
    with pytest.raises(OptionError, match=r"'quasar\.producer\.batchingtype': bad value 'fancy'"):
        convert((("batchingtype", "fancy"),), PRODUCER_PARAMS, "quasar.producer.")
    with pytest.raises(OptionError, match=r"maxpendingmessagesacrosspartitions': bad value 'many'"):
        convert((("maxpendingmessagesacrosspartitions", "many"),), PRODUCER_PARAMS, "quasar.producer.")


def test_position_of_serialized_reads_official_client_bytes():
    raw = pulsar.MessageId(2, 11, 12, 3).serialize()
    assert BrokerClient.position_of_serialized(raw) == (2, 11, 12, 3)
    assert BrokerClient.position_of_serialized(bytearray(raw)) == (2, 11, 12, 3)
    with pytest.raises(OptionError, match="is not a serialized MessageId"):
        BrokerClient.position_of_serialized(b"\xff\xff")


# ------------------------------------------------------------------------------------------ against a broker
def test_client_is_quasars_own_and_cached_per_process(broker):
    first, second = _adapter(broker), _adapter(broker)
    assert isinstance(first.client(), Client)
    assert first.client() is second.client()
    other = BrokerClient(broker.service_url, broker.admin_url, (("operationtimeoutseconds", "14"),))
    assert other.client() is not first.client()
    assert os.getpid() in {key[0] for key in _CLIENTS}  # a forked worker builds its own


def test_read_range_bounds_inside_and_at_the_end_of_batch_entries(broker):
    topic = new_topic("adapter")
    n = 25
    produce(
        broker,
        topic,
        [f"v{i}".encode() for i in range(n)],
        keys=[f"k{i}" for i in range(n)],
        props=[{"i": str(i)} for i in range(n)],
        event_ms=[1_700_000_000_000 + i for i in range(n)],
    )
    adapter = _adapter(broker)
    last = adapter.last_position(topic)
    everything = _read(adapter, topic, EARLIEST, last)  # ends at the last entry without waiting for more
    assert [m[1] for m in everything] == [f"v{i}".encode() for i in range(n)]
    for i, (key, _value, ledger, entry, batch, publish_ms, event_ms, props, redeliveries, raw) in enumerate(
        everything
    ):
        assert (key, event_ms, props, redeliveries) == (f"k{i}", 1_700_000_000_000 + i, {"i": str(i)}, 0)
        assert publish_ms > 0 and batch >= 0
        official = pulsar.MessageId.deserialize(raw)
        assert (official.ledger_id(), official.entry_id(), official.batch_index()) == (ledger, entry, batch)
        assert official.partition() == -1
    positions = [Position(m[2], m[3], m[4]) for m in everything]
    # start inside a batch (exclusive), end inside another (inclusive)
    middle = _read(adapter, topic, positions[4], positions[17])
    assert [m[1] for m in middle] == [f"v{i}".encode() for i in range(5, 18)]
    # "through the end of the first entry" while later entries exist
    first = positions[0]
    whole_first = _read(adapter, topic, EARLIEST, Position(first.ledger_id, first.entry_id, -1))
    assert whole_first == [m for m in everything if (m[2], m[3]) == (first.ledger_id, first.entry_id)]
    # an empty range reads nothing
    assert _read(adapter, topic, positions[3], positions[3]) == []


def test_read_range_of_a_partition_carries_the_partition_index(broker):
    topic = new_topic("adapter-part")
    create_topic(broker, topic, partitions=2)
    produce(broker, topic, [f"p{i}".encode() for i in range(20)], keys=[f"k{i}" for i in range(20)])
    adapter = _adapter(broker)
    seen = []
    for index, partition in enumerate(adapter.topic_partitions(topic)):
        for message in _read(adapter, partition, EARLIEST, adapter.last_position(partition)):
            assert pulsar.MessageId.deserialize(message[9]).partition() == index
            seen.append(message[1])
    assert sorted(seen) == sorted(f"p{i}".encode() for i in range(20))


def test_position_at_time_seeks_by_publish_time(broker):
    topic = new_topic("adapter-time")
    produce(broker, topic, [f"t{i}".encode() for i in range(10)], batching=False)
    adapter = _adapter(broker)
    messages = _read(adapter, topic, EARLIEST, adapter.last_position(topic))
    sixth = messages[5]
    before = adapter.position_at_time(topic, sixth[5])
    tail = _read(adapter, topic, before, adapter.last_position(topic))
    assert [m[1] for m in tail] == [
        m[1] for m in messages if m[5] >= sixth[5]
    ]  # publish times never decrease
    assert adapter.position_at_time(topic, sixth[5] + 10**9) == adapter.last_position(topic)


def test_producer_writes_keys_properties_event_time_read_by_the_official_client(broker):
    topic = new_topic("adapter-write")
    adapter = _adapter(broker)
    producer = adapter.producer(topic, (("compressiontype", "lz4"),))
    for i in range(5):
        producer.send(
            f"w{i}".encode(), f"k{i}" if i % 2 else None, {"n": str(i)}, 1_600_000_000_000 + i, None
        )
    producer.flush()
    producer.close()
    assert producer.sent == 5
    c = official_client(broker)
    try:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(10_000) for _ in range(5)]
    finally:
        c.close()
    assert [m.data() for m in got] == [f"w{i}".encode() for i in range(5)]
    assert [m.partition_key() for m in got] == ["", "k1", "", "k3", ""]
    assert [m.properties() for m in got] == [{"n": str(i)} for i in range(5)]
    assert [m.event_timestamp() for m in got] == [1_600_000_000_000 + i for i in range(5)]


def test_errors_map_to_connector_errors(broker):
    adapter = _adapter(broker)
    with pytest.raises(OptionError, match=r"quasar\.producer"):
        adapter.producer(new_topic(), (("chunkingenabled", "true"), ("batchingenabled", "true")))
    with pytest.raises(OptionError, match=r"quasar\.reader"):
        list(
            adapter.read_range(
                new_topic(), EARLIEST, Position(1, 1, -1), poll_timeout_ms=100, fail_on_data_loss=True,
                reader_conf=(("receiverqueuesize", "-5"),),
            )
        )  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the block ends
    down = BrokerClient(
        f"pulsar://127.0.0.1:{port}",
        f"http://127.0.0.1:{port}",
        (("operationtimeoutseconds", "2"), ("connectiontimeoutms", "500")),
    )
    with pytest.raises(BrokerUnavailableError, match=r"service\.url"):
        list(down.read_range("persistent://public/default/x", EARLIEST, Position(1, 1, -1), poll_timeout_ms=100,
                             fail_on_data_loss=True))  # fmt: skip
    with pytest.raises(BrokerUnavailableError, match=r"service\.url"):
        down.producer("persistent://public/default/x", ())


def test_connector_works_without_pulsar_client():
    # the `spark` extra must not need pulsar-client: the connector imports and runs with `pulsar` blocked
    code = (
        "import sys; sys.modules['pulsar'] = None\n"
        "import quasar.spark, quasar.spark._client, quasar.spark.reader, quasar.spark.writer, quasar.spark.stream\n"
        "from quasar.spark._client import BrokerClient\n"
        "from quasar.spark.passthrough import PRODUCER_PARAMS, convert\n"
        "assert BrokerClient.position_of_serialized(b'\\x08\\x01\\x10\\x02') == (-1, 1, 2, -1)\n"
        "convert((('compressiontype', 'lz4'),), PRODUCER_PARAMS, '')\n"
        "assert 'pulsar' not in {m.split('.')[0] for m, v in sys.modules.items() if v is not None}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
