"""Key extraction per stored entry (quasar.protocol.entry_keys): the compiled twin and the pure-Python twin
give the same keys and the same errors (class and message) on built, mutated and random entries, and the
same keys as the decode_batch-based extractor they replace, for every compression codec."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.protocol import _entry_keys_c, _entry_keys_py
from quasar.protocol import entry_keys as entry_keys_module
from quasar.protocol.compression import CompressionType, compress, decompress
from quasar.protocol.entry_keys import entry_keys
from quasar.protocol.errors import CompressionError, MalformedBatchError, MalformedFrameError
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.metadata import decode_batch, encode_batch
from quasar.protocol.pb import BrokerEntryMetadata, MessageMetadata, SingleMessageMetadata

from ._helpers import f_bytes, f_varint, varint

TWINS = pytest.mark.parametrize("impl", [_entry_keys_c, _entry_keys_py], ids=["c", "py"])
_U32 = struct.Struct(">I")
many = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------- helpers --


def reference_keys(body: bytes | memoryview) -> list[Any]:
    """The extractor before the compiled one (broker/admin/query.py up to this change), the reference."""
    view = memoryview(body)
    pos = 0
    if len(view) >= 6 and view[0] == 0x0E and view[1] == 0x02:
        pos = 6 + struct.unpack_from(">HI", view, 0)[1]
    if len(view) >= pos + 6 and view[pos] == 0x0E and view[pos + 1] == 0x01:
        pos += 6
    if len(view) < pos + 4:
        raise ValueError("entry too short for its metadata size")
    start = pos + 4
    end = start + _U32.unpack_from(view, pos)[0]
    if end > len(view):
        raise ValueError("metadata size runs past the end of the entry")
    metadata = MessageMetadata.FromString(view[start:end])  # type: ignore[arg-type]
    keys: list[Any] = [metadata.partition_key] if metadata.HasField("partition_key") else []
    if metadata.HasField("num_messages_in_batch") and not metadata.encryption_keys:
        payload: bytes | memoryview = view[end:]
        if metadata.compression:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
        for single, _ in decode_batch(payload, metadata.num_messages_in_batch):
            if single.HasField("partition_key"):
                keys.append(single.partition_key)
    return keys


@contextmanager
def using(impl: ModuleType) -> Iterator[None]:
    """Run entry_keys with ``impl`` as its twin."""
    saved = entry_keys_module._impl
    entry_keys_module._impl = impl
    try:
        yield
    finally:
        entry_keys_module._impl = saved


def outcome(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``("ok", result)`` or ``("error", exception class, message)``."""
    try:
        return ("ok", function(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the outcome of any failure is compared
        return ("error", type(exc), str(exc))


def keys_outcome(impl: ModuleType, body: bytes | memoryview, **kwargs: Any) -> tuple[Any, ...]:
    with using(impl):
        return outcome(entry_keys, body, **kwargs)


def assert_twins_agree(body: bytes | memoryview, **kwargs: Any) -> tuple[Any, ...]:
    compiled = keys_outcome(_entry_keys_c, body, **kwargs)
    assert compiled == keys_outcome(_entry_keys_py, body, **kwargs)
    assert outcome(_entry_keys_c.scan_entry, body) == outcome(_entry_keys_py.scan_entry, body)
    return compiled


def frame_batch(items: list[tuple[bytes, bytes]]) -> bytes:
    """A batch payload from already serialized ``(SingleMessageMetadata bytes, item payload)`` pairs."""
    return b"".join(_U32.pack(len(metadata)) + metadata + payload for metadata, payload in items)


def entry(
    metadata: MessageMetadata | bytes, payload: bytes, *, checksum: bool = True, bem: bool = False
) -> bytes:
    body = encode_headers_and_payload(metadata, payload, checksum=checksum)
    if bem:
        serialized = BrokerEntryMetadata(broker_timestamp=1234, index=7).SerializeToString()
        body = struct.pack(">HI", 0x0E02, len(serialized)) + serialized + body
    return body


def batch_entry(
    keys: list[str | None],
    *,
    compression: CompressionType = CompressionType.NONE,
    top_key: str | None = None,
    encrypted: bool = False,
    payload_size: int = 100,
) -> bytes:
    items = []
    for index, key in enumerate(keys):
        single = SingleMessageMetadata(sequence_id=index, event_time=5)
        if key is not None:
            single.partition_key = key
        items.append((single, bytes([index % 256]) * payload_size))
    payload = encode_batch(items)
    metadata = MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=len(keys)
    )
    if top_key is not None:
        metadata.partition_key = top_key
    if compression:
        metadata.compression = compression
        metadata.uncompressed_size = len(payload)
        payload = compress(compression, payload)
    if encrypted:
        metadata.encryption_keys.add(key="rsa", value=b"secret")
        metadata.encryption_algo = "RSA"
    return entry(metadata, payload)


# --------------------------------------------------------------------------------------- strategies --

key_strategy = st.one_of(st.none(), st.text(max_size=12))


@st.composite
def built_entries(draw: st.DrawFn, compressions: list[CompressionType] | None = None) -> bytes:
    """Valid stored entries built with the generated protobuf classes and encode_batch."""
    metadata = MessageMetadata(
        producer_name=draw(st.text(min_size=1, max_size=8)),
        sequence_id=draw(st.integers(0, 2**64 - 1)),
        publish_time=draw(st.integers(0, 2**64 - 1)),
    )
    top_key = draw(key_strategy)
    if top_key is not None:
        metadata.partition_key = top_key
    for name, value in draw(st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3)):
        metadata.properties.add(key=name, value=value)
    if draw(st.booleans()):
        metadata.event_time = draw(st.integers(0, 2**64 - 1))
    if draw(st.booleans()):
        metadata.ordering_key = draw(st.binary(max_size=6))
    if draw(st.booleans()):
        items = []
        for key, item_payload, extras in draw(
            st.lists(st.tuples(key_strategy, st.binary(max_size=30), st.booleans()), max_size=16)
        ):
            single = SingleMessageMetadata()
            if key is not None:
                single.partition_key = key
            if extras:
                single.properties.add(key="a", value="b")
                single.sequence_id = draw(st.integers(0, 2**64 - 1))
                single.ordering_key = b"ok"
                single.null_value = True
            items.append((single, item_payload))
        payload = encode_batch(items)
        metadata.num_messages_in_batch = len(items)
        compression = draw(st.sampled_from(compressions or list(CompressionType)))
        if compression:
            metadata.compression = compression
            metadata.uncompressed_size = len(payload)
            payload = compress(compression, payload)
        if draw(st.integers(0, 9)) == 0:
            metadata.encryption_keys.add(key="k", value=b"v")
    else:
        payload = draw(st.binary(max_size=40))
    return entry(metadata, payload, checksum=draw(st.booleans()), bem=draw(st.booleans()))


def raw_field(number: int, wire_type: int, value: int | bytes) -> bytes:
    """One field; ``value`` is turned into what the wire type holds (an int for a varint, bytes else)."""
    if wire_type == 0:
        return f_varint(number, value if isinstance(value, int) else int.from_bytes(value, "little"))
    data = value if isinstance(value, bytes) else varint(value)
    if wire_type == 2:
        return f_bytes(number, data)
    width = 8 if wire_type == 1 else 4
    return varint((number << 3) | wire_type) + data.ljust(width, b"\0")[:width]


#: Fields of any number and wire type, including the ones read (2, 3 of SingleMessageMetadata; 6, 8, 9, 11, 13
#: of MessageMetadata) with the expected and with other wire types, values past 32 bits and negative ones.
any_field = st.builds(
    raw_field,
    st.one_of(st.sampled_from([1, 2, 3, 4, 6, 8, 9, 11, 13, 17, 2**29 - 1]), st.integers(1, 40)),
    st.sampled_from([0, 1, 2, 5]),
    st.one_of(
        st.integers(-(2**63), 2**64 - 1),
        st.binary(max_size=8),
        st.text(max_size=4).map(str.encode),
        st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80"]),
    ),
)
#: Bytes that break the wire format: a tag of field 0, a group, wire type 7, an 11-byte varint, a cut field.
bad_field = st.sampled_from(
    [b"\x00", b"\x0b", b"\x0f", b"\x18" + b"\xff" * 10 + b"\x01", b"\x12\x05ab", b"\x19\x01"]
)


@st.composite
def message_bytes(draw: st.DrawFn, key_field: int) -> bytes:
    """A protobuf message of random fields, often with a key in ``key_field``, sometimes with a bad field."""
    fields = draw(st.lists(any_field, max_size=5))
    if draw(st.booleans()):
        fields.insert(draw(st.integers(0, len(fields))), f_bytes(key_field, draw(st.text(max_size=6))))
    if draw(st.integers(0, 7)) == 0:
        fields.insert(draw(st.integers(0, len(fields))), draw(bad_field))
    return b"".join(fields)


@st.composite
def fuzzed_batches(draw: st.DrawFn) -> tuple[bytes, int]:
    """Batch payloads whose SingleMessageMetadata are random field sequences, with a count near the truth."""
    items = []
    for _ in range(draw(st.integers(0, 6))):
        payload = draw(st.binary(max_size=12))
        metadata = draw(message_bytes(2))
        if draw(st.booleans()):
            metadata += f_varint(3, len(payload))
        items.append((metadata, payload))
    data = frame_batch(items)
    if draw(st.booleans()):
        data += draw(st.binary(max_size=6))
    return data, len(items) + draw(st.sampled_from([0, 0, 0, -1, 1, -len(items) - 1]))


@st.composite
def fuzzed_entries(draw: st.DrawFn) -> bytes:
    """Entries whose MessageMetadata and batch items carry random fields."""
    data, count = draw(fuzzed_batches())
    metadata = draw(message_bytes(6)) + f_varint(11, count) + draw(message_bytes(6))
    return entry(metadata, data, checksum=draw(st.booleans()), bem=draw(st.booleans()))


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """``base`` with a few bytes replaced, inserted or deleted, or cut short."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        if action == "replace" and data:
            data[position] = draw(st.integers(0, 255))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=3))
        elif action == "delete" and data:
            del data[position]
        elif action == "cut":
            del data[position:]
    return bytes(data)


# -------------------------------------------------------------------------------------------- twins --


@many
@given(built_entries())
def test_built_entries_match_the_reference_in_both_twins(body: bytes):
    expected = reference_keys(body)
    assert assert_twins_agree(body) == ("ok", expected)
    assert assert_twins_agree(memoryview(body)) == ("ok", expected)


@many
@given(st.one_of(mutated(built_entries(compressions=[CompressionType.NONE])), mutated(built_entries())))
def test_twins_agree_on_mutated_entries(body: bytes):
    result = assert_twins_agree(body)
    if result[0] == "error":
        assert issubclass(result[1], (MalformedFrameError, MalformedBatchError, CompressionError))


@many
@given(fuzzed_entries())
def test_twins_agree_on_entries_with_random_fields(body: bytes):
    result = assert_twins_agree(body)
    try:
        expected = reference_keys(body)
    except Exception:  # noqa: BLE001 - the reference also parses properties and other sub-messages: stricter there
        return
    if all(isinstance(key, str) for key in expected):  # the reference returned bytes for a key not UTF-8
        assert result == ("ok", expected)


@many
@given(st.binary(max_size=64))
def test_twins_agree_on_random_bytes(body: bytes):
    assert_twins_agree(body)
    assert_twins_agree(b"\x00\x00\x00" + bytes([len(body)]) + body)
    assert_twins_agree(b"\x0e\x01\x00\x00\x00\x00" + body)


@many
@given(fuzzed_batches())
def test_batch_keys_twins_agree(batch: tuple[bytes, int]):
    data, count = batch
    assert outcome(_entry_keys_c.batch_keys, data, count) == outcome(_entry_keys_py.batch_keys, data, count)


@many
@given(st.binary(max_size=40), st.integers(-3, 6))
def test_batch_keys_twins_agree_on_random_bytes(data: bytes, count: int):
    assert outcome(_entry_keys_c.batch_keys, data, count) == outcome(_entry_keys_py.batch_keys, data, count)


@pytest.mark.parametrize("compression", list(CompressionType), ids=lambda c: c.name)
def test_every_prefix_of_an_entry_fails_alike(compression: CompressionType):
    body = batch_entry(["a", None, "bé"], compression=compression, top_key="top", payload_size=5)
    for size in range(len(body)):
        result = assert_twins_agree(body[:size])
        assert result[0] == "error"
        assert issubclass(result[1], (MalformedFrameError, MalformedBatchError, CompressionError))


@TWINS
def test_arguments_that_are_not_buffers(impl: ModuleType):
    with pytest.raises(TypeError):
        impl.scan_entry("text")
    with pytest.raises(BufferError):
        impl.scan_entry(memoryview(b"abcdefgh")[::2])
    with pytest.raises(TypeError):
        impl.batch_keys(b"", 1.0)
    with pytest.raises(OverflowError):
        impl.batch_keys(b"", 2**63)
    with pytest.raises(TypeError):
        impl.batch_keys(b"")
    assert impl.scan_entry(bytearray(batch_entry(["x"])))[0] == ["x"]
    compressed = batch_entry(["x", "y"], compression=CompressionType.ZLIB)
    with using(impl):
        assert entry_keys(memoryview(compressed).cast("B", (1, len(compressed)))) == ["x", "y"]
    assert impl.scan_entry(memoryview(batch_entry(["x"])).cast("B", (1, len(batch_entry(["x"])))))[0] == ["x"]


# ------------------------------------------------------------------------------------------ behaviour --


@TWINS
@pytest.mark.parametrize("compression", list(CompressionType), ids=lambda c: c.name)
def test_keys_of_a_batch_in_order(impl: ModuleType, compression: CompressionType):
    body = batch_entry(["k0", None, "", "ключ", "k0"], compression=compression, top_key="top")
    with using(impl):
        assert entry_keys(body) == ["top", "k0", "", "ключ", "k0"] == reference_keys(body)


@TWINS
@pytest.mark.parametrize("compression", list(CompressionType), ids=lambda c: c.name)
def test_a_batch_without_keys_gives_none(impl: ModuleType, compression: CompressionType):
    body = batch_entry([None] * 1000, compression=compression)
    with using(impl):
        assert entry_keys(body) == []


@TWINS
def test_scan_entry_leaves_a_compressed_batch_to_the_caller(impl: ModuleType):
    body = batch_entry(["a", "b"], compression=CompressionType.ZSTD, top_key="top", payload_size=3)
    keys, compression, uncompressed_size, count, payload_start = impl.scan_entry(body)
    assert (keys, compression, count) == (["top"], CompressionType.ZSTD, 2)
    metadata = MessageMetadata.FromString(body[10:payload_start])
    assert uncompressed_size == metadata.uncompressed_size
    payload = decompress(compression, body[payload_start:], uncompressed_size)
    assert impl.batch_keys(payload, count) == ["a", "b"]
    assert impl.scan_entry(batch_entry(["a"]))[1:] == (0, 0, 0, 0)


@TWINS
def test_an_encrypted_batch_is_not_opened(impl: ModuleType):
    body = batch_entry(["a", "b"], top_key="top", encrypted=True)
    with using(impl):
        assert entry_keys(body) == ["top"]
    # not even a payload that is not a batch at all
    metadata = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=5)
    metadata.encryption_keys.add(key="rsa", value=b"x")
    with using(impl):
        assert entry_keys(entry(metadata, b"\xff" * 50)) == []


@TWINS
def test_a_single_message_entry(impl: ModuleType):
    metadata = MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, partition_key="only")
    with using(impl):
        assert entry_keys(entry(metadata, b"payload, not a batch")) == ["only"]
        assert entry_keys(entry(metadata, b"", checksum=False, bem=True)) == ["only"]
        metadata.ClearField("partition_key")
        metadata.compression = CompressionType.LZ4  # not a batch: nothing is decompressed
        assert entry_keys(entry(metadata, b"\xff\xff")) == []


@TWINS
def test_protobuf_rules_for_the_fields_read(impl: ModuleType):
    item = f_varint(3, 1) + f_bytes(2, "first") + f_bytes(2, "last") + f_varint(2, 7)  # varint 2: unknown
    data = frame_batch([(item, b"x"), (f_bytes(3, b"\x01") + f_varint(3, 0), b"")])  # bytes 3: unknown
    head = b"\x0a\x01p\x10\x01\x18\x02"
    metadata = (
        head + f_varint(11, 2) + f_varint(8, 7) + f_varint(8, 2**32) + f_bytes(13, b"") + f_varint(13, 1)
    )
    # compression 7 is not a CompressionType, 2**32 reads as 0 (int32): NONE; encryption_keys as a varint is
    # an unknown field, as a (empty) message it marks the entry encrypted
    assert impl.scan_entry(entry(metadata, data))[0] == []
    metadata = head + f_varint(11, 2) + f_varint(8, 7) + f_varint(13, 1) + f_varint(11, 2**32 + 2)
    assert impl.scan_entry(entry(metadata, data))[0] == ["last"]
    assert (
        impl.batch_keys(data, 2)
        == ["last"]
        == [s.partition_key for s, _ in decode_batch(data, 2) if s.partition_key]
    )


def plain(metadata: bytes, payload: bytes = b"") -> bytes:
    """``[metadataSize][metadata][payload]`` from raw metadata bytes."""
    return _U32.pack(len(metadata)) + metadata + payload


@TWINS
@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (b"", MalformedFrameError, "entry has no metadataSize field"),
        (b"\x0e\x02\x00", MalformedFrameError, "broker entry metadata header runs past the end of the entry"),
        (b"\x0e\x02\x00\x00\x00\x09ab", MalformedFrameError, "brokerEntryMetadataSize 9 runs past"),
        (b"\x0e\x01\x00\x00", MalformedFrameError, "checksum header runs past the end of the entry"),
        (
            b"\x00\x00\x00\x05abc",
            MalformedFrameError,
            "metadataSize 5 runs past the end of the entry \\(3 bytes",
        ),
        (plain(b"\x32\x05"), MalformedFrameError, "unparsable MessageMetadata: truncated field at byte 0"),
        (plain(b"\x08\x01\x07"), MalformedFrameError, "MessageMetadata: invalid tag at byte 2"),
        (plain(b"\x32\x01\xff"), MalformedFrameError, "MessageMetadata partition_key is not valid UTF-8"),
        (plain(f_varint(11, -1)), MalformedBatchError, "negative message count -1"),
        (
            plain(f_varint(11, 1), b"\x00\x00"),
            MalformedBatchError,
            "num_messages_in_batch 1 cannot fit in 2 bytes \\(a batch item takes at least 6\\)",
        ),
        (
            plain(f_varint(11, 10**6), b"\x00\x00\x00\x02\x18\x00" * 1000),
            MalformedBatchError,
            "num_messages_in_batch 1000000 cannot fit in 6000 bytes",
        ),
        (
            plain(f_varint(11, 2), b"\x00\x00\x00\x02\x18\x04abcd\x00\x00"),
            MalformedBatchError,
            "batch item 1 of 2: no room",
        ),
        (
            plain(f_varint(11, 1), b"\x00\x00\x00\x09\x18\x00"),
            MalformedBatchError,
            "batch item 0: metadata size 9 runs",
        ),
        (plain(f_varint(11, 0), b"\x01"), MalformedBatchError, "1 bytes left over after 0 batch items"),
    ],
)
def test_malformed_entries(impl: ModuleType, body: bytes, error: type[Exception], message: str):
    with pytest.raises(error, match=message):
        impl.scan_entry(body)


@TWINS
@pytest.mark.parametrize(
    ("item", "payload", "message"),
    [
        (b"\x12\x01a", b"", "batch item 0: SingleMessageMetadata without payload_size"),
        (b"\x18\x00\x12\x02\xc3\x28", b"", "batch item 0: partition_key is not valid UTF-8"),
        (
            b"\x18\x00\x12\x03\xed\xa0\x80",
            b"",
            "batch item 0: partition_key is not valid UTF-8",
        ),  # a surrogate
        (b"\x18\x05", b"abc", "batch item 0: payload_size 5 runs past the payload"),
        (b"\x18" + varint(-2), b"", "batch item 0: payload_size -2 runs past the payload"),
        (b"\x18\x00\x1a", b"", "batch item 0: unparsable SingleMessageMetadata: truncated field at byte 2"),
        (
            b"\x18" + b"\x80" * 10 + b"\x00",
            b"",
            "SingleMessageMetadata: varint longer than 10 bytes at byte 0",
        ),
    ],
)
def test_malformed_batch_items(impl: ModuleType, item: bytes, payload: bytes, message: str):
    with pytest.raises(MalformedBatchError, match=message):
        impl.batch_keys(frame_batch([(item, payload)]), 1)


@TWINS
def test_a_compressed_batch_too_large_is_not_decompressed(impl: ModuleType):
    body = batch_entry(["a"] * 100, compression=CompressionType.LZ4)
    with using(impl):
        assert entry_keys(body) == ["a"] * 100
        with pytest.raises(CompressionError, match="above the limit"):
            entry_keys(body, max_uncompressed_size=1000)
    metadata = MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=1, compression=1
    )
    metadata.uncompressed_size = 2**32 - 1
    with using(impl), pytest.raises(CompressionError, match="uncompressed_size 4294967295 is above"):
        entry_keys(entry(metadata, b"\x00" * 10))


@TWINS
def test_large_entries_on_many_threads(impl: ModuleType):
    """Large entries are walked with the GIL released: threads at once still get their own keys."""
    bodies = [batch_entry([f"t{n}-{i}" if i % 7 == 0 else None for i in range(500)]) for n in range(4)]
    expected = [reference_keys(body) for body in bodies]
    failures: list[str] = []

    def work(n: int) -> None:
        for _ in range(50):
            if impl.scan_entry(memoryview(bodies[n]))[0] != expected[n]:
                failures.append(f"thread {n}")
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_count_mismatch_and_leftovers():
    data = frame_batch([(f_varint(3, 1), b"a"), (f_varint(3, 1) + f_bytes(2, "k"), b"b")])
    for impl in (_entry_keys_c, _entry_keys_py):
        assert impl.batch_keys(data, 2) == ["k"]
        with pytest.raises(MalformedBatchError, match="num_messages_in_batch 3 cannot fit in 17 bytes"):
            impl.batch_keys(data, 3)
        with pytest.raises(MalformedBatchError, match="10 bytes left over after 1 batch items"):
            impl.batch_keys(data, 1)


def test_the_broker_extractor_is_entry_keys():
    from quasar.broker.admin.query import pulsar_entry_keys

    body = batch_entry(["x", None, "y"], compression=CompressionType.SNAPPY, top_key="t")
    assert pulsar_entry_keys("persistent://a/b/c", memoryview(body)) == ["t", "x", "y"]
