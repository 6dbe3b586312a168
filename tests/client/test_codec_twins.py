"""The client's codec: the compiled ``_codec_c`` and its pure-Python twin ``_codec_py`` give the same bytes,
objects and exception classes for every input, and their bytes are protobuf's (what the official client
writes and reads)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.client import _codec_py, _incoming_py
from quasar.client.message import Message, OutgoingMessage
from quasar.protocol import MessageId, commands, pb
from quasar.protocol.frame import encode_headers_and_payload

_codec_c = pytest.importorskip("quasar.client._codec_c", reason="the compiled twin is not built")
_incoming_c = pytest.importorskip("quasar.client._incoming_c", reason="the compiled twin is not built")

TWINS = (_codec_c, _codec_py)
RECEIVE_TWINS = (_incoming_c, _incoming_py)
U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=12)
ANY_INT = st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([-1, 0, 2**31, 2**32, 2**63, 2**64]), st.booleans()
)
JUNK = st.one_of(st.none(), ANY_INT, TEXT, st.binary(max_size=6), st.floats(allow_nan=False), st.just([1]))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(function: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", function(*args)
    except Exception as exc:  # noqa: BLE001  # the class is what is compared
        return "error", type(exc)


def _same(name: str, *args: Any, twins: tuple[Any, Any] = TWINS) -> tuple[str, Any]:
    results = [_outcome(getattr(twin, name), *args) for twin in twins]
    assert results[0] == results[1], (name, args, results)
    return results[0]


def _same_receive(name: str, *args: Any) -> tuple[str, Any]:
    return _same(name, *args, twins=RECEIVE_TWINS)


# ------------------------------------------------------------------------------------ metadata --


@st.composite
def metadata_args(draw: st.DrawFn) -> list[Any]:
    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(st.none(), strategy))

    return [
        draw(TEXT),
        draw(U64),
        draw(U64),
        maybe(st.dictionaries(TEXT, TEXT, max_size=3)),
        maybe(TEXT),
        maybe(st.lists(TEXT, max_size=2)),
        maybe(st.integers(0, 4)),
        maybe(st.integers(0, 2**32 - 1)),
        maybe(I32),
        maybe(U64),
        maybe(st.binary(max_size=6)),
        maybe(st.binary(max_size=6)),
        maybe(st.integers(-(2**63), 2**63 - 1)),
        maybe(U64),
        maybe(TEXT),
        maybe(I32),
        maybe(I32),
        maybe(I32),
    ]


def _protobuf_metadata(args: list[Any]) -> bytes:
    md = pb.MessageMetadata(producer_name=args[0], sequence_id=args[1], publish_time=args[2])
    for key, value in (args[3] or {}).items():
        md.properties.add(key=key, value=value)
    names = [None, None, None, None, "partition_key", None, "compression", "uncompressed_size",
             "num_messages_in_batch", "event_time", "schema_version", "ordering_key", "deliver_at_time",
             "highest_sequence_id", "uuid", "num_chunks_from_msg", "total_chunk_msg_size", "chunk_id"]  # fmt: skip
    for name, value in zip(names, args, strict=True):
        if name is not None and value is not None and not (name == "schema_version" and not value):
            setattr(md, name, value)
    if args[5] is not None:
        md.replicate_to.extend(args[5])
    return md.SerializeToString()


@SETTINGS
@given(metadata_args())
def test_metadata_is_protobufs(args: list[Any]) -> None:
    kind, result = _same("encode_metadata", *args)
    assert kind == "ok"
    assert result == _protobuf_metadata(args)


@SETTINGS
@given(metadata_args(), st.integers(0, 17), JUNK)
def test_metadata_refuses_bad_values_alike(args: list[Any], index: int, junk: Any) -> None:
    args[index] = junk
    _same("encode_metadata", *args)


def test_metadata_refuses_unencodable_text_and_bad_properties_alike() -> None:
    base: list[Any] = ["p", 1, 2] + [None] * 15
    for index, value in (
        (0, "\ud800"),
        (3, {"k": 1}),
        (3, {1: "v"}),
        (3, [("k", "v")]),
        (3, 7),
        (5, ["a", 1]),
    ):
        args = list(base)
        args[index] = value
        _same("encode_metadata", *args)
    _same("encode_metadata", *base[:5])


# ----------------------------------------------------------------------------- single metadata --


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    U64,
    st.one_of(st.none(), st.dictionaries(TEXT, TEXT, max_size=3)),
    st.one_of(st.none(), TEXT),
    st.one_of(st.none(), U64),
    st.one_of(st.none(), st.binary(max_size=6)),
)
def test_single_metadata_is_protobufs(
    size: int, sid: int, props: Any, key: Any, event: Any, okey: Any
) -> None:
    kind, result = _same("encode_single_metadata", size, sid, props, key, event, okey)
    assert kind == "ok"
    md = pb.SingleMessageMetadata(payload_size=size, sequence_id=sid)
    for k, v in (props or {}).items():
        md.properties.add(key=k, value=v)
    if key is not None:
        md.partition_key = key
    if event is not None:
        md.event_time = event
    if okey is not None:
        md.ordering_key = okey
    assert result == md.SerializeToString()


@SETTINGS
@given(st.lists(JUNK, min_size=6, max_size=6))
def test_single_metadata_refuses_bad_values_alike(args: list[Any]) -> None:
    _same("encode_single_metadata", *args)


# --------------------------------------------------------------------------------------- send --


@SETTINGS
@given(
    U64,
    U64,
    st.one_of(st.none(), I32),
    st.one_of(st.none(), U64),
    st.booleans(),
    metadata_args(),
    st.binary(max_size=300),
)
def test_send_frame_is_the_protocol_layers(
    producer_id: int, sid: int, num: Any, highest: Any, chunk: bool, md: list[Any], payload: bytes
) -> None:
    metadata = _codec_py.encode_metadata(*md)
    kind, frame = _same("encode_send", producer_id, sid, num, highest, chunk, metadata, payload)
    assert kind == "ok"
    span = encode_headers_and_payload(metadata, payload)
    expected = commands.new_send(producer_id, sid, span, num, highest_sequence_id=highest, is_chunk=chunk)
    assert frame == expected


def test_send_takes_any_contiguous_payload_alike() -> None:
    data = bytes(range(200))
    for payload in (bytearray(data), memoryview(data)[10:90], memoryview(data)[::2], "text", 5):
        _same("encode_send", 1, 2, None, None, True, b"", payload)
    frames = {twin.encode_send(1, 2, None, None, True, b"", memoryview(data)[10:90]) for twin in TWINS}
    assert frames == {TWINS[1].encode_send(1, 2, None, None, True, b"", data[10:90])}


def test_send_frame_of_a_large_payload_is_the_same() -> None:
    payload = bytes(range(256)) * 4096  # above the size where the CRC runs without the GIL
    frames = [
        twin.encode_send(1, 2, None, None, False, b"\x0a\x01p\x10\x02\x18\x03", payload) for twin in TWINS
    ]
    assert frames[0] == frames[1]


@SETTINGS
@given(st.lists(JUNK, min_size=7, max_size=7))
def test_send_refuses_bad_values_alike(args: list[Any]) -> None:
    _same("encode_send", *args)


# ------------------------------------------------------------------------------------- batches --


class _Item:
    def __init__(
        self, payload: Any, properties: Any = None, key: Any = None, event: Any = None, okey: Any = None
    ):
        self.payload = payload
        self.properties = properties
        self.partition_key = key
        self.event_timestamp = event
        self.ordering_key = okey


ITEMS = st.one_of(
    st.tuples(st.just("plain"), st.binary(max_size=40), U64, st.booleans()),
    st.tuples(
        st.just("add"),
        st.binary(max_size=40),
        U64,
        st.one_of(st.none(), st.dictionaries(TEXT, TEXT, max_size=2)),
        st.one_of(st.none(), TEXT),
        st.one_of(st.none(), U64),
        st.one_of(st.none(), st.binary(max_size=4)),
    ),
    st.tuples(st.just("plain"), JUNK, JUNK, st.booleans()),
    st.tuples(st.just("add"), JUNK, JUNK, JUNK, JUNK, JUNK, JUNK),
    st.tuples(st.just("room"), JUNK),
    st.tuples(st.just("take")),
    st.tuples(st.just("discard")),
)


def _state(container: Any) -> tuple[Any, ...]:
    return (container.num_messages, container.current_bytes, container.sequence_id,
            container.highest_sequence_id, container.is_empty, container.size_limit)  # fmt: skip


@SETTINGS
@given(st.integers(-2, 6), st.integers(-2, 200), st.integers(1, 400), st.lists(ITEMS, max_size=25))
def test_batch_container_twins_agree(
    max_messages: int, max_bytes: int, max_size: int, ops: list[Any]
) -> None:
    containers = [twin.BatchContainer(max_messages, max_bytes, max_size) for twin in TWINS]
    for waiter, op in enumerate(ops):
        results = []
        item = _Item(op[1], *op[3:]) if op[0] == "add" else None
        for container in containers:
            if op[0] == "plain":
                results.append(_outcome(container.add_plain, op[1], op[2], waiter, op[3]))
            elif op[0] == "add":
                results.append(_outcome(container.add, item, op[2], waiter))
            elif op[0] == "room":
                results.append(_outcome(container.has_enough_space, op[1]))
            elif op[0] == "take":
                results.append(_outcome(container.take))
            else:
                results.append(_outcome(container.discard))
        assert results[0] == results[1], (op, results)
        assert _state(containers[0]) == _state(containers[1])


def test_batch_payload_is_what_protobuf_and_the_old_container_write() -> None:
    for twin in TWINS:
        container = twin.BatchContainer(10, 0, 1000)
        assert container.add_plain(b"m0", 0, "w0") is False
        assert container.add(_Item(b"m1", {"a": "b"}, "k", 5, b"o"), 1, "w1") is False
        assert container.add_plain(b"m2", 300, None) is False
        payload, count, first_sid, last_sid, waiters, first = container.take()
        assert (count, first_sid, last_sid, waiters, first) == (3, 0, 300, ["w0", "w1", None], None)
        expected = b""
        for data, sid, extra in ((b"m0", 0, {}), (b"m1", 1, {"partition_key": "k", "event_time": 5,
                                                             "ordering_key": b"o"}), (b"m2", 300, {})):  # fmt: skip
            md = pb.SingleMessageMetadata(payload_size=len(data), sequence_id=sid, **extra)
            if sid == 1:
                md.properties.add(key="a", value="b")
            single = md.SerializeToString()
            expected += struct.pack(">I", len(single)) + single + data
        assert payload == expected
        assert container.is_empty and container.num_messages == 0
        with pytest.raises(ValueError):
            container.take()


def test_batch_container_can_be_subclassed_and_reused() -> None:
    for twin in TWINS:

        class Sub(twin.BatchContainer):  # type: ignore[name-defined,misc]
            __slots__ = ()

        container = Sub(2, 0, 100)
        for round_ in range(3):
            assert container.add_plain(b"x" * 50, round_ * 2, None) is False
            assert container.add_plain(b"y" * 50, round_ * 2 + 1, None) is True
            assert container.add_plain(b"z", 9, None) is None  # full: refused
            assert container.add_plain(b"z", 9, None, False) is None
            with pytest.raises(TypeError):
                container.add_plain(b"z", 9, None, forced=True)
            assert container.take()[1] == 2
        assert container.add_plain(b"z" * 200, 9, None, force=True) is False  # empty: taken, not full


# ------------------------------------------------------------------------------------- splitting --


def _batch(items: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(struct.pack(">I", len(single)) + single + data for single, data in items)


def _single(data: bytes, sid: int | None, key: str | None = None) -> bytes:
    md = pb.SingleMessageMetadata(payload_size=len(data))
    if sid is not None:
        md.sequence_id = sid
    if key is not None:
        md.partition_key = key
    return md.SerializeToString()


def _messages(result: Any) -> Any:
    kind, value = result
    if kind != "ok":
        return result
    messages, skipped = value
    described = []
    for m in messages:
        single = (
            m._single if isinstance(m._single, bytes) else ("parsed", m._single.SerializePartialToString())
        )
        described.append((m.data(), m.entry, m.batch_index, single))
    return kind, described, skipped


ITEM = st.tuples(st.binary(max_size=20), st.one_of(st.none(), U64), st.one_of(st.none(), TEXT))


@SETTINGS
@given(st.lists(ITEM, max_size=6), st.binary(max_size=3), st.integers(-1, 8), st.sets(st.integers(0, 7)))
def test_split_of_a_valid_batch_agrees_and_keeps_every_item(
    items: list[Any], prefix: bytes, count_delta: int, dropped: set[int]
) -> None:
    payload = prefix + _batch([(_single(d, s, k), d) for d, s, k in items])
    parse = pb.SingleMessageMetadata.FromString
    results = [
        _messages(_outcome(twin.split_batch, payload, len(prefix), len(items), None, "E", Message, parse))
        for twin in RECEIVE_TWINS
    ]
    assert results[0] == results[1]
    assert results[0][0] == "ok" and [m[0] for m in results[0][1]] == [d for d, _, _ in items]
    assert [m[2] for m in results[0][1]] == list(range(len(items)))

    def keep(index: int) -> bool:
        return index not in dropped

    for count in (len(items), len(items) + count_delta):
        results = [
            _messages(_outcome(twin.split_batch, payload, len(prefix), count, keep, "E", Message, parse))
            for twin in RECEIVE_TWINS
        ]
        assert results[0] == results[1]


@SETTINGS
@given(st.binary(max_size=80), st.integers(-2, 90), st.integers(-1, 6))
def test_split_of_random_bytes_agrees(payload: bytes, offset: int, count: int) -> None:
    parse = pb.SingleMessageMetadata.FromString
    results = [
        _messages(_outcome(twin.split_batch, payload, offset, count, None, "E", Message, parse))
        for twin in RECEIVE_TWINS
    ]
    assert results[0] == results[1]


@SETTINGS
@given(st.lists(ITEM, min_size=1, max_size=4), st.data())
def test_split_of_a_mangled_batch_agrees(items: list[Any], data: st.DataObject) -> None:
    payload = bytearray(_batch([(_single(d, s, k), d) for d, s, k in items]))
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    parse = pb.SingleMessageMetadata.FromString
    results = [
        _messages(_outcome(twin.split_batch, bytes(payload), 0, len(items), None, "E", Message, parse))
        for twin in RECEIVE_TWINS
    ]
    assert results[0] == results[1]


def test_split_refuses_bad_arguments_alike() -> None:
    parse = pb.SingleMessageMetadata.FromString
    good = _batch([(_single(b"a", 1), b"a")])
    for args in (
        (bytearray(good), 0, 1, None, "E", Message, parse),
        (good, 0, 1, None, "E", object, parse),
        (good, 0, 1, None, "E", "Message", parse),
        (good, 0, 1, None, "E", OutgoingMessage, parse),
        (good, 0, 1, lambda i: 1 / 0, "E", Message, parse),
        (good, "0", 1, None, "E", Message, parse),
        (good, 0, 2**70, None, "E", Message, parse),
        (_batch([(b"\x0a\x00", b"")]), 0, 1, None, "E", Message, parse),
        (
            _batch([(b"\x18\x7f", b"")]),
            0,
            1,
            None,
            "E",
            Message,
            lambda b: pb.SingleMessageMetadata(payload_size=-1),
        ),
        (_batch([(b"\x18\xff\xff\xff\xff\x0f", b"")]), 0, 1, None, "E", Message, parse),
    ):
        results = [_messages(_outcome(twin.split_batch, *args)) for twin in RECEIVE_TWINS]
        assert results[0] == results[1], (args, results)


# ----------------------------------------------------------------------------------- receipts --


def test_receipt_completion_agrees() -> None:
    loop = asyncio.new_event_loop()
    try:
        for size in (0, 1, 3):
            outcomes = []
            for twin in RECEIVE_TWINS:
                calls: list[Any] = []
                done = loop.create_future()
                done.set_result("earlier")
                futures = [
                    loop.create_future(),
                    None,
                    done,
                    lambda error, mid, calls=calls: calls.append((error, mid)),
                ]
                twin.complete_receipt(
                    futures, 5, 6, 2, size, MessageId, asyncio.Future, lambda w, mid: w(None, mid)
                )
                outcomes.append(([futures[0].result(), done.result()], calls))
            assert outcomes[0] == outcomes[1]
            assert outcomes[0][0][0] == MessageId(5, 6, 2, 0 if size else -1, size)
            assert outcomes[0][1] == [(None, MessageId(5, 6, 2, 3 if size else -1, size))]
    finally:
        loop.close()


def test_receipt_completion_refuses_bad_arguments_alike() -> None:
    def fails(waiter: Any, mid: Any) -> None:
        raise RuntimeError("callback")

    for args in (
        ((None,), 1, 2, -1, 0, MessageId, asyncio.Future, fails),
        ([None], 1, 2, -1, "0", MessageId, asyncio.Future, fails),
        ([None], 1, 2, -1, 0, Message, asyncio.Future, fails),
        ([1], 1, 2, -1, 0, MessageId, asyncio.Future, fails),
        ([1], 1, 2, -1, 2**40, MessageId, asyncio.Future, fails),
    ):
        _same_receive("complete_receipt", *args)


# ----------------------------------------------------------------------------------------- acks --

ID = st.one_of(st.integers(-(2**63), 2**64 - 1), st.sampled_from([-1, 0, 2**63, 2**64 - 1]))


@SETTINGS
@given(U64, st.integers(0, 1), st.lists(st.tuples(ID, ID), max_size=5))
def test_ack_frame_is_the_protocol_layers(consumer_id: int, ack_type: int, entries: list[Any]) -> None:
    kind, frame = _same("encode_ack", consumer_id, ack_type, entries)
    assert kind == "ok"
    assert frame == commands.new_ack(consumer_id, entries, ack_type)


@SETTINGS
@given(
    JUNK, JUNK, st.one_of(JUNK, st.lists(st.one_of(JUNK, st.tuples(JUNK, JUNK), st.tuples(ID)), max_size=3))
)
def test_ack_refuses_bad_values_alike(consumer_id: Any, ack_type: Any, entries: Any) -> None:
    _same("encode_ack", consumer_id, ack_type, entries)


# ------------------------------------------------------------------------------- no crash on abuse --


def test_a_container_without_init_refuses_instead_of_crashing() -> None:
    with pytest.raises(TypeError):
        object.__new__(_codec_c.BatchContainer)
    for container in (_codec_c.BatchContainer.__new__(_codec_c.BatchContainer),):
        for call in (
            lambda c=container: c.add_plain(b"x", 1, None),
            lambda c=container: c.add(OutgoingMessage(b"x"), 1, None),
            container.take,
            container.discard,
        ):
            with pytest.raises(ValueError, match="__init__"):
                call()
        assert container.has_enough_space(1) is False


def test_objects_are_only_made_of_classes_object_new_accepts() -> None:
    class DictWithSlots(dict):  # type: ignore[type-arg]
        __slots__ = ("_data", "_single", "batch_index", "entry")

    class Abstract(Message):
        __slots__ = ()

    Abstract.__abstractmethods__ = frozenset({"x"})  # as abc.ABCMeta marks a class with abstract methods

    good = _batch([(_single(b"a", 1), b"a")])
    for cls in (DictWithSlots, Abstract):
        results = [_outcome(twin.split_batch, good, 0, 1, None, "E", cls, None) for twin in RECEIVE_TWINS]
        assert results[0] == results[1] == ("error", TypeError)
