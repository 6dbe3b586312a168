"""A small in-memory stand-in for the store's replication API (until, and beside, the real MessageStore).

Records are ``[u32 size][u16 topic length][topic][u32 queue id][body]``; the "queues" are rebuilt from the
records, so replicas can be compared by bytes and by queue contents.
"""

from __future__ import annotations

import asyncio
import bisect
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quasar.storage.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StorageError,
    StoreNotWritableError,
)
from quasar.storage.results import PutBatchResult, PutResult
from quasar.storage.status import PutStatus

_HEAD = struct.Struct(">IH")


class FakeOffsetMismatchError(StorageError):
    pass


@dataclass(frozen=True, slots=True)
class Entry:
    epoch: int
    start_offset: int


class FakeEpochFile:
    def __init__(self) -> None:
        self._entries: list[Entry] = []

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries)

    @property
    def last(self) -> Entry | None:
        return self._entries[-1] if self._entries else None

    def append(self, epoch: int, start_offset: int) -> Entry:
        last = self.last
        if last is not None and (epoch <= last.epoch or start_offset < last.start_offset):
            raise ValueError(f"({epoch}, {start_offset}) does not follow {last}")
        entry = Entry(epoch, start_offset)
        self._entries.append(entry)
        return entry

    def truncate_from(self, offset: int) -> list[Entry]:
        kept = [e for e in self._entries if e.start_offset < offset]
        dropped = self._entries[len(kept) :]
        self._entries = kept
        return dropped

    def end_offset(self, epoch: int, max_offset: int) -> int:
        for i, e in enumerate(self._entries):
            if e.epoch == epoch:
                return self._entries[i + 1].start_offset if i + 1 < len(self._entries) else max_offset
        return -1


def encode(topic: str, queue_id: int, body: bytes) -> bytes:
    name = topic.encode()
    size = _HEAD.size + len(name) + 4 + len(body)
    return _HEAD.pack(size, len(name)) + name + struct.pack(">I", queue_id) + body


class FakeStore:
    """Commit log in a bytearray; flushes complete on the next loop iteration (or with ``flush_status``)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.starts: list[int] = []
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.epoch_file = FakeEpochFile()
        self._replica = False
        self.flush_status = PutStatus.PUT_OK
        self.on_append: Callable[[], None] | None = None

    # -- replication API --
    @property
    def max_commit_log_offset(self) -> int:
        return len(self.data)

    @property
    def min_commit_log_offset(self) -> int:
        return 0

    @property
    def replica_mode(self) -> bool:
        return self._replica

    def set_replica_mode(self, replica: bool) -> None:
        self._replica = replica

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        if offset == len(self.data):
            return b""
        if offset > len(self.data) or offset < 0:
            raise OffsetOutOfRangeError(f"{offset}")
        i = bisect.bisect_left(self.starts, offset)
        if i == len(self.starts) or self.starts[i] != offset:
            raise CorruptRecordError(f"no record at {offset}", offset=offset)
        end = offset
        while i < len(self.starts):
            size = _HEAD.unpack_from(self.data, self.starts[i])[0]
            if end > offset and end + size - offset > max_bytes:
                break
            end += size
            i += 1
        return bytes(self.data[offset:end])

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        if not self._replica:
            raise StoreNotWritableError("not a replica")
        if offset != len(self.data):
            raise FakeOffsetMismatchError(f"{offset} != {len(self.data)}")
        data = bytes(data)
        pos = 0
        records = []
        while pos < len(data):
            if len(data) - pos < _HEAD.size:
                raise CorruptRecordError("short", offset=offset + pos)
            size = _HEAD.unpack_from(data, pos)[0]
            if size < _HEAD.size or pos + size > len(data):
                raise CorruptRecordError("bad size", offset=offset + pos)
            records.append(data[pos : pos + size])
            pos += size
        for record in records:
            self._add(record)
        return len(self.data)

    def truncate_commit_log(self, offset: int) -> None:
        i = bisect.bisect_left(self.starts, offset)
        records = [bytes(self.data[s : s + _HEAD.unpack_from(self.data, s)[0]]) for s in self.starts[:i]]
        self.data = bytearray()
        self.starts = []
        self.queues = {}
        for record in records:
            self._add(record)
        self.epoch_file.truncate_from(offset)

    def _add(self, record: bytes) -> None:
        self.starts.append(len(self.data))
        self.data += record
        _, name_len = _HEAD.unpack_from(record, 0)
        topic = record[_HEAD.size : _HEAD.size + name_len].decode()
        (queue_id,) = struct.unpack_from(">I", record, _HEAD.size + name_len)
        self.queues.setdefault((topic, queue_id), []).append(record[_HEAD.size + name_len + 4 :])
        if self.on_append is not None:
            self.on_append()

    # -- the ledger's port --
    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        *,
        properties: Mapping[str, str] | None = None,
        tag_hash: int = 0,
        born_timestamp_ms: int | None = None,
    ) -> PutResult:
        if self._replica:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, -1, -1, 0, 0)
        offset = len(self.data)
        queue_offset = len(self.queues.get((topic, queue_id), []))
        record = encode(topic, queue_id, bytes(body))
        self._add(record)
        return PutResult(PutStatus.PUT_OK, offset, queue_offset, len(record), 0)

    def put_batch(self, topic: str, queue_id: int, bodies: Sequence[bytes], **kw: Any) -> PutBatchResult:
        results = [self.put(topic, queue_id, b) for b in bodies]
        return results  # type: ignore[return-value]  # the tests only look at the store

    def on_flushed(self, end: int, callback: Callable[[PutStatus], None]) -> None:
        asyncio.get_running_loop().call_soon(callback, self.flush_status)

    def wait_flushed(self, end: int) -> Awaitable[PutStatus]:
        future: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
        self.on_flushed(end, future.set_result)
        return future

    def get(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError

    def query(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def set_queue_min_offset(self, topic: str, queue_id: int, queue_offset: int) -> None:
        pass
