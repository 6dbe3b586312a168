"""Unit tests of the client's pure parts: SingleMessageMetadata encoder, batch container, routing hashes,
chunk split/assembly."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.client.batch import BatchMessageContainer
from quasar.client.chunking import ChunkAssembler, chunk_count, split_chunks
from quasar.client.config import HashingScheme, PartitionsRoutingMode, ProducerConfig
from quasar.client.message import OutgoingMessage, encode_single_metadata
from quasar.client.routing import MessageRouter, java_string_hash, murmur3_32_hash
from quasar.protocol import MessageId, decode_batch, pb

keys = st.text(max_size=20)


@given(
    size=st.integers(0, 2**31 - 1),
    sequence_id=st.integers(0, 2**63),
    properties=st.none() | st.dictionaries(keys, keys, max_size=3),
    partition_key=st.none() | keys,
    event_time=st.none() | st.integers(0, 2**63),
    ordering_key=st.none() | st.binary(max_size=10),
)
def test_single_metadata_is_byte_identical_to_protobuf(
    size, sequence_id, properties, partition_key, event_time, ordering_key
):
    ours = encode_single_metadata(
        size, sequence_id, properties=properties, partition_key=partition_key, event_time=event_time,
        ordering_key=ordering_key,
    )  # fmt: skip
    reference = pb.SingleMessageMetadata(payload_size=size, sequence_id=sequence_id)
    for key, value in (properties or {}).items():
        reference.properties.add(key=key, value=value)
    if partition_key is not None:
        reference.partition_key = partition_key
    if event_time is not None:
        reference.event_time = event_time
    if ordering_key is not None:
        reference.ordering_key = ordering_key
    assert ours == reference.SerializeToString()


def test_single_metadata_matches_observed_cpp_bytes():
    # reference/pulsar-protocol.md §7.2: "m0" at sequence id 0 -> 18 02 40 00
    assert encode_single_metadata(2, 0) == bytes.fromhex("18024000")


def test_batch_container_have_enough_space_rule():
    batch = BatchMessageContainer(max_messages=3, max_bytes=10, max_message_size=1000)
    assert batch.has_enough_space(10)
    assert not batch.has_enough_space(11)
    assert batch.add(OutgoingMessage(b"12345"), 0, None) is False
    assert batch.has_enough_space(5) and not batch.has_enough_space(6)
    assert batch.add(OutgoingMessage(b"1"), 1, None) is False
    assert batch.add(OutgoingMessage(b"1"), 2, None) is True  # max messages reached -> full
    assert not batch.has_enough_space(0)
    built = batch.build()
    assert (built.num_messages, built.sequence_id, built.highest_sequence_id) == (3, 0, 2)
    assert batch.is_empty
    items = decode_batch(built.payload, 3)
    assert [bytes(p) for _, p in items] == [b"12345", b"1", b"1"]
    assert [s.sequence_id for s, _ in items] == [0, 1, 2]


def test_batch_container_full_by_bytes_and_unbounded_bytes_uses_max_message_size():
    batch = BatchMessageContainer(max_messages=100, max_bytes=4, max_message_size=1000)
    assert batch.add(OutgoingMessage(b"abcd"), 0, None) is True
    unbounded = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=8)
    assert unbounded.has_enough_space(8) and not unbounded.has_enough_space(9)
    with pytest.raises(ValueError):
        BatchMessageContainer(1, 1, 1).build()


@given(st.lists(st.tuples(st.binary(max_size=50), st.none() | keys), min_size=1, max_size=20))
def test_batch_payload_round_trips(items):
    batch = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=1 << 30)
    for seq, (payload, key) in enumerate(items):
        batch.add(OutgoingMessage(payload, partition_key=key), seq + 10, None)
    built = batch.build()
    decoded = decode_batch(built.payload, len(items))
    assert [bytes(p) for _, p in decoded] == [p for p, _ in items]
    assert [s.partition_key if s.HasField("partition_key") else None for s, _ in decoded] == [
        k for _, k in items
    ]


def test_java_string_hash_matches_java():
    assert java_string_hash("hello") == 99162322  # "hello".hashCode()
    assert java_string_hash("") == 0
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE -> & INT_MAX == 0
    assert java_string_hash("polygenelubricants") == 0
    assert java_string_hash("é") == 233  # UTF-16 code unit, not UTF-8 bytes
    assert java_string_hash("😀") == (31 * 0xD83D + 0xDE00) & 0x7FFFFFFF  # surrogate pair


def test_murmur3_32_matches_reference_vectors():
    # MurmurHash3_x86_32 test vectors (seed 0): "" -> 0, "hello" -> 0x248bfa47, "The quick brown fox..." -> 0x2e4ff723
    assert murmur3_32_hash("") == 0
    assert murmur3_32_hash("hello") == 0x248BFA47 & 0x7FFFFFFF
    assert murmur3_32_hash("The quick brown fox jumps over the lazy dog") == 0x2E4FF723 & 0x7FFFFFFF
    assert murmur3_32_hash("abc") == 0xB3DD93FA & 0x7FFFFFFF


def test_router_keyed_messages_use_the_hash():
    router = MessageRouter(ProducerConfig(hashing_scheme=HashingScheme.Murmur3_32Hash))
    assert router.choose(None, "hello", 7) == murmur3_32_hash("hello") % 7
    java = MessageRouter(ProducerConfig(hashing_scheme=HashingScheme.JavaStringHash))
    assert java.choose(None, "hello", 7) == 99162322 % 7


def test_round_robin_without_batching_cycles_and_with_batching_switches_per_window():
    router = MessageRouter(ProducerConfig())
    picks = [router.choose(None, None, 4) for _ in range(8)]
    assert picks[:4] == picks[4:] and sorted(picks[:4]) == [0, 1, 2, 3]
    now = [0]
    batched = MessageRouter(
        ProducerConfig(batching_enabled=True, batching_max_publish_delay_ms=10), clock_ms=lambda: now[0]
    )
    first = batched.choose(None, None, 4)
    now[0] = 99  # same 100 ms window (10 ms x 10)
    assert batched.choose(None, None, 4) == first
    now[0] = 100
    assert batched.choose(None, None, 4) == (first + 1) % 4


def test_single_partition_and_custom_router():
    single = MessageRouter(ProducerConfig(message_routing_mode=PartitionsRoutingMode.UseSinglePartition))
    assert len({single.choose(None, None, 5) for _ in range(20)}) == 1
    custom = MessageRouter(
        ProducerConfig(
            message_routing_mode=PartitionsRoutingMode.CustomPartition, message_router=lambda m, n: n - 1
        )
    )
    assert custom.choose(None, "k", 3) == 2
    bad = MessageRouter(
        ProducerConfig(
            message_routing_mode=PartitionsRoutingMode.CustomPartition, message_router=lambda m, n: n
        )
    )
    with pytest.raises(ValueError, match="message_router"):
        bad.choose(None, None, 3)


def test_chunk_count_follows_the_seed_formula():
    assert chunk_count(0, 10) == 1
    assert chunk_count(10, 10) == 1
    assert chunk_count(11, 10) == 2
    assert chunk_count(5120, 1983) == 3  # reference §7.4: 1983 + 1983 + 1154
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_count(1, 0)


@given(st.binary(max_size=300), st.integers(1, 64))
def test_split_then_assemble_round_trips(payload, chunk_size):
    chunks = split_chunks(payload, chunk_size)
    assert len(chunks) == chunk_count(len(payload), chunk_size)
    assembler = ChunkAssembler()
    result = None
    for index, chunk in enumerate(chunks):
        result, dropped = assembler.add("p-1", index, len(chunks), len(payload), chunk, MessageId(1, index))
        assert dropped == []
    assert result is not None and result.payload == payload
    assert result.chunk_ids == [MessageId(1, i) for i in range(len(chunks))]
    assert len(assembler) == 0


def test_assembler_evicts_oldest_expires_and_drops_broken_sequences():
    now = [0.0]
    assembler = ChunkAssembler(max_pending=2, expire_ms=1000, clock=lambda: now[0])
    assert assembler.add("a", 0, 3, 3, b"a", MessageId(1, 0)) == (None, [])
    assert assembler.add("b", 0, 3, 3, b"b", MessageId(1, 1)) == (None, [])
    assert assembler.add("c", 0, 3, 3, b"c", MessageId(1, 2)) == (None, [MessageId(1, 0)])  # "a" evicted
    assert assembler.add("x", 1, 3, 3, b"x", MessageId(1, 3)) == (None, [MessageId(1, 3)])  # no chunk 0 seen
    assert assembler.add("b", 0, 3, 3, b"b", MessageId(1, 4)) == (None, [])  # duplicate chunk ignored
    assert assembler.add("b", 2, 3, 3, b"b", MessageId(1, 5)) == (None, [MessageId(1, 1), MessageId(1, 5)])
    now[0] = 1.5
    assert assembler.expire() == [MessageId(1, 2)]
    assert len(assembler) == 0


def test_outgoing_messages_are_validated():
    from quasar.client.message import make_outgoing

    with pytest.raises(TypeError, match="content"):
        make_outgoing(123)
    with pytest.raises(TypeError, match="properties"):
        make_outgoing(b"x", properties={"a": 1})
    with pytest.raises(ValueError, match="sequence_id"):
        make_outgoing(b"x", sequence_id=-1)
    with pytest.raises(TypeError, match="partition_key"):
        make_outgoing(b"x", partition_key=5)
    assert make_outgoing("é").payload == "é".encode()
    assert asyncio is not None


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=10))
def test_split_batch_matches_the_protocol_decoder(payloads):
    from quasar.client.batch import split_batch

    batch = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=1 << 30)
    for seq, payload in enumerate(payloads):
        batch.add(OutgoingMessage(payload), seq, None)
    data = batch.build().payload
    ours = split_batch(data, len(payloads))
    reference = decode_batch(data, len(payloads))
    assert [(s, p) for s, p in ours] == [(s, bytes(p)) for s, p in reference]


def test_split_batch_rejects_malformed_payloads():
    from quasar.client.batch import split_batch
    from quasar.client.errors import InvalidMessageError

    batch = BatchMessageContainer(max_messages=0, max_bytes=0, max_message_size=1 << 30)
    batch.add(OutgoingMessage(b"abc"), 0, None)
    data = batch.build().payload
    for bad, count in ((data[:-1], 1), (data, 2), (data + b"x", 1), (b"\x00\x00\x00\x09\xff", 1)):
        with pytest.raises(InvalidMessageError):
            split_batch(bad, count)
