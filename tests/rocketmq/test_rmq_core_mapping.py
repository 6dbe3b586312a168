"""The RocketMQ <-> Pulsar model mapping (``quasar.broker.rocketmq.mapping``), in process: the send
direction's validation and entry, the read direction over entries an official Pulsar producer stored in a
real (in-process) broker, and the codecs (message ids, Java ``String.hashCode``, Guava ``consistentHash``)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig
from quasar.broker.rocketmq.mapping import (
    consistent_hash,
    decode_position_message_id,
    java_string_hash,
    map_message,
    messages_of_entry,
    position_message_id,
)
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition
from quasar.ledger.entry import Entry
from quasar.ledger.position import Position
from quasar.protocol import parse_headers_and_payload

MID = "0102FC0000000142960B18A1FE00000000"


def _message(**system: Any) -> Any:
    message = definition.Message(body=system.pop("body", b"payload"))
    message.topic.name = system.pop("topic", "T")
    for key, value in system.pop("props", {}).items():
        message.user_properties[key] = value
    props = message.system_properties
    props.message_id = system.pop("message_id", MID)
    keys = system.pop("keys", [])
    props.keys.extend(keys)
    born = system.pop("born_ms", None)
    if born is not None:
        props.born_timestamp.FromMilliseconds(born)
    delivery = system.pop("delivery_ms", None)
    if delivery is not None:
        props.delivery_timestamp.FromMilliseconds(delivery)
    for name, value in system.items():
        setattr(props, name, value)
    return message


def test_send_then_read_keeps_every_field() -> None:
    message = _message(
        tag="TagA",
        keys=["k1", "k2"],
        props={"color": "red"},
        message_group="orders-7",
        born_ms=1_700_000_000_123,
        born_host="10.0.0.9",
    )
    mapped = map_message(message)
    assert mapped.tag_hash == java_string_hash("TagA") == 2598919
    assert mapped.store_properties == {"UNIQ_KEY": MID, "KEYS": "k1 k2"}
    data = mapped.entry("rocketmq-c1", 7, publish_time_ms=1_700_000_000_200)
    metadata = parse_headers_and_payload(data).metadata
    assert metadata.partition_key == "k1" and metadata.ordering_key == b"orders-7"
    assert metadata.event_time == 1_700_000_000_123 and metadata.sequence_id == 7
    assert {kv.key: kv.value for kv in metadata.properties} == {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": MID,
        "__BORNHOST": "10.0.0.9",
    }
    entry = Entry(Position(5, 3), memoryview(data), queue_offset=41, store_timestamp=1_700_000_000_300)
    resource = definition.Resource(resource_namespace="ns", name="T")
    [read] = messages_of_entry(entry, topic=resource, queue_id=2, store_host="127.0.0.1:8081")
    system = read.system_properties
    assert (
        read.topic == resource and read.body == b"payload" and dict(read.user_properties) == {"color": "red"}
    )
    assert system.tag == "TagA" and list(system.keys) == ["k1", "k2"] and system.message_id == MID
    assert system.message_group == "orders-7" and system.message_type == definition.MessageType.FIFO
    assert system.body_digest.type == definition.DigestType.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert system.body_encoding == definition.Encoding.IDENTITY
    assert system.born_timestamp.ToMilliseconds() == 1_700_000_000_123 and system.born_host == "10.0.0.9"
    assert (
        system.store_timestamp.ToMilliseconds() == 1_700_000_000_300 and system.store_host == "127.0.0.1:8081"
    )
    assert (system.queue_id, system.queue_offset) == (2, 41)


def test_delay_message_maps_to_deliver_at_time() -> None:
    at = int(time.time() * 1000) + 60_000
    mapped = map_message(_message(delivery_ms=at))
    data = mapped.entry("p", 0)
    assert parse_headers_and_payload(data).metadata.deliver_at_time == at
    entry = Entry(Position(1, 0), memoryview(data), queue_offset=0, store_timestamp=1)
    [read] = messages_of_entry(entry, topic=definition.Resource(name="T"), queue_id=0, store_host="h:1")
    assert read.system_properties.message_type == definition.MessageType.DELAY
    assert read.system_properties.delivery_timestamp.ToMilliseconds() == at


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"topic": "bad topic"}, Code.ILLEGAL_TOPIC),
        ({"topic": "rmq_sys_x"}, Code.ILLEGAL_TOPIC),
        ({"topic": "TBW102"}, Code.ILLEGAL_TOPIC),
        ({"body": b""}, Code.MESSAGE_BODY_EMPTY),
        ({"body": b"x" * (4 * 1024 * 1024 + 1)}, Code.MESSAGE_BODY_TOO_LARGE),
        ({"message_id": " "}, Code.ILLEGAL_MESSAGE_ID),
        ({"tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG),
        ({"tag": "  "}, Code.ILLEGAL_MESSAGE_TAG),
        ({"keys": ["ok", "bad\x01"]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"message_group": "g" * 64}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"props": {"TAGS": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"props": {"UNIQ_KEY": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"props": {"a": "b\x02"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"props": {f"p{i}": "v" for i in range(129)}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
        ({"props": {"big": "v" * 17000}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
        ({"delivery_ms": int(time.time() * 1000) + 25 * 3600 * 1000}, Code.ILLEGAL_DELIVERY_TIME),
        (
            {"message_group": "g", "delivery_ms": int(time.time() * 1000)},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (  # rmqtx: a transactional message is neither FIFO nor DELAY
            {"message_type": definition.MessageType.TRANSACTION, "message_group": "g"},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
    ],
)
def test_bad_messages_get_the_proxys_codes(fields: dict[str, Any], code: int) -> None:
    with pytest.raises(RocketMQError) as info:
        map_message(_message(**fields))
    assert info.value.code == code


def test_a_past_delivery_time_and_63_byte_group_are_accepted() -> None:
    assert map_message(_message(delivery_ms=1000)).metadata.deliver_at_time == 1000
    assert map_message(_message(message_group="g" * 63)).message_group == "g" * 63


# ---------------------------------------------------------------------------------------------- codecs
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**48 - 1), st.integers(-1, 0xFFFE))
def test_position_message_id_round_trips(ledger_id: int, entry_id: int, batch_index: int) -> None:
    text = position_message_id(ledger_id, entry_id, batch_index)
    assert len(text) == 34 and text == text.upper() and text.startswith("00")
    assert decode_position_message_id(text) == (ledger_id, entry_id, batch_index)


@given(st.text(max_size=40))
def test_other_ids_do_not_decode_as_positions(text: str) -> None:
    if not (len(text) == 34 and text.startswith("00") and all(c in "0123456789ABCDEF" for c in text)):
        assert decode_position_message_id(text) is None
    assert decode_position_message_id(MID) is None  # a client-made id (version 01)


def test_position_message_id_refuses_what_does_not_fit() -> None:
    for bad in ((-1, 0, -1), (0, 2**48, -1), (0, 0, 0xFFFF), (2**64, 0, -1)):
        with pytest.raises(ValueError):
            position_message_id(*bad)


def test_java_string_hash_matches_java() -> None:
    # values of Java's String.hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -(2**31)  # the famous Integer.MIN_VALUE
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair


@given(st.integers(-(2**63), 2**63 - 1), st.integers(2, 64))
def test_consistent_hash_is_guavas_monotone_bucketing(key: int, buckets: int) -> None:
    """Guava's contract: growing the buckets by one moves a key only to the new bucket."""
    bucket = consistent_hash(key, buckets)
    assert 0 <= bucket < buckets
    assert bucket in (consistent_hash(key, buckets - 1), buckets - 1)


# ---------------------------------------------------------------------------------------------- read direction
pulsar = pytest.importorskip("pulsar")


def _produce_with_pulsar(service_url: str, topic: str) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        plain = client.create_producer(topic, batching_enabled=False)
        plain.send(b"plain", properties={"a": "1"}, partition_key="pk", event_timestamp=1_700_000_000_001)
        plain.close()
        batched = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=1000,
            compression_type=pulsar.CompressionType.LZ4,
        )
        for i in range(3):
            batched.send_async(f"item-{i}".encode(), None, properties={"i": str(i)}, ordering_key=f"ok{i}")
        batched.flush()
        batched.close()
    finally:
        client.close()


async def test_read_mapping_of_messages_a_pulsar_producer_stored(tmp_path: Path) -> None:
    config = BrokerConfig(
        port=0,
        admin_port=0,
        data_dir=tmp_path / "data",
        commit_log_file_size=256 * 1024,
        rocketmq_enabled=False,
    )
    app = BrokerApp(config)
    await app.start()
    try:
        topic = "persistent://public/default/from-pulsar"
        await asyncio.get_running_loop().run_in_executor(None, _produce_with_pulsar, app.service_url, topic)
        assert app.service is not None
        ledger = app.service.topics[topic].ledger  # type: ignore[union-attr]
        entries, _ = ledger.read_from_offset(0, 10, 1 << 20)
        assert len(entries) == 2
        resource = definition.Resource(name="from-pulsar")
        messages = [
            m
            for e in entries
            for m in messages_of_entry(e, topic=resource, queue_id=0, store_host="127.0.0.1:8081")
        ]
    finally:
        await app.stop()
    assert [m.body for m in messages] == [b"plain", b"item-0", b"item-1", b"item-2"]
    first = messages[0]
    assert dict(first.user_properties) == {"a": "1"}
    assert list(first.system_properties.keys) == ["pk"]  # the Pulsar partition key is the message's key
    assert first.system_properties.born_timestamp.ToMilliseconds() == 1_700_000_000_001
    assert first.system_properties.message_type == definition.MessageType.NORMAL
    assert first.system_properties.queue_offset == 0
    ids = [m.system_properties.message_id for m in messages]
    assert len(set(ids)) == 4 and all(len(i) == 34 for i in ids)
    assert decode_position_message_id(ids[0]) == (*entries[0].position, -1)
    assert decode_position_message_id(ids[3]) == (*entries[1].position, 2)
    for index, message in enumerate(messages[1:]):
        system = message.system_properties
        assert system.message_group == f"ok{index}" and system.message_type == definition.MessageType.FIFO
        assert dict(message.user_properties) == {"i": str(index)} and system.queue_offset == 1
        assert system.body_digest.checksum == hashlib.md5(message.body).hexdigest().upper()
        assert system.body_encoding == definition.Encoding.IDENTITY  # decompressed here
