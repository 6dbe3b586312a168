"""Connector logic without Spark jobs or a broker: positions, offsets JSON, options, planning, the sink's
schema check, and the streaming offset contract against a fake broker client."""

from __future__ import annotations

import base64
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.spark import stream as stream_module
from quasar.spark.errors import DataLossError, OptionError, SinkSchemaError
from quasar.spark.options import parse_read, parse_write
from quasar.spark.passthrough import PRODUCER_PARAMS, convert
from quasar.spark.positions import (
    EARLIEST,
    Offset,
    Position,
    StartSpec,
    normalize_topic,
    parse_offsets_option,
    position_before,
)
from quasar.spark.reader import plan_partitions

T = "persistent://public/default/t"

# ------------------------------------------------------------------------------------------ positions
message_ids = st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(-1, 5))


def _same_entry_mix(a, b) -> bool:
    """An entry holds either one non-batched message (batch -1) or batch messages 0..n, never both."""
    return a[:2] == b[:2] and (a[2] < 0) != (b[2] < 0)


@given(message_ids, message_ids)
def test_position_before_is_just_before_the_message(m, x):
    if _same_entry_mix(m, x):
        return
    before = position_before(*m)
    x_key = Position(*x).key
    # x is read after "before" exactly when x is m or comes after it
    assert (x_key > before.key) == (x_key >= Position(*m).key)


def test_position_key_orders_whole_entry_after_its_batch_messages():
    assert Position(3, 4, 7).key < Position(3, 4, -1).key < Position(3, 5, 0).key
    assert EARLIEST.key < Position(0, 0, 0).key
    assert Position.parse("3:4") == Position(3, 4, -1)
    assert Position.parse("-1:-1:-1") is EARLIEST
    with pytest.raises(OptionError, match="offset of x"):
        Position.parse("3-4", what="offset of x")


positions = st.builds(Position, st.integers(0, 10**6), st.integers(-1, 10**6), st.integers(-1, 999))
topic_names = st.text("abcdefgh-", min_size=1, max_size=8).map(lambda s: f"persistent://t/n/{s}")


@given(st.dictionaries(topic_names, positions, min_size=1, max_size=6), st.booleans(), st.randoms())
def test_offset_json_is_sorted_and_round_trips(mapping, initial, rnd):
    items = list(mapping.items())
    rnd.shuffle(items)
    offset = Offset(dict(items), initial=initial, start_of_first_batch=dict(reversed(items)))
    text = json.dumps(offset.to_json())  # what Spark stores and compares
    assert text == json.dumps(Offset(dict(sorted(mapping.items())), initial, dict(mapping)).to_json())
    assert json.loads(text) == json.loads(json.dumps(offset.to_json(), sort_keys=True))
    back = Offset.from_json(text)
    assert back == Offset(mapping, initial, mapping)


def test_offset_from_json_rejects_foreign_offsets():
    with pytest.raises(OptionError, match="positions"):
        Offset.from_json({"p0": 3})
    with pytest.raises(OptionError, match="not JSON"):
        Offset.from_json("{nope")


# ------------------------------------------------------------------------------------------ options
def test_starting_offsets_forms():
    assert parse_offsets_option("startingOffsets", " Earliest ") == StartSpec("earliest")
    raw = bytes([8, 1, 16, 2])
    specs = parse_offsets_option(
        "startingOffsets",
        json.dumps(
            {
                "a": "latest",
                "b-partition-1": "5:3:2",
                "persistent://x/y/c": {"ledgerId": 5, "entryId": 0},
                "d": [8, 1, 16, 2],
                "e": "b64:" + base64.b64encode(raw).decode(),
                "f": -2,
            }
        ),
    )
    assert specs == {
        "persistent://public/default/a": StartSpec("latest"),
        "persistent://public/default/b-partition-1": StartSpec("position", Position(5, 3, 1)),
        "persistent://x/y/c": StartSpec("position", Position(5, -1, -1)),
        "persistent://public/default/d": StartSpec("message_id_bytes", raw),
        "persistent://public/default/e": StartSpec("message_id_bytes", raw),
        "persistent://public/default/f": StartSpec("earliest"),
    }


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "startingOffsets.*JSON"),
        ("[1, 2]", "startingOffsets: expected a non-empty JSON object"),
        ('{"t": "soon"}', r"startingOffsets\['t'\].*'soon'"),
        ('{"t": {"ledger": 1}}', r"startingOffsets\['t'\].*ledgerId"),
        ('{"t": "b64:!!"}', "base64"),
        ('{"t": true}', "unsupported value"),
    ],
)
def test_malformed_starting_offsets_name_the_option(text, match):
    with pytest.raises(OptionError, match=match):
        parse_read({"topic": "t", "startingOffsets": text})


def test_read_options_are_checked_case_insensitively():
    config = parse_read(
        {
            "TOPICS": "a, b,a",
            "failondataloss": "False",
            "maxOffsetsPerTrigger": "7",
            "quasar.reader.receiverQueueSize": "10",
        }
    )
    assert config.topics == ("persistent://public/default/a", "persistent://public/default/b")
    assert config.fail_on_data_loss is False
    assert config.max_messages_per_trigger == 7
    assert config.reader_conf == (("receiverqueuesize", "10"),)
    assert config.admin_url == "http://127.0.0.1:8080"
    assert parse_read({"path": "x"}).topics == ("persistent://public/default/x",)


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"topic": "t", "subscribe": "t"}, r"unknown read option 'subscribe'.*valid options: service\.url"),
        ({}, "exactly one of the options 'topic', 'topics' or 'topicsPattern'"),
        ({"topic": "t", "topics": "u"}, r"exactly one.*\(got topic, topics\)"),
        ({"topic": "t", "minPartitions": "0"}, "'minPartitions': must be >= 1"),
        ({"topic": "t", "maxMessagesPerTrigger": "x"}, "'maxMessagesPerTrigger'.*not an integer"),
        ({"topic": "t", "failOnDataLoss": "maybe"}, "'failOnDataLoss'"),
        ({"topic": "t", "service.url": "http://h:1"}, "'service.url'"),
        ({"topic": "t", "admin.url": "pulsar://h:1"}, "'admin.url'"),
        ({"topic": "t", "endingOffsets": "earliest"}, "'endingOffsets': 'earliest' is not allowed"),
        ({"topicsPattern": "(("}, "'topicsPattern'.*not a valid regex"),
        ({"topic": "a/b"}, "option 'topic'"),
        ({"topic": "non-persistent://a/b/c"}, "persistent://"),
    ],
)
def test_bad_read_options_fail_with_the_option_named(opts, match):
    with pytest.raises(OptionError, match=match):
        parse_read(opts)


def test_write_options():
    config = parse_write(
        {"topic": "out", "quasar.producer.compressionType": "LZ4", "checkpointLocation": "/x"}
    )
    assert config.topic == "persistent://public/default/out"
    with pytest.raises(OptionError, match="unknown write option 'startingoffsets'"):
        parse_write({"topic": "t", "startingOffsets": "earliest"})


def test_producer_passthrough_converts_types_and_rejects_unknown_keys():
    from quasar.client import CompressionType

    kwargs = convert(
        (("compressiontype", "zstd"), ("batchingmaxmessages", "50"), ("batchingenabled", "false")),
        PRODUCER_PARAMS,
        "quasar.producer.",
    )
    assert kwargs == {
        "compression_type": CompressionType.ZSTD,
        "batching_max_messages": 50,
        "batching_enabled": False,
    }
    with pytest.raises(OptionError, match=r"unknown option 'quasar.producer.colour'.*valid:"):
        convert((("colour", "red"),), PRODUCER_PARAMS, "quasar.producer.")
    with pytest.raises(OptionError, match=r"'quasar\.producer\.compressiontype': bad value 'gzip'"):
        convert((("compressiontype", "gzip"),), PRODUCER_PARAMS, "quasar.producer.")


def test_normalize_topic():
    assert normalize_topic("t") == "persistent://public/default/t"
    assert normalize_topic("a/b/c") == "persistent://a/b/c"


# ------------------------------------------------------------------------------------------ planning
def test_plan_splits_single_ledger_ranges_for_min_partitions():
    starts = {T + "-partition-0": EARLIEST, T + "-partition-1": Position(7, 3, -1)}
    ends = {T + "-partition-0": Position(5, 9, -1), T + "-partition-1": Position(7, 4, 2)}
    whole = plan_partitions(starts, ends, min_partitions=None, fail_on_data_loss=True)
    assert [(p.topic_partition, p.start, p.end) for p in whole] == [
        (T + "-partition-0", EARLIEST, Position(5, 9, -1)),
        (T + "-partition-1", Position(7, 3, -1), Position(7, 4, 2)),
    ]
    split = plan_partitions(starts, ends, min_partitions=4, fail_on_data_loss=True)
    assert len(split) == 4
    # the pieces of one topic partition are contiguous and cover exactly (start, end]
    pieces = [(p.start, p.end) for p in split if p.topic_partition == T + "-partition-0"]
    assert pieces[0][0] == EARLIEST and pieces[-1][1] == Position(5, 9, -1)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert all(start.key < end.key for start, end in pieces)


def test_plan_detects_an_end_before_its_start():
    starts, ends = {T: Position(4, 10)}, {T: Position(4, 2)}
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        plan_partitions(starts, ends, min_partitions=None, fail_on_data_loss=True)
    assert plan_partitions(starts, ends, min_partitions=None, fail_on_data_loss=False) == []


# ------------------------------------------------------------------------------------------ sink schema
def test_sink_schema_check():
    from pyspark.sql.types import IntegerType, MapType, StringType, StructField, StructType

    from quasar.spark.writer import check_sink_schema

    config = parse_write({"topic": "t"})
    good = StructType(
        [
            StructField("properties", MapType(StringType(), StringType())),
            StructField("value", StringType()),
            StructField("key", StringType()),
        ]
    )
    assert check_sink_schema(good, config) == ("value", "key", "properties")
    with pytest.raises(SinkSchemaError, match="needs a 'value' column"):
        check_sink_schema(StructType([StructField("key", StringType())]), config)
    with pytest.raises(SinkSchemaError, match=r"column 'value' has type int.*binary or string"):
        check_sink_schema(StructType([StructField("value", IntegerType())]), config)
    with pytest.raises(SinkSchemaError, match=r"cannot write the columns \['n'\].*to_json"):
        check_sink_schema(
            StructType([StructField("value", StringType()), StructField("n", IntegerType())]), config
        )
    with pytest.raises(SinkSchemaError, match=r"'topic' option or .* 'topic' column"):
        check_sink_schema(StructType([StructField("value", StringType())]), parse_write({}))


# ------------------------------------------------------------------------------------------ stream offsets
class FakeBroker:
    """What the stream reader asks the broker, scripted by the test."""

    def __init__(self, partitions: int, last: Position) -> None:
        self.partitions = partitions
        self.last = {f"{T}-partition-{i}": last for i in range(partitions)}

    def topic_partitions(self, topic):
        return [f"{topic}-partition-{i}" for i in range(self.partitions)]

    def last_position(self, tp):
        return self.last.get(tp, EARLIEST)

    def peek_position(self, tp, start, end, count, poll_timeout_ms):
        # entries of 1 message, one ledger: the count-th message after start
        first = max(start.entry_id, -1) if not start.is_earliest else -1
        ledger = end.ledger_id
        return min(Position(ledger, first + count, -1), end, key=lambda p: p.key)


@pytest.fixture
def fake(monkeypatch):
    broker = FakeBroker(2, Position(1, 5))
    monkeypatch.setattr(stream_module, "broker_client", lambda config: broker)
    return broker


def _reader(**opts):
    return stream_module.QuasarStreamReader(parse_read({"topic": "t", **opts}))


def _all(limit=None):
    if not stream_module.ADMISSION_CONTROL:
        return None
    return limit or stream_module.ReadAllAvailable()


def test_latest_start_survives_a_replayed_first_batch(fake):
    first = _reader(startingOffsets="latest")
    initial = first.initialOffset()
    assert first.initialOffset() is initial  # resolved once per run
    fake.last = {tp: Position(1, 8) for tp in fake.last}  # 3 messages arrive
    end0 = first.latestOffset(initial, _all())
    # the query fails in batch 0 and restarts; more data arrived, so "latest" now means 1:12
    fake.last = {tp: Position(1, 12) for tp in fake.last}
    second = _reader(startingOffsets="latest")
    replay_start = second.initialOffset()
    assert Offset.from_json(replay_start).positions[T + "-partition-0"] == Position(1, 12)
    planned = second.partitions(replay_start, end0)
    assert [(p.start, p.end) for p in planned] == [(Position(1, 5), Position(1, 8))] * 2


def test_idle_stream_returns_the_same_offset_text(fake):
    reader = _reader(startingOffsets="earliest")
    end0 = reader.latestOffset(reader.initialOffset(), _all())
    assert end0 != reader.initialOffset()  # batch 0 runs once, to pin its start in the checkpoint
    assert json.dumps(reader.latestOffset(end0, _all())) == json.dumps(end0)


def test_new_partitions_are_discovered_and_start_at_earliest(fake):
    reader = _reader(startingOffsets="latest")
    end0 = reader.latestOffset(reader.initialOffset(), _all())
    fake.partitions = 3
    fake.last[T + "-partition-2"] = Position(9, 1)
    end1 = reader.latestOffset(end0, _all())
    planned = reader.partitions(end0, end1)
    assert [(p.topic_partition, p.start, p.end) for p in planned] == [
        (T + "-partition-2", EARLIEST, Position(9, 1))
    ]


def test_offset_going_backwards_is_data_loss(fake):
    reader = _reader(startingOffsets="latest")
    end0 = reader.latestOffset(reader.initialOffset(), _all())
    fake.last = {tp: Position(1, 2) for tp in fake.last}
    with pytest.raises(DataLossError, match="lies before the consumed position"):
        reader.latestOffset(end0, _all())
    tolerant = _reader(startingOffsets="latest", failOnDataLoss="false")
    end0 = tolerant.latestOffset(tolerant.initialOffset(), _all())
    assert Offset.from_json(tolerant.latestOffset(end0, _all())).positions[T + "-partition-0"] == Position(
        1, 2
    )


def test_max_messages_per_trigger_caps_each_batch(fake):
    reader = _reader(startingOffsets="earliest", maxMessagesPerTrigger="4")
    fake.last = {tp: Position(1, 9) for tp in fake.last}  # 10 messages per partition
    if stream_module.ADMISSION_CONTROL:
        limit = reader.getDefaultReadLimit()
        assert limit.max_rows == 4
        end0 = reader.latestOffset(reader.initialOffset(), limit)
    else:  # pragma: no cover - pyspark < 4.2
        end0 = reader.latestOffset()
    assert set(Offset.from_json(end0).positions.values()) == {Position(1, 1)}  # 2 per partition


def test_available_now_stops_at_the_target(fake):
    reader = _reader(startingOffsets="earliest")
    reader.prepareForTriggerAvailableNow()
    fake.last = {tp: Position(1, 50) for tp in fake.last}
    end0 = reader.latestOffset(reader.initialOffset(), _all())
    assert set(Offset.from_json(end0).positions.values()) == {Position(1, 5)}


def test_topics_pattern_resolves_within_one_namespace():
    from quasar.spark.errors import TopicNotFoundError
    from quasar.spark.reader import resolve_topic_partitions

    class Listing(FakeBroker):
        def list_topics(self, namespace):
            assert namespace == "public/default"
            return [f"persistent://public/default/{name}" for name in ("orders-eu", "orders-us", "users")]

    listing = Listing(2, EARLIEST)
    config = parse_read({"topicsPattern": "orders-.*"})
    assert resolve_topic_partitions(listing, config) == [
        f"persistent://public/default/orders-{region}-partition-{i}"
        for region in ("eu", "us")
        for i in range(2)
    ]
    with pytest.raises(TopicNotFoundError, match="no topic matches"):
        resolve_topic_partitions(listing, parse_read({"topicsPattern": "nothing.*"}))
    with pytest.raises(OptionError, match="must name one namespace literally"):
        resolve_topic_partitions(listing, parse_read({"topicsPattern": "persistent://public/.*/x"}))


def test_ending_offsets_are_refused_for_streams():
    from pyspark.sql.types import StringType, StructField, StructType

    from quasar.spark.datasource import QuasarDataSource
    from quasar.spark.schema import READ_COLUMNS

    source = QuasarDataSource({"topic": "t", "endingoffsets": "latest"})
    schema = StructType([StructField(name, StringType()) for name in READ_COLUMNS])  # names are checked
    with pytest.raises(OptionError, match="'endingOffsets' is for batch reads only"):
        source.streamReader(schema)
    assert source.reader(schema).config.topics == ("persistent://public/default/t",)
