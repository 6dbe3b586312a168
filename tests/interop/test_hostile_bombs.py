"""CPU and memory bombs sent to a real broker process (issue 16, hardening): each hostile command gets a
clear error (or is skipped where nothing answers), the broker keeps serving other clients, and the work it
did is bounded. Bounds are on work, not speed: the broker's CPU seconds and peak RSS (from /proc) may grow
by a budget far above the linear cost and far below what the unbounded code spent."""

from __future__ import annotations

import contextlib
import io
import os
import resource
import socket
import struct
import time
from pathlib import Path

import pulsar
import pytest
import zstandard

from quasar.protocol import CommandType, requests
from quasar.protocol.enums import InitialPosition, ServerError, SubType
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.proto import PulsarApi_pb2 as pb
from tests.interop.helpers import admin, new_client, topic_name
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop

INDIVIDUAL = 0
CPU_BUDGET_S = 20.0
"""CPU seconds a bomb may cost the broker: the bounded code needs well under one, the unbounded one spent
tens (ack set) to thousands (1 MB consumer name)."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    """Peak resident set size of process ``pid`` in KiB (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM line")


def assert_serves(broker) -> None:
    """A fresh official client can produce and consume on a new topic."""
    client = new_client(broker)
    try:
        topic = topic_name("alive")
        consumer = client.subscribe(topic, "alive")
        client.create_producer(topic).send(b"still serving")
        assert consumer.receive(timeout_millis=10_000).data() == b"still serving"
    finally:
        client.close()


def _publish_batch(broker, topic: str, count: int) -> tuple[int, int]:
    """Publish ``count`` messages as one batch entry with the official client; its (ledger id, entry id)."""
    client = new_client(broker)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=count, batching_max_publish_delay_ms=60_000
        )
        ids = []
        for i in range(count):
            producer.send_async(f"m{i}".encode(), lambda result, msg_id: ids.append((result, msg_id)))
        producer.flush()
        assert len(ids) == count and all(result == pulsar.Result.Ok for result, _ in ids)
        entries = {(m.ledger_id(), m.entry_id()) for _, m in ids}
        assert len(entries) == 1, entries
        return entries.pop()
    finally:
        client.close()


def _subscribe(conn: RawConnection, topic: str, subscription: str, consumer_id: int, **kwargs) -> None:
    conn.send(
        requests.new_subscribe(
            topic,
            subscription,
            kwargs.pop("sub_type", SubType.Shared),
            consumer_id,
            consumer_id,
            initial_position=InitialPosition.Earliest,
            **kwargs,
        )
    )
    conn.expect(CommandType.SUCCESS)


def _ack(conn: RawConnection, consumer_id: int, entry: tuple[int, int], words, request_id: int):
    conn.send(requests.new_ack(consumer_id, [entry], INDIVIDUAL, request_id, ack_sets=[words]))
    return conn.expect(CommandType.ACK_RESPONSE).command.ackResponse


# -- 1. batch-index ack sets ---------------------------------------------------------------------------------


def test_a_huge_ack_set_is_refused_or_cut_with_bounded_work(broker):
    topic = topic_name("ackbomb")
    entry = _publish_batch(broker, topic, 100)  # 100 messages: an ack set of 2 words
    conn = RawConnection(broker.service_url)
    try:
        _subscribe(conn, topic, "delivered", 1)
        conn.send(requests.new_flow(1, 1000))
        message = conn.expect(CommandType.MESSAGE).command.message.message_id
        assert (message.ledgerId, message.entryId) == entry
        _subscribe(conn, topic, "not-delivered", 2)  # no FLOW: the entry is pending on no consumer
        pid = broker.pid
        cpu_before = cpu_seconds(pid)
        bomb = [1] * 2_000_000  # 2 bytes a word on the wire: a 4 MB frame
        first = _ack(conn, 1, entry, bomb, 10)
        assert first.error == ServerError.NotAllowedError
        assert "2000000 words for a batch of 100 messages" in first.message
        undelivered = _ack(conn, 2, entry, bomb, 11)  # the size comes from the stored entry
        assert undelivered.error == ServerError.NotAllowedError
        assert "for a batch of 100 messages" in undelivered.message
        # a legitimate partial ack (index 0 acknowledged: bits 1..99 still set), then a bomb on top of it:
        # only the words the stored set spans are read, so it acknowledges index 1 and nothing else
        assert not _ack(conn, 1, entry, [-2, (1 << 36) - 1], 12).HasField("error")
        assert not _ack(conn, 1, entry, [-3, (1 << 36) - 1, *bomb], 13).HasField("error")
        assert cpu_seconds(pid) - cpu_before < CPU_BUDGET_S
        conn.send(requests.new_redeliver_unacknowledged_messages(1))
        redelivered = conn.expect(CommandType.MESSAGE).command.message
        remaining = [w & ((1 << 64) - 1) for w in redelivered.ack_set]
        assert remaining[0] == (1 << 64) - 4  # indexes 0 and 1 acknowledged
        assert remaining[1] == (1 << 36) - 1
    finally:
        conn.close()
    assert_serves(broker)


# -- 2. strings in PRODUCER / SUBSCRIBE -----------------------------------------------------------------------


@pytest.mark.parametrize("sub_type", [SubType.Key_Shared, SubType.Failover])
def test_a_megabyte_consumer_name_is_refused(broker, sub_type):
    topic = topic_name("namebomb")
    conn = RawConnection(broker.service_url)
    try:
        cpu_before = cpu_seconds(broker.pid)
        conn.send(requests.new_subscribe(topic, "s", sub_type, 1, 1, consumer_name="c" * (1 << 20)))
        error = conn.expect(CommandType.ERROR).command.error
        assert error.request_id == 1 and error.error == ServerError.NotAllowedError
        assert "consumer_name" in error.message and "max_name_length 1024" in error.message
        # names at the limit are served, and each costs one pass over the name, not one per ring point
        for consumer_id in range(2, 12):
            name = f"{consumer_id:04d}" + "n" * 1020
            conn.send(
                requests.new_subscribe(topic, "s", sub_type, consumer_id, consumer_id, consumer_name=name)
            )
            frame = conn.next_frame()
            while frame.type == CommandType.ACTIVE_CONSUMER_CHANGE:  # Failover tells each consumer
                frame = conn.next_frame()
            assert frame.type == CommandType.SUCCESS and frame.command.success.request_id == consumer_id
        assert cpu_seconds(broker.pid) - cpu_before < CPU_BUDGET_S
    finally:
        conn.close()
    assert_serves(broker)


def test_oversized_names_and_properties_are_refused(broker):
    topic = topic_name("strings")
    conn = RawConnection(broker.service_url)
    try:
        cases = [
            (requests.new_producer(topic, 1, 1, producer_name="p" * 1025), "producer_name"),
            (requests.new_producer(topic, 2, 2, metadata={"k": "v" * 8193}), "metadata value"),
            (
                requests.new_producer(topic, 3, 3, metadata={f"k{i}": "v" for i in range(257)}),
                "max_properties_per_command 256",
            ),
            (requests.new_subscribe(topic, "s" * 2000, SubType.Shared, 4, 4), "subscription of"),
            (
                requests.new_subscribe(topic, "s", SubType.Shared, 5, 5, metadata={"é" * 4097: "v"}),
                "metadata key of 8194+ bytes",
            ),
        ]
        for request_id, (frame, text) in enumerate(cases, start=1):
            conn.send(frame)
            error = conn.expect(CommandType.ERROR).command.error
            assert error.request_id == request_id and error.error == ServerError.NotAllowedError, error
            assert text in error.message, error.message
        conn.send(requests.new_producer(topic, 9, 9, producer_name="p" * 1024, metadata={"k": "v" * 8192}))
        assert conn.expect(CommandType.PRODUCER_SUCCESS).command.producer_success.producer_name == "p" * 1024
    finally:
        conn.close()
    assert_serves(broker)


def test_the_official_client_gets_not_allowed_for_a_long_subscription_name(broker):
    client = new_client(broker)
    try:
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic_name("strings"), "s" * 5000)
    finally:
        client.close()


# -- 3. decompression and batch bombs in the index's key extractor --------------------------------------------


def _zstd_declaring(size: int) -> bytes:
    """A ZSTD frame of ``size`` zero bytes whose header states that content size (built in 1 MiB pieces: the
    test never holds the inflated bytes)."""
    out = io.BytesIO()
    writer = zstandard.ZstdCompressor(level=1).stream_writer(out, size=size, closefd=False)
    chunk = bytes(1 << 20)
    for _ in range(size >> 20):
        writer.write(chunk)
    writer.write(bytes(size & ((1 << 20) - 1)))
    writer.close()
    return out.getvalue()


def _keyed_batch(count: int) -> bytes:
    """An uncompressed batch payload of ``count`` messages with distinct keys and empty payloads."""
    items = []
    for i in range(count):
        single = pb.SingleMessageMetadata(payload_size=0, partition_key=f"k{i:06d}").SerializeToString()
        items.append(struct.pack(">I", len(single)) + single)
    return b"".join(items)


def _query(broker, topic: str, key: str, expected: int) -> list:
    """The messages the admin API finds under ``key``, polled (the index is built off the event loop, on the
    reput thread) until ``expected`` are found or 100 tries over ~10 s have passed."""
    found: list = []
    for _ in range(100):
        status, found = admin(broker, "GET", f"/admin/v2/{topic.replace('://', '/')}/messages?key={key}")
        assert status == 200, found
        if len(found) >= expected:
            break
        time.sleep(0.1)
    return found


def _send_entry(conn: RawConnection, producer: str, sequence_id: int, payload: bytes, **metadata) -> None:
    md = pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1, **metadata)
    conn.send(requests.new_send(1, sequence_id, encode_headers_and_payload(md, payload), num_messages=1))
    receipt = conn.expect(CommandType.SEND_RECEIPT).command.send_receipt
    assert receipt.sequence_id == sequence_id


def test_decompression_and_batch_bombs_are_not_inflated(broker_factory):
    broker = broker_factory()
    topic = topic_name("zipbomb")
    max_size = 5 * 1024 * 1024
    zeros_512m = _zstd_declaring(512 << 20)  # about 16 kB
    zeros_5m = _zstd_declaring(max_size - 64)
    keyed = _keyed_batch(300_000)  # 4.5 MB of keyed items
    bombs = [
        # the SEND: ZSTD, uncompressed_size 2^32-1, 512 MB behind 16 kB
        (zeros_512m, {"compression": pb.ZSTD, "uncompressed_size": 2**32 - 1, "num_messages_in_batch": 10}),
        # a size under the limit, but the frame states 512 MB
        (zeros_512m, {"compression": pb.ZSTD, "uncompressed_size": max_size, "num_messages_in_batch": 10}),
        # a few hundred bytes declaring 10^6 items: more than 5 MB can hold
        (
            zeros_5m,
            {"compression": pb.ZSTD, "uncompressed_size": max_size - 64, "num_messages_in_batch": 10**6},
        ),
        (bytes(567), {"num_messages_in_batch": 10**6}),
        # 300,000 keys behind a few kB: indexed in part (the first 10,000)
        (
            zstandard.ZstdCompressor().compress(keyed),
            {"compression": pb.ZSTD, "uncompressed_size": len(keyed), "num_messages_in_batch": 300_000},
        ),
    ]
    conn = RawConnection(broker.service_url)
    try:
        producer = conn.create_producer(topic)
        pid = broker.pid
        cpu_before, rss_before = cpu_seconds(pid), peak_rss_kib(pid)
        for sequence_id, (payload, metadata) in enumerate(bombs):
            _send_entry(conn, producer, sequence_id, payload, **metadata)
        _send_entry(conn, producer, 99, b"plain", partition_key="findme")
        found = _query(broker, topic, "findme", 1)
        assert [m["entryId"] for m in found] == [len(bombs)]  # the index went on past the bombs
        assert len(_query(broker, topic, "k009999", 1)) == 1  # within the first 10,000 keys
        assert _query(broker, topic, "k010000", 0) == []
        assert peak_rss_kib(pid) - rss_before < 200 * 1024  # the 512 MB frames were never inflated
        assert cpu_seconds(pid) - cpu_before < CPU_BUDGET_S
    finally:
        conn.close()
    assert_serves(broker)
    # a crash: recovery indexes the same entries again, and neither inflates them nor fails on them
    broker.restart(kill=True)
    assert peak_rss_kib(broker.pid) < rss_before + 200 * 1024
    assert len(_query(broker, topic, "findme", 1)) == 1
    assert_serves(broker)
    log = broker.stderr_path.read_text() if broker.stderr_path else ""
    assert log.count("key extractor failed") <= 1  # one line, not one per entry


# -- 4. running out of file descriptors is transient ---------------------------------------------------------


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _send_until(conn: RawConnection, producer_id: int, producer: str, first_seq: int, payload: bytes):
    """SEND one message (sequence ids from ``first_seq``) until it gets a receipt; the SEND_ERRORs it got on
    the way (at most 50 tries, 0.2 s apart)."""
    errors = []
    for attempt in range(50):
        md = pb.MessageMetadata(producer_name=producer, sequence_id=first_seq + attempt, publish_time=1)
        conn.send(
            requests.new_send(producer_id, first_seq + attempt, encode_headers_and_payload(md, payload))
        )
        frame = conn.next_frame()
        while frame.type == CommandType.PING:
            frame = conn.next_frame()
        if frame.type == CommandType.SEND_RECEIPT:
            return errors
        assert frame.type == CommandType.SEND_ERROR, frame
        errors.append(frame.command.send_error)
        time.sleep(0.2)
    raise AssertionError(f"no receipt after 50 sends: {errors[-1] if errors else None}")


def test_running_out_of_file_descriptors_refuses_puts_only_while_it_lasts(broker_factory, tmp_path):
    config = tmp_path / "small-segments.toml"
    config.write_text("commit_log_file_size = 262144\nmapped_file_size_consume_queue = 6000\n")
    broker = broker_factory(extra_args=("--config", str(config)))
    host, port = broker.service_url.removeprefix("pulsar://").rsplit(":", 1)
    topics = [topic_name("fds") for _ in range(3)]
    conn = RawConnection(broker.service_url)
    flood: list[socket.socket] = []
    try:
        names = [conn.create_producer(t, producer_id=i, request_id=i) for i, t in enumerate(topics[:2])]
        assert _send_until(conn, 0, names[0], 0, b"before") == []
        pid = broker.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (_open_fds(pid) + 4, hard))
        for _ in range(40):  # a connection flood takes every descriptor left
            with contextlib.suppress(OSError):
                flood.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(1)
        # the second topic's first put needs its consume queue file; the first topic's puts roll the
        # 256 KiB commit log segments: each is refused with a clear error while no descriptor is free
        refused = []
        for i in range(8):
            md = pb.MessageMetadata(producer_name=names[i % 2], sequence_id=1000 + i, publish_time=1)
            conn.send(requests.new_send(i % 2, 1000 + i, encode_headers_and_payload(md, bytes(100_000))))
            frame = conn.next_frame()
            if frame.type == CommandType.SEND_ERROR:
                refused.append(frame.command.send_error)
        assert refused, "nothing was refused: the descriptors did not run out"
        assert all(e.error == ServerError.PersistenceError for e in refused)
        # refused for want of a descriptor (a new file), or not confirmed durable in time (the group commit
        # retries the fsync of the directory); never reported as a full disk
        assert {e.message.rsplit(": ", 1)[1] for e in refused} <= {
            "CREATE_MAPPED_FILE_FAILED",
            "FLUSH_DISK_TIMEOUT",
        }
        for sock in flood:
            sock.close()
        flood.clear()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        # serving again: both producers, and a new topic
        _send_until(conn, 0, names[0], 2000, b"after")
        _send_until(conn, 1, names[1], 2000, b"after")
        conn.send(requests.new_producer(topics[2], 2, 2))
        third = conn.expect(CommandType.PRODUCER_SUCCESS).command.producer_success.producer_name
        _send_until(conn, 2, third, 0, b"new topic")
    finally:
        for sock in flood:
            sock.close()
        conn.close()
    assert_serves(broker)
    log = broker.stderr_path.read_text()
    assert "disk full" not in log and "refuses writes from now on" not in log, log[-3000:]


# -- 5. a full disk -------------------------------------------------------------------------------------------


def _consumer_address(broker, topic: str, subscription: str) -> str:
    status, stats = admin(broker, "GET", f"/admin/v2/{topic.replace('://', '/')}/stats")
    assert status == 200, stats
    return stats["subscriptions"][subscription]["consumers"][0]["address"]


def test_a_full_disk_closes_the_producer_and_the_official_client_backs_off(broker_factory, tmp_path):
    vfs = os.statvfs(tmp_path)
    if (vfs.f_blocks - vfs.f_bavail) / vfs.f_blocks < 0.40:
        pytest.skip("the disk guard's lowest level (35 %) is above this file system's use")
    config = tmp_path / "full.toml"
    config.write_text(  # full at the guard's first round, 3 s after start; nothing is deleted to make room
        "disk_space_warning_level_ratio = 35\ndisk_space_clean_forcibly_ratio = 95\n"
        "disk_max_used_space_ratio = 95\nclean_file_forcibly_enable = false\nclean_resource_interval_ms = 3000\n"
    )
    broker = broker_factory(extra_args=("--config", str(config)))
    topic = topic_name("full")
    client = new_client(broker)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, send_timeout_millis=3000, batching_enabled=False)
        producer.send(b"before")
        address = _consumer_address(broker, topic, "sub")
        for _ in range(100):
            if "refusing writes" in broker.stderr_path.read_text():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the disk guard did not turn on")
        results: list[pulsar.Result] = []
        for i in range(20):
            producer.send_async(f"refused-{i}".encode(), lambda result, _msg_id: results.append(result))
        with contextlib.suppress(pulsar.Timeout):
            producer.flush()
        for _ in range(100):  # the sends end at the send timeout, not in a reconnect-and-resend loop
            if len(results) == 20:
                break
            time.sleep(0.1)
        assert len(results) == 20 and set(results) == {pulsar.Result.Timeout}
        assert consumer.receive(timeout_millis=5000).data() == b"before"
        # the connection, with its consumer, was never dropped: only the producer was closed
        assert _consumer_address(broker, topic, "sub") == address
    finally:
        client.close()
    log = broker.stderr_path.read_text()
    assert log.count("closing the producer") == 1  # rate-limited: one line, not one per refused put
    assert len(log.splitlines()) < 30
