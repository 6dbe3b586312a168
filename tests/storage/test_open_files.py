"""Running out of file descriptors is not a full disk (issue 21): a put stopped by EMFILE / ENFILE while a
commit log or consume queue file is created is refused with CREATE_MAPPED_FILE_FAILED and "too many open
files", nothing is latched and the next put succeeds; ENOSPC stays "disk full". Through a real broker, the
refused send is answered with Pulsar's SEND_ERROR. The broker raises its soft RLIMIT_NOFILE at start."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quasar.broker.app import BrokerApp, raise_open_files_limit
from quasar.broker.config import BrokerConfig
from quasar.protocol import NEED_DATA, CommandType, Frame, FrameDecoder, commands, pb
from quasar.protocol.enums import ServerError
from quasar.protocol.frame import encode_headers_and_payload
from quasar.storage import MessageStore, PutStatus
from quasar.storage import mapped_file as mapped_file_module

from .conftest import body_for, open_store

TOPIC = "persistent://public/default/open-files"
OTHER = "persistent://public/default/open-files-other"

_real_open = os.open


def _fail_opens_under(monkeypatch: pytest.MonkeyPatch, part: str, code: int, times: int = 1) -> list[str]:
    """Make the next ``times`` ``os.open`` calls of a path containing ``part`` fail with ``code``; returns
    the list the failed paths are appended to."""
    failed: list[str] = []

    def failing_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if part in str(path) and len(failed) < times:
            failed.append(str(path))
            raise OSError(code, os.strerror(code), str(path))
        return _real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    return failed


def _fill(store: MessageStore, topic: str, count: int) -> list[bytes]:
    bodies = [body_for(i) for i in range(count)]
    assert all(store.put(topic, 0, body).status is PutStatus.PUT_OK for body in bodies)
    return bodies


def _bodies(store: MessageStore, topic: str) -> list[bytes]:
    return [bytes(m.body) for m in store.get(topic, 0, 0, 10_000, 10**9).messages]


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM])
@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_batch"])
def test_too_many_open_files_for_a_new_consume_queue_is_transient(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int, batch: bool
):
    store = open_store(root)
    stored = _fill(store, TOPIC, 30)
    end = store.max_commit_log_offset
    failed = _fail_opens_under(monkeypatch, "consumequeue", code)
    with caplog.at_level(logging.ERROR, logger="quasar.storage"):
        status = (
            store.put_batch(OTHER, 0, [b"a", b"b"]).status
            if batch
            else store.put(OTHER, 0, b"refused").status
        )
    assert failed and status is PutStatus.CREATE_MAPPED_FILE_FAILED
    reason = "out of memory" if code == errno.ENOMEM else "too many open files"
    assert f"put refused, {reason}" in caplog.text and "disk full" not in caplog.text
    assert (store.open_files_refusals, store.disk_full_refusals) == (int(code != errno.ENOMEM), 0)
    assert store.writable and not store.disk_full  # nothing latched
    assert store.max_commit_log_offset == end and store.max_queue_offset(OTHER, 0) == 0  # nothing written
    accepted = store.put(OTHER, 0, b"accepted")  # descriptors are available again: the next put goes in
    assert accepted.status is PutStatus.PUT_OK and accepted.queue_offset == 0
    assert store.put(TOPIC, 0, b"more").queue_offset == 30
    store.close_sync()
    monkeypatch.undo()
    store = open_store(root)
    assert _bodies(store, TOPIC) == [*stored, b"more"] and _bodies(store, OTHER) == [b"accepted"]
    store.close_sync()


def test_too_many_open_files_for_the_next_commit_log_segment_is_transient(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    store = open_store(root)
    store.put(TOPIC, 0, body_for(0))

    def no_descriptor(path: Path) -> MessageStore:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))

    monkeypatch.setattr(store.allocator, "take", no_descriptor)
    with caplog.at_level(logging.ERROR, logger="quasar.storage"):
        results = [store.put(TOPIC, 0, body_for(i)) for i in range(1, 100)]
    refused = [r for r in results if r.status is not PutStatus.PUT_OK]
    assert refused and {r.status for r in refused} == {PutStatus.CREATE_MAPPED_FILE_FAILED}
    assert "put refused, too many open files" in caplog.text and "disk full" not in caplog.text
    assert store.writable and (store.open_files_refusals, store.disk_full_refusals) == (len(refused), 0)
    monkeypatch.undo()
    accepted = [body_for(0)] + [
        body_for(i + 1) for i, r in enumerate(results) if r.status is PutStatus.PUT_OK
    ]
    assert store.put(TOPIC, 0, b"after").queue_offset == len(accepted)
    assert _bodies(store, TOPIC) == [*accepted, b"after"]
    store.close_sync()


def test_no_space_for_a_consume_queue_unit_stays_disk_full(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    store = open_store(root)
    real_reserve_space = mapped_file_module.reserve_space
    calls: list[int] = []

    def no_space(fd: int, start: int, end: int) -> None:
        if "consumequeue" not in os.readlink(f"/proc/self/fd/{fd}"):  # the commit log allocator's thread
            real_reserve_space(fd, start, end)
            return
        calls.append(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mapped_file_module, "reserve_space", no_space)
    with caplog.at_level(logging.ERROR, logger="quasar.storage"):
        refused = store.put(OTHER, 0, b"refused")
    assert calls and refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert "put refused, disk full" in caplog.text and "too many open files" not in caplog.text
    assert (store.disk_full_refusals, store.open_files_refusals) == (1, 0)
    monkeypatch.setattr(mapped_file_module, "reserve_space", real_reserve_space)
    assert store.put(OTHER, 0, b"accepted").queue_offset == 0
    store.close_sync()


def test_refusals_are_logged_at_most_once_a_second(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    store = open_store(root)
    _fail_opens_under(monkeypatch, "consumequeue", errno.EMFILE, times=50)
    with caplog.at_level(logging.ERROR, logger="quasar.storage"):
        statuses = {store.put(f"{OTHER}-{i}", 0, b"x").status for i in range(50)}
    assert statuses == {PutStatus.CREATE_MAPPED_FILE_FAILED} and store.open_files_refusals == 50
    assert caplog.text.count("too many open files") == 1
    store.close_sync()


# -- flush rounds ----------------------------------------------------------------------------------------------


def _fail_directory_opens_under(
    monkeypatch: pytest.MonkeyPatch, part: str, times: int, code: int = errno.EMFILE
) -> list[str]:
    """Make the next ``times`` opens of a directory whose path contains ``part`` (``fsync_dir``) fail with
    ``code``; returns the list the failed paths are appended to."""
    failed: list[str] = []

    def failing_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if part in str(path) and len(failed) < times and os.path.isdir(path):
            failed.append(str(path))
            raise OSError(code, os.strerror(code), str(path))
        return _real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    return failed


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met within 5 s")


@pytest.mark.parametrize(
    ("code", "reason"), [(errno.EMFILE, "too many open files"), (errno.ENOMEM, "out of memory")]
)
async def test_group_commit_retries_a_directory_fsync_without_descriptors(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int, reason: str
):
    store = open_store(root)
    await store.start()
    failed = _fail_directory_opens_under(monkeypatch, "commitlog", times=3, code=code)
    with caplog.at_level(logging.ERROR, logger="quasar.storage"):
        results = [await store.put_and_wait(TOPIC, 0, body_for(i)) for i in range(100)]  # rolls segments
    assert {r.status for r in results} == {PutStatus.PUT_OK}
    group_commit = store.flusher.group_commit
    assert group_commit is not None and len(failed) == 3 and group_commit.open_files_retries.count == 3
    assert f"{reason}, the flush is retried" in caplog.text and store.writable
    assert "refuses writes" not in caplog.text and "disk full" not in caplog.text
    await store.close()
    store = open_store(root)
    assert _bodies(store, TOPIC) == [body_for(i) for i in range(100)]
    store.close_sync()


async def test_consume_queue_flush_retries_a_directory_fsync_without_descriptors(
    root: Path, monkeypatch: pytest.MonkeyPatch
):
    store = open_store(root, flush_consume_queue_interval_ms=5, flush_consume_queue_thorough_interval_ms=10)
    await store.start()
    failed = _fail_directory_opens_under(monkeypatch, "consumequeue", times=5)
    assert (await store.put_and_wait(OTHER, 0, b"new queue")).status is PutStatus.PUT_OK
    flusher = store.flusher.consume_queue_flusher
    assert flusher is not None
    await _until(lambda: flusher.open_files_retries.count == 5)
    rounds = flusher.flush_rounds
    await _until(lambda: flusher.flush_rounds > rounds + 2)  # the flusher goes on once descriptors are back
    assert len(failed) == 5 and store.writable and flusher.running
    assert store.consume_queues.get(OTHER, 0)._dirs_need_sync is False  # the directories did get synced
    assert (await store.put_and_wait(OTHER, 0, b"more")).queue_offset == 1
    await store.close()


# -- through a broker ----------------------------------------------------------------------------------------


class _RawClient:
    """A hand-driven Pulsar connection on the test's event loop (the broker runs on the same loop)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int) -> _RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.writer.write(commands.new_connect("open-files-test", protocol_version=20))
        await client.expect(CommandType.CONNECTED)
        return client

    async def expect(self, command_type: int) -> Frame:
        while True:
            frame = self.decoder.next_frame()
            if frame is NEED_DATA:
                data = await asyncio.wait_for(self.reader.read(65536), 10)
                assert data, f"connection closed while waiting for {CommandType(command_type).name}"
                self.decoder.receive_data(data)
                continue
            assert isinstance(frame, Frame)
            if frame.type == CommandType.PING:
                self.writer.write(commands.new_pong())
                continue
            assert frame.type == command_type, f"got {CommandType(frame.type).name}"
            return frame

    async def send(self, producer_name: str, sequence_id: int, payload: bytes) -> Frame:
        metadata = pb.MessageMetadata()
        metadata.producer_name = producer_name
        metadata.sequence_id = sequence_id
        metadata.publish_time = int(time.time() * 1000)
        self.writer.write(commands.new_send(1, sequence_id, encode_headers_and_payload(metadata, payload)))
        while True:
            frame = self.decoder.next_frame()
            if frame is NEED_DATA:
                data = await asyncio.wait_for(self.reader.read(65536), 10)
                assert data, "connection closed while waiting for the answer to a send"
                self.decoder.receive_data(data)
                continue
            assert isinstance(frame, Frame)
            if frame.type in (CommandType.SEND_RECEIPT, CommandType.SEND_ERROR):
                return frame
            assert frame.type == CommandType.PING, f"got {CommandType(frame.type).name}"
            self.writer.write(commands.new_pong())

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def test_a_send_refused_for_too_many_open_files_gets_send_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    app = BrokerApp(
        BrokerConfig(port=0, admin_port=0, data_dir=tmp_path / "data", commit_log_file_size=256 * 1024)
    )
    await app.start()
    client = await _RawClient.connect(app.port)
    try:
        client.writer.write(commands.new_producer(TOPIC, 1, 1))
        name = (await client.expect(CommandType.PRODUCER_SUCCESS)).command.producer_success.producer_name
        assert (await client.send(name, 0, b"first")).type == CommandType.SEND_RECEIPT
        assert app.store is not None
        # the other topic's first put needs its consume queue's first file: that open fails once
        failed = _fail_opens_under(monkeypatch, "consumequeue", errno.EMFILE, times=1)
        client.writer.write(commands.new_producer(OTHER, 2, 2))
        other = (await client.expect(CommandType.PRODUCER_SUCCESS)).command.producer_success.producer_name
        metadata = pb.MessageMetadata(
            producer_name=other, sequence_id=0, publish_time=int(time.time() * 1000)
        )
        client.writer.write(commands.new_send(2, 0, encode_headers_and_payload(metadata, b"refused")))
        frame = await client.expect(CommandType.SEND_ERROR)
        error = frame.command.send_error
        assert failed and (error.producer_id, error.sequence_id) == (2, 0)
        assert error.error == ServerError.PersistenceError and "CREATE_MAPPED_FILE_FAILED" in error.message
        assert app.store.open_files_refusals == 1 and app.store.disk_full_refusals == 0
        metadata.sequence_id = 1
        client.writer.write(commands.new_send(2, 1, encode_headers_and_payload(metadata, b"accepted")))
        receipt = (await client.expect(CommandType.SEND_RECEIPT)).command.send_receipt
        assert receipt.sequence_id == 1  # the next send is stored: nothing latched
        assert (await client.send(name, 1, b"second")).type == CommandType.SEND_RECEIPT
    finally:
        await client.close()
        await app.stop()


# -- the soft limit ------------------------------------------------------------------------------------------


def test_the_broker_raises_its_soft_open_files_limit_to_the_hard_limit():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves no room to lower the soft one")
    script = (
        "import logging, resource\n"
        "logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "from quasar.broker.app import raise_open_files_limit\n"
        "print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    returned_soft, returned_hard, actual_soft, actual_hard = map(int, result.stdout.split())
    expected = 1_048_576 if hard == resource.RLIM_INFINITY else hard
    assert (returned_soft, actual_soft) == (expected, expected)
    assert returned_hard == actual_hard == hard
    assert f"open files limit: soft {expected} (raised from 256), hard {hard}" in result.stderr


def test_raising_the_limit_again_changes_nothing(caplog: pytest.LogCaptureFixture):
    raise_open_files_limit()
    with caplog.at_level(logging.INFO, logger="quasar.broker.app"):
        assert raise_open_files_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)
    assert "(unchanged)" in caplog.text
