"""Batch append (RocketMQ ``CommitLog.putMessages``) and the trimmed single-put path: the bytes on disk are those
of :func:`encode_record_into`, records read back and recover like single puts."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import tempfile
import textwrap
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.storage import FlushDiskType, MessageStore, PutStatus
from quasar.storage.dispatch import DispatchRequest
from quasar.storage.record import (
    BLANK_MAGIC_CODE,
    HEADER,
    HEADER_MIDDLE,
    HEADER_PACKED,
    PREFIX,
    QUEUE_FLAG,
    decode_record,
    encode_properties,
    encode_record_into,
    ipv4_host,
)
from quasar.storage.results import PutBatchResult, PutResult

from .conftest import SEGMENT_SIZE, abandon, body_for, make_config, open_store, run_writer_until_killed

TOPIC = "persistent://public/default/batch"


def expected_bytes(
    store: MessageStore,
    topic: str,
    queue_id: int,
    result: PutResult,
    body: bytes,
    *,
    properties: dict[str, str] | None = None,
    tag_hash: int = 0,
    born_timestamp: int | None = None,
) -> bytes:
    """The record ``put`` should have written, built by the reference encoder."""
    buf = bytearray(result.wrote_bytes)
    size = encode_record_into(
        buf,
        0,
        topic=topic.encode(),
        queue_id=queue_id,
        queue_offset=result.queue_offset,
        physical_offset=result.commit_log_offset,
        body=body,
        properties=encode_properties(properties, tag_hash),
        store_timestamp=result.store_timestamp,
        born_timestamp=result.store_timestamp if born_timestamp is None else born_timestamp,
        born_host=ipv4_host(*store.config.store_host),
        store_host=ipv4_host(*store.config.store_host),
        append_prop_crc=store.config.enabled_append_prop_crc,
    )
    assert size == result.wrote_bytes
    return bytes(buf)


def stored_bytes(store: MessageStore, result: PutResult) -> bytes:
    return bytes(store.commit_log.read(result.commit_log_offset, result.wrote_bytes))


@pytest.mark.parametrize("topic", [TOPIC, "t" * 300])  # V1 and V2 magic
@pytest.mark.parametrize("crc", [True, False])
def test_put_writes_the_reference_encoding(root: Path, topic: str, crc: bool):
    store = open_store(root, enabled_append_prop_crc=crc, force_verify_prop_crc=crc)
    cases = [
        (b"plain", None, 0, None),
        (bytearray(b"array body"), {"KEYS": "a b", "x": "y"}, 0, 123),
        (memoryview(b"view body"), None, -42, None),
        (memoryview(b"\x01\x02\x03\x04").cast("I"), {"p": "q"}, 7, None),  # cast back to bytes
        (b"", None, 0, None),
    ]
    for body, properties, tag_hash, born in cases:
        result = store.put(topic, 2, body, properties=properties, tag_hash=tag_hash, born_timestamp_ms=born)
        assert result.status is PutStatus.PUT_OK
        raw = bytes(memoryview(body).cast("B"))
        assert stored_bytes(store, result) == expected_bytes(
            store, topic, 2, result, raw, properties=properties, tag_hash=tag_hash, born_timestamp=born
        )
        assert bytes(store.get(topic, 2, result.queue_offset, 1).messages[0].body) == raw
    store.close_sync()


def test_put_batch_records_read_back_byte_for_byte(root: Path):
    store = open_store(root)
    bodies = [body_for(i) for i in range(8)]
    result = store.put_batch(TOPIC, 1, bodies, properties={"k": "v"}, tag_hash=99)
    assert isinstance(result, PutBatchResult) and result.ok
    assert result.count == 8 and list(result.queue_offsets) == list(range(8))
    singles = result.results()
    assert [r.commit_log_offset for r in singles] == list(result.commit_log_offsets)
    assert singles[0].commit_log_offset == result.commit_log_offset
    assert sum(r.wrote_bytes for r in singles) == result.wrote_bytes
    assert singles[-1].end_offset == result.end_offset == store.max_commit_log_offset
    for single, body in zip(singles, bodies, strict=True):
        assert single.store_timestamp == result.store_timestamp
        assert stored_bytes(store, single) == expected_bytes(
            store, TOPIC, 1, single, body, properties={"k": "v"}, tag_hash=99
        )
    got = store.get(TOPIC, 1, 0, 100)
    assert [bytes(m.body) for m in got.messages] == bodies
    assert [m.properties for m in got.messages] == [{"k": "v", "TAG_HASH": "99"}] * 8
    unit = store.consume_queues.get(TOPIC, 1).get_unit(3)
    assert (unit.commit_log_offset, unit.size, unit.tag_hash) == (
        singles[3].commit_log_offset,
        singles[3].wrote_bytes,
        99,
    )
    store.close_sync()


def test_batches_and_single_puts_mix_with_consecutive_queue_offsets(root: Path):
    store = open_store(root)
    expected: list[bytes] = []
    for round_ in range(20):
        body = body_for(round_)
        single = store.put(TOPIC, 0, body)
        assert single.queue_offset == len(expected)
        expected.append(body)
        bodies = [body_for(100 + round_ * 5 + i) for i in range(round_ % 5 + 1)]
        batch = store.put_batch(TOPIC, 0, bodies)
        assert batch.ok and batch.queue_offset == len(expected)
        expected.extend(bodies)
    got = store.get(TOPIC, 0, 0, 1000, max_bytes=1 << 20)
    assert [bytes(m.body) for m in got.messages] == expected
    assert [m.queue_offset for m in got.messages] == list(range(len(expected)))
    assert len(store.commit_log.mapped_file_queue.mapped_files) >= 4  # rolled several times
    assert store.dispatched_commit_log_offset == store.max_commit_log_offset
    store.close_sync()


def test_a_batch_that_does_not_fit_rolls_whole_to_the_next_segment(root: Path):
    store = open_store(root)
    filler = store.put(TOPIC, 0, b"x" * 3000)  # leaves ~950 bytes in segment 0
    bodies = [b"y" * 300, b"z" * 300, b"w" * 300]
    result = store.put_batch(TOPIC, 0, bodies)
    assert result.ok
    assert result.commit_log_offset == SEGMENT_SIZE  # the whole batch went to segment 1
    first = store.commit_log.mapped_file_queue.mapped_files[0]
    size, magic = PREFIX.unpack_from(first.buffer, filler.end_offset)
    assert (size, magic) == (SEGMENT_SIZE - filler.end_offset, BLANK_MAGIC_CODE)
    assert [bytes(m.body) for m in store.get(TOPIC, 0, 1, 10).messages] == bodies
    assert [r.queue_offset for r in result.results()] == [1, 2, 3]
    # a batch that can never fit one segment is refused and writes nothing
    end = store.max_commit_log_offset
    too_big = store.put_batch(TOPIC, 0, [b"a" * 1500] * 3)
    assert too_big.status is PutStatus.MESSAGE_ILLEGAL and too_big.count == 0
    assert store.max_commit_log_offset == end and store.max_queue_offset(TOPIC, 0) == 4
    store.close_sync()


def test_batch_units_cross_consume_queue_files(root: Path):
    store = open_store(root)  # 10 units per consume queue file
    bodies = [b"%d" % i for i in range(23)]  # 23 records fit one 4 KiB segment, not one 10-unit file
    assert store.put(TOPIC, 4, b"first").ok
    result = store.put_batch(TOPIC, 4, bodies)
    assert result.ok and list(result.queue_offsets) == list(range(1, 24))
    queue = store.consume_queues.get(TOPIC, 4)
    assert len(queue.mapped_file_queue.mapped_files) == 3
    for single in result.results():
        unit = queue.get_unit(single.queue_offset)
        assert (unit.commit_log_offset, unit.size) == (single.commit_log_offset, single.wrote_bytes)
    assert queue.max_physic_offset == result.end_offset
    store.close_sync()
    store = open_store(root)  # clean reopen: the units are all there
    assert [bytes(m.body) for m in store.get(TOPIC, 4, 1, 100).messages] == bodies
    store.close_sync()


def test_bad_batches_return_a_status_and_write_nothing(root: Path):
    store = open_store(root)
    assert store.put(TOPIC, 0, b"before").ok
    end = store.max_commit_log_offset
    cases = [
        ([], {}),
        ([b"ok", "not bytes"], {}),
        ([b"ok", b"x" * (store.config.max_message_size + 1)], {}),
        ([b"ok"], {"born_timestamp_ms": 2**70}),
        ([b"ok"], {"properties": {"bad\x01name": "v"}}),
        ([b"ok"], {"tag_hash": 2**64}),
        (b"bytes is not a batch", {}),
    ]
    for bodies, kwargs in cases:
        result = store.put_batch(TOPIC, 0, bodies, **kwargs)
        assert result.status is PutStatus.MESSAGE_ILLEGAL, (bodies, kwargs)
        assert result.commit_log_offsets == () and result.commit_log_offset == -1
    assert store.put(TOPIC, 1, b"queue 1 exists").ok
    for queue_id in (-1, True, 1.0, "1", None):  # True == 1.0 == 1: must not reach queue 1's writer
        assert store.put_batch(TOPIC, queue_id, [b"x"]).status is PutStatus.MESSAGE_ILLEGAL
        assert store.put(TOPIC, queue_id, b"x").status is PutStatus.MESSAGE_ILLEGAL
    assert store.put([TOPIC], 0, b"x").status is PutStatus.MESSAGE_ILLEGAL  # unhashable topic
    end = store.max_commit_log_offset
    assert store.put_batch("", 0, [b"x"]).status is PutStatus.MESSAGE_ILLEGAL
    long_value = {"k": "v" * 40_000}
    assert store.put_batch(TOPIC, 0, [b"x"], properties=long_value).status is (
        PutStatus.PROPERTIES_SIZE_EXCEEDED
    )
    assert store.max_commit_log_offset == end and store.max_queue_offset(TOPIC, 0) == 1
    assert store.max_queue_offset(TOPIC, 1) == 1
    store.close_sync()


def test_batch_with_an_extra_dispatcher_dispatches_every_record(root: Path):
    seen: list[DispatchRequest] = []

    class Recorder:
        def dispatch(self, request: DispatchRequest) -> None:
            seen.append(request)

    store = MessageStore(make_config(root))
    store.dispatchers.append(Recorder())
    store.open()
    result = store.put_batch(TOPIC, 3, [b"a", b"bb", b"ccc"], properties={"KEYS": "k1"}, tag_hash=5)
    assert result.ok
    assert [(r.queue_offset, r.commit_log_offset, r.size, r.keys, r.tag_hash) for r in seen] == [
        (s.queue_offset, s.commit_log_offset, s.wrote_bytes, "k1", 5) for s in result.results()
    ]
    assert [bytes(m.body) for m in store.get(TOPIC, 3, 0, 10).messages] == [b"a", b"bb", b"ccc"]
    store.close_sync()


async def test_put_batch_and_wait_returns_after_the_group_commit(root: Path):
    store = open_store(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    await store.start()
    results = await asyncio.gather(
        *(store.put_batch_and_wait(TOPIC, q, [body_for(q * 10 + i) for i in range(5)]) for q in range(4))
    )
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert store.commit_log.flushed_offset >= max(r.end_offset for r in results)
    refused = await store.put_batch_and_wait(TOPIC, 0, [])
    assert refused.status is PutStatus.MESSAGE_ILLEGAL
    await store.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 2), st.lists(st.binary(max_size=700), min_size=1, max_size=6)),
        min_size=1,
        max_size=25,
    )
)
def test_any_mix_of_puts_and_batches_reads_back_and_recovers(tmp_path: Path, ops):
    """Random single puts and batches on three queues, tiny segments: every record reads back byte for byte,
    before and after an unclean reopen."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        root = Path(scratch) / "store"
        store = open_store(root)
        expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        records: list[tuple[PutResult, int, bytes]] = []
        for queue_id, bodies in ops:
            if len(bodies) == 1:
                result = store.put(TOPIC, queue_id, bodies[0])
                singles = [result]
            else:
                batch = store.put_batch(TOPIC, queue_id, bodies)
                singles = batch.results()
                result = batch  # type: ignore[assignment]
            assert result.status is PutStatus.PUT_OK
            expected[queue_id].extend(bodies)
            records.extend(zip(singles, [queue_id] * len(bodies), bodies, strict=True))
        for single, queue_id, body in records:
            assert stored_bytes(store, single) == expected_bytes(store, TOPIC, queue_id, single, body)
        abandon(store)
        store = open_store(root)
        assert store.last_exit_ok is False
        for queue_id, bodies in expected.items():
            got = store.get(TOPIC, queue_id, 0, 1000, max_bytes=1 << 20)
            assert [bytes(m.body) for m in got.messages] == bodies
        store.close_sync()


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PutResult]]:
    """A store abandoned after batches of 1..6 records (records listed one by one)."""
    root = tmp_path_factory.mktemp("batched") / "store"
    store = open_store(root)
    records: list[PutResult] = []
    for i in range(30):
        batch = store.put_batch(TOPIC, i % 2, [body_for(i * 10 + k) for k in range(1 + i % 6)])
        assert batch.ok
        records.extend(batch.results())
    abandon(store)
    return root, records


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_crash_mid_batch_keeps_exactly_the_records_before_the_tear(batched, data):
    """The commit log loses every byte from a random offset on (a crash while a batch was being written or
    flushed): recovery keeps exactly the whole records before it, in both consume queues."""
    source, records = batched
    cut = data.draw(st.integers(0, records[-1].end_offset), label="cut")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "store"
        shutil.copytree(source, root)
        for path in sorted((root / "commitlog").iterdir()):
            start = int(path.name)
            if start >= cut and start > 0:
                path.unlink()
            elif cut < start + SEGMENT_SIZE:
                os.truncate(path, cut - start)
        store = open_store(root)
        kept = [r for r in records if r.end_offset <= cut]
        end = kept[-1].end_offset if kept else 0
        next_segment = (end // SEGMENT_SIZE + 1) * SEGMENT_SIZE
        # the scan stops at the tear, or moves past an intact blank record to the next file's start
        assert store.max_commit_log_offset == end or (
            cut >= end + 8 and store.max_commit_log_offset == next_segment
        )
        for queue_id in (0, 1):
            got = store.get(TOPIC, queue_id, 0, 1000, max_bytes=1 << 20).messages
            want = [r for r in kept if _queue_of(store, r) == queue_id]
            assert [(m.queue_offset, m.commit_log_offset) for m in got] == [
                (r.queue_offset, r.commit_log_offset) for r in want
            ]
        store.close_sync()


def _queue_of(store: MessageStore, result: PutResult) -> int:
    record = decode_record(store.commit_log.read(result.commit_log_offset, result.wrote_bytes), 0)
    return record.queue_id


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from quasar.storage import MessageStore, StoreConfig

    def body(i):
        return f"batch-{i:06d}|".encode() * (1 + i % 9)

    async def main(root):
        store = MessageStore(StoreConfig(root_dir=Path(root), commit_log_file_size=16384,
                                         consume_queue_file_size=400, flush_consume_queue_interval_ms=20,
                                         flush_consume_queue_thorough_interval_ms=50))
        store.open()
        await store.start()
        print("ready", flush=True)
        i = 0
        while True:
            starts, waits = [], []
            for q in range(3):
                starts.append(i)
                waits.append(store.put_batch_and_wait("crash/batch", q, [body(n) for n in range(i, i + 5)]))
                i += 5
            for start, result in zip(starts, await asyncio.gather(*waits)):
                assert result.status.name == "PUT_OK", result
                for n, one in zip(range(start, start + 5), result.results()):
                    print(n, one.queue_offset, one.commit_log_offset, one.wrote_bytes, flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


def crash_body(i: int) -> bytes:
    return f"batch-{i:06d}|".encode() * (1 + i % 9)


def test_sigkill_during_batches_loses_no_confirmed_record(tmp_path: Path):
    root = tmp_path / "store"
    confirmed = run_writer_until_killed(tmp_path, WRITER, root, 600)

    assert len(list((root / "commitlog").iterdir())) > 3  # several segments (and batch rolls) were written
    store = open_store(root, commit_log_file_size=16384, consume_queue_file_size=400)
    assert store.last_exit_ok is False
    for n, queue_offset, commit_log_offset, size in confirmed:
        message = store.get_by_offset(commit_log_offset, size)
        assert bytes(message.body) == crash_body(n)
        assert message.queue_offset == queue_offset and message.queue_id == (n // 5) % 3
    for queue_id in range(3):  # consume queues are continuous and point at whole records
        result = store.get("crash/batch", queue_id, 0, 100_000, max_bytes=1 << 30)
        assert [m.queue_offset for m in result.messages] == list(
            range(store.max_queue_offset("crash/batch", queue_id))
        )
    store.close_sync()


def test_put_bytes_match_an_independent_build_of_the_layout(root: Path):
    """The one encoder against the layout table built by hand (zlib CRCs, the 17-value HEADER): the tests'
    reference encoder shares the encoder with put, so this pins both to the documented bytes."""
    store = open_store(root)
    topic, body, properties = "golden", b"golden body", {"KEYS": "k"}
    result = store.put(topic, 4, body, properties=properties, born_timestamp_ms=123)
    host = ipv4_host(*store.config.store_host)
    props = b"KEYS\x01k\x02"
    tail_length = 20  # __CRC32# 0x01 10 digits 0x02
    total = 88 + len(body) + 1 + len(topic) + 2 + len(props) + tail_length
    header = HEADER.pack(
        total, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, 4, 0, result.queue_offset, result.commit_log_offset,
        0, 123, *host, result.store_timestamp, *host, 0, 0, len(body),
    )  # fmt: skip
    head = header + body + bytes([len(topic)]) + topic.encode() + struct.pack(">H", len(props) + tail_length)
    head += props
    expected = head + b"__CRC32#\x01" + b"%010d" % (zlib.crc32(head) & 0x7FFFFFFF) + b"\x02"
    assert result.wrote_bytes == total
    assert stored_bytes(store, result) == expected
    store.close_sync()


def test_packed_header_layout_matches_the_documented_one():
    """HEADER_PACKED is HEADER with fields 4-5 and 8-14 passed pre-packed: same 88 bytes, same order."""
    host = ipv4_host("10.1.2.3", 10911)
    values = (200, 0xDAA320A7, 77, 5, 9, 1234, 5678, 0, 111, *host, 222, *host, 0, 0, 100)
    reference = HEADER.pack(*values)
    packed = HEADER_PACKED.pack(
        200, 0xDAA320A7, 77, QUEUE_FLAG.pack(5, 9), 1234, 5678,
        HEADER_MIDDLE.pack(0, 111, *host, 222, *host, 0, 0), 100,
    )  # fmt: skip
    assert HEADER.size == HEADER_PACKED.size == 88
    assert (QUEUE_FLAG.size, HEADER_MIDDLE.size) == (8, 48)
    assert packed == reference


def test_put_result_is_an_immutable_named_tuple():
    result = PutResult(PutStatus.PUT_OK, 100, 3, 50, 1)
    assert result.ok and result.end_offset == 150
    assert result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT).ok is False
    with pytest.raises(AttributeError):
        result.status = PutStatus.UNKNOWN_ERROR  # type: ignore[misc]
