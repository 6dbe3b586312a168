"""ReputMessageService: tails the commit log on a thread and feeds the asynchronous dispatchers (RocketMQ
``DefaultMessageStore.ReputMessageService``, semantics.md A3).

Two kinds of derived stores (``storage/dispatch.py``):

- the **consume queue** is dispatched inline by ``MessageStore.put``, on the loop thread, right after the
  append (a 20-byte pack). This is the read visibility the managed ledger relies on: when ``put`` returns, the
  record's unit exists, so by the time ``wait_flushed`` resolves (the send receipt) ``get`` can read the entry.
  RocketMQ instead lets its reput thread build the consume queue, and a pull that arrives first waits in long
  polling; Quasar's ledger reads what it receipted at once, so the unit must not lag.
- the **index** (and any other dispatcher registered as asynchronous) is fed here: the thread decodes every
  record from ``reput_from_offset`` to the end of the written commit log and hands a
  :class:`~quasar.storage.dispatch.DispatchRequest` carrying a view of the body to each dispatcher, so key
  extraction (parsing Pulsar batch metadata) never runs on the event loop. A query may therefore miss records
  appended in the last few milliseconds.

The thread is woken by ``put`` (or every 10 ms), stops at the first record that does not decode (it is past
the written end, or damaged: damage is logged with its offset and the record skipped), and at close the store
runs :meth:`ReputMessageService.do_reput` once more so nothing is left behind (RocketMQ shuts down only when
``dispatchBehindBytes() == 0``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from quasar.storage.commit_log import CommitLog
from quasar.storage.dispatch import Dispatcher, DispatchRequest
from quasar.storage.errors import CorruptRecordError
from quasar.storage.flush import ServiceThread
from quasar.storage.record import (
    BLANK_MAGIC_CODE,
    BODY_POSITION,
    CRC32_RESERVED_LEN,
    CRC32_TAIL_PREFIX,
    H_BODY_LENGTH,
    H_MAGIC,
    H_QUEUE_ID,
    H_QUEUE_OFFSET,
    H_STORE_TIMESTAMP,
    H_SYS_FLAG,
    HEADER,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PREFIX,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    CheckStatus,
    check_record,
    decode_properties,
)

log = logging.getLogger(__name__)

REPUT_WAIT_S = 0.010
REPUT_RETRY_S = 1.0


class ReputMessageService(ServiceThread):
    """Feeds ``dispatchers`` every record from ``reput_from_offset`` (a record boundary) on."""

    def __init__(
        self,
        commit_log: CommitLog,
        dispatchers: Sequence[Dispatcher],
        reput_from_offset: int,
        *,
        on_error: Callable[[BaseException], None],
    ) -> None:
        super().__init__("quasar-reput", on_error)
        self.commit_log = commit_log
        self.dispatchers = list(dispatchers)
        self.reput_from_offset = reput_from_offset
        """End of the records dispatched so far (bytes). Written by the reput thread only."""
        self.skipped_records = 0
        """Damaged records skipped (bad magic / CRC in the middle of a segment)."""
        self.lock = threading.Lock()
        """Held for each :meth:`do_reput` round; ``MessageStore.truncate_commit_log`` holds it to pause the
        thread while it cuts the commit log and moves :attr:`reput_from_offset` back."""
        self._topics: dict[bytes, str] = {}

    @property
    def dispatch_behind_bytes(self) -> int:
        """RocketMQ ``dispatchBehindBytes``: written commit log bytes not dispatched yet."""
        return max(0, self.commit_log.max_offset - self.reput_from_offset)

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wakeup.wait(REPUT_WAIT_S)
            self._wakeup.clear()
            try:
                self.do_reput()
            except OSError as exc:  # e.g. ENOSPC for a new index file: retried, dispatchers are idempotent
                log.error(
                    "reput: dispatch failed at commit log offset %d, retrying: %r",
                    self.reput_from_offset,
                    exc,
                )
                self._stopped.wait(REPUT_RETRY_S)

    def do_reput(self) -> int:
        """Dispatch every record written so far; returns the new ``reput_from_offset``. Blocking."""
        with self.lock:
            return self._reput_round()

    def _reput_round(self) -> int:
        commit_log = self.commit_log
        queue = commit_log.mapped_file_queue
        offset = max(self.reput_from_offset, commit_log.min_offset)
        while True:
            end = commit_log.max_offset
            if offset >= end:
                break
            mapped_file = queue.find_mapped_file_by_offset(offset)
            if mapped_file is None:
                break
            buffer = mapped_file.buffer
            base = mapped_file.file_from_offset
            limit = mapped_file.wrote_position  # read before the records: they are complete below it
            position = offset - base
            while position < limit:
                size, magic = PREFIX.unpack_from(buffer, position)
                if magic == BLANK_MAGIC_CODE:
                    position = mapped_file.file_size
                    break
                if (
                    (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
                    or size < BODY_POSITION + 3
                    or size > limit - position
                ):
                    status = check_record(buffer, position, limit, check_crc=False).status
                    position = self._skip_damaged(buffer, position, limit, base, status)
                    continue
                request = self._request(buffer, position, size, base + position)
                for dispatcher in self.dispatchers:
                    dispatcher.dispatch(request)
                position += size
            offset = base + position
            self.reput_from_offset = offset
            if position < mapped_file.file_size:
                break
        return offset

    def _skip_damaged(
        self, buffer: memoryview, position: int, limit: int, base: int, status: CheckStatus
    ) -> int:
        """A record that does not decode below the written end: report it and resume at its TOTALSIZE if
        plausible, else at the end of the written data (nothing there can be trusted)."""
        self.skipped_records += 1
        total = int.from_bytes(buffer[position : position + 4], "big", signed=True)
        resume = position + total if BODY_POSITION < total <= limit - position else limit
        log.error(
            "reput: %s at commit log offset %d; skipping to %d", status.value, base + position, base + resume
        )
        return resume

    def _request(self, buffer: memoryview, position: int, size: int, offset: int) -> DispatchRequest:
        header = HEADER.unpack_from(buffer, position)
        body_start = position + BODY_POSITION
        body_end = body_start + header[H_BODY_LENGTH]
        if header[H_MAGIC] == MESSAGE_MAGIC_CODE:
            topic_start = body_end + 1
            topic_end = topic_start + buffer[body_end]
        else:
            topic_start = body_end + 2
            topic_end = topic_start + int.from_bytes(buffer[body_end:topic_start])
        raw_topic = bytes(buffer[topic_start:topic_end])
        topic = self._topics.get(raw_topic)
        if topic is None:
            topic = raw_topic.decode(errors="replace")
            if len(self._topics) < 100_000:
                self._topics[raw_topic] = topic
        properties_start = topic_end + 2
        properties_end = position + size
        if buffer[properties_end - CRC32_RESERVED_LEN : properties_end - 11] == CRC32_TAIL_PREFIX:
            properties_end -= CRC32_RESERVED_LEN
        keys = uniq_key = ""
        if properties_end > properties_start:
            try:
                properties = decode_properties(buffer[properties_start:properties_end])
            except CorruptRecordError:  # not UTF-8: indexed without its keys
                properties = {}
            keys = properties.get(PROPERTY_KEYS, "")
            uniq_key = properties.get(PROPERTY_UNIQ_KEY, "")
        return DispatchRequest(
            topic=topic,
            queue_id=header[H_QUEUE_ID],
            commit_log_offset=offset,
            size=size,
            tag_hash=0,
            store_timestamp=header[H_STORE_TIMESTAMP],
            queue_offset=header[H_QUEUE_OFFSET],
            keys=keys,
            uniq_key=uniq_key,
            sys_flag=header[H_SYS_FLAG],
            body=buffer[body_start:body_end],
        )
