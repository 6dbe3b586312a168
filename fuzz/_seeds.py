"""Well-formed inputs the harnesses start from: one frame of every command a client sends, SEND frames with
and without checksum, batches, compressed payloads. libFuzzer mutates these (and what they lead to) far
more productively than random bytes, which almost never pass the length prefixes and protobuf tags."""

from __future__ import annotations

from quasar.protocol import (
    CompressionType,
    MessageId,
    compress,
    encode_batch,
    encode_headers_and_payload,
    requests,
)
from quasar.protocol.enums import AckType, SubType
from quasar.protocol.pb import KeySharedMeta, MessageMetadata, SingleMessageMetadata

TOPIC = "persistent://public/default/fuzz"


def metadata(**fields: object) -> MessageMetadata:
    """A MessageMetadata with the required fields set."""
    return MessageMetadata(producer_name="fuzz-1", sequence_id=1, publish_time=1_700_000_000_000, **fields)


def batch(count: int = 3, *, keyed: bool = True) -> bytes:
    """An uncompressed batch payload of ``count`` items."""
    items = []
    for index in range(count):
        single = SingleMessageMetadata()
        if keyed:
            single.partition_key = f"k{index}"
        items.append((single, b"item-%d" % index))
    return encode_batch(items)


def spans() -> list[bytes]:
    """``headers_and_payload`` spans: plain, keyed, batched, every codec, without a checksum."""
    out = [
        encode_headers_and_payload(metadata(), b"hello"),
        encode_headers_and_payload(metadata(partition_key="k", event_time=5), b"x", checksum=False),
        encode_headers_and_payload(metadata(num_messages_in_batch=3), batch()),
        encode_headers_and_payload(metadata(deliver_at_time=2_000_000_000_000, uuid="u", chunk_id=0), b"c"),
    ]
    raw = batch(4)
    for codec in (CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY):
        md = metadata(num_messages_in_batch=4, compression=codec, uncompressed_size=len(raw))
        out.append(encode_headers_and_payload(md, compress(codec, raw)))
    return out


def client_frames() -> list[bytes]:
    """One frame of each command a client sends after CONNECT (ids 1, topic ``TOPIC``)."""
    span = spans()
    return [
        requests.new_partitioned_metadata(TOPIC, 1),
        requests.new_lookup(TOPIC, 2),
        requests.new_producer(TOPIC, 1, 3),
        requests.new_send(1, 0, span[0]),
        requests.new_send(1, 1, span[2], 3),
        requests.new_subscribe(TOPIC, "sub", SubType.Shared, 1, 4),
        requests.new_subscribe(
            TOPIC, "ks", SubType.Key_Shared, 2, 5, key_shared_meta=KeySharedMeta(keySharedMode=0)
        ),
        requests.new_flow(1, 100),
        requests.new_ack(1, [MessageId(0, 0)], AckType.Individual),
        requests.new_ack(1, [MessageId(0, 0)], AckType.Cumulative),
        requests.new_redeliver_unacknowledged_messages(1),
        requests.new_seek(1, 6, message_id=MessageId(0, 0)),
        requests.new_get_last_message_id(1, 7),
        requests.new_get_topics_of_namespace(8, "public/default"),
        requests.new_get_schema(9, TOPIC),
        requests.new_consumer_stats(10, 1),
        requests.new_unsubscribe(1, 11),
    ]


def connect() -> bytes:
    """The CONNECT every ServerCnx input starts with."""
    return requests.new_connect("fuzz")
