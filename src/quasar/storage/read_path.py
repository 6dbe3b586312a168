"""The store's read path: get by queue offset, get by commit log offset, and query by key (RocketMQ
``DefaultMessageStore.getMessage`` / ``lookMessageByOffset`` / ``queryMessage``): the :class:`StoreReader`
object :class:`~quasar.storage.message_store.MessageStore` owns and delegates to.

Reads happen on the event loop thread and return zero-copy views of the mapped commit log. Every message
returned by ``get`` has its body CRC checked: a damaged record (bit rot) is reported with its offset, counted
in ``corrupt_records_skipped`` and skipped, never returned as data.
"""

from __future__ import annotations

import logging

from quasar.storage.commit_log import CommitLog
from quasar.storage.config import StoreConfig
from quasar.storage.consume_queue import UNIT
from quasar.storage.dispatch import ConsumeQueueStore
from quasar.storage.errors import (
    ConsumeQueueUnavailableError,
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreClosedError,
)
from quasar.storage.index_service import IndexService
from quasar.storage.record import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, decode_properties
from quasar.storage.results import GetResult, StoredMessage, decode_stored_message, stored_message_of
from quasar.storage.status import GetStatus
from quasar.storage.store_state import StoreState

log = logging.getLogger(__name__)

DEFAULT_MAX_GET_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_FILTER_SCAN = 16_000
"""Units :meth:`StoreReader.get_matching` examines at most per call (RocketMQ ``maxFilterMessageCount``)."""


class StoreReader:
    """The read path of one store (loop thread): given the commit log, the consume queues, the index and the
    shared :class:`StoreState`; counts the damaged records it skipped."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueStore,
        index_service: IndexService,
        state: StoreState,
    ) -> None:
        self._index_enabled = config.message_index_enable
        self._commit_log = commit_log
        self._consume_queues = consume_queues
        self._index_service = index_service
        self._state = state
        self.corrupt_records_skipped = 0
        """Records skipped by ``get`` and ``query`` because their CRC did not match (bit rot)."""

    def _check_open(self) -> None:
        if not self._state.is_open:
            raise StoreClosedError(f"the message store is {self._state.phase}")

    # -- read path -------------------------------------------------------------------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_bytes: int = DEFAULT_MAX_GET_BYTES,
    ) -> GetResult:
        """Up to ``max_count`` messages from ``queue_offset`` on, at most ``max_bytes`` of records (the first
        message is always returned whole), bodies as zero-copy memoryviews (RocketMQ ``getMessage``; statuses
        as in :class:`GetStatus`). Raises ValueError for ``max_count < 1``, :class:`CorruptRecordError` when a
        unit points at something that is not its record, :class:`ConsumeQueueUnavailableError` when the
        queue's file cannot be mapped now (too many open files: transient), :class:`StoreLoadError` when the
        queue's files, loaded on first use, do not fit the configuration.
        """
        return self.get_matching(topic, queue_id, queue_offset, max_count, None, max_count, max_bytes)

    def get_matching(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        tag_hashes: frozenset[int] | None,
        max_scan: int = DEFAULT_MAX_FILTER_SCAN,
        max_bytes: int = DEFAULT_MAX_GET_BYTES,
    ) -> GetResult:
        """Up to ``max_count`` messages from ``queue_offset`` on whose consume queue unit's tag hash is in
        ``tag_hashes`` (None: every unit matches), examining at most ``max_scan`` units and about ``max_bytes``
        of records (RocketMQ ``DefaultMessageStore.getMessage`` with a ``MessageFilter``: a unit whose
        ``tagsCode`` does not match is skipped by ``isMatchedByConsumeQueue`` **without reading the commit
        log**; ``maxFilterMessageCount`` bounds the scan).

        ``next_begin_offset`` is the queue offset after the last unit examined, so a filtered-out stretch is
        not scanned again. Statuses as :meth:`get`, plus ``NO_MATCHED_MESSAGE`` when units were examined and
        none matched. Raises ValueError for ``max_count < 1`` or ``max_scan < 1``, and what :meth:`get`
        raises. With ``tag_hashes`` None and ``max_scan == max_count`` it is :meth:`get` (skipped damaged
        units count against ``max_count``).
        """
        self._check_open()
        if max_count < 1 or max_scan < 1:
            raise ValueError(f"max_count and max_scan must be >= 1: {max_count}, {max_scan}")
        queue = self._consume_queues.get(topic, queue_id)
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, [], 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        if not min_offset <= queue_offset < max_offset:
            return _outside_queue(queue_offset, min_offset, max_offset)
        messages: list[StoredMessage] = []
        offset = queue_offset
        total_bytes = 0
        end = min(max_offset, queue_offset + max_scan)
        while offset < end and len(messages) < max_count:
            try:
                units = queue.read_units(offset, end - offset)
            except OSError as exc:
                raise ConsumeQueueUnavailableError(f"consume queue {topic}/{queue_id}: {exc}") from exc
            if units is None:
                if offset == queue_offset:
                    next_offset = queue.next_file_queue_offset(offset)
                    return GetResult(GetStatus.OFFSET_FOUND_NULL, [], next_offset, min_offset, max_offset)
                break
            for commit_log_offset, size, tag_hash in UNIT.iter_unpack(units):
                if tag_hashes is not None and tag_hash not in tag_hashes:
                    offset += 1  # isMatchedByConsumeQueue: no commit log read for a unit of another tag
                    continue
                if total_bytes and total_bytes + size > max_bytes:
                    return GetResult(GetStatus.FOUND, messages, offset, min_offset, max_offset)
                try:
                    message = self._read_message(commit_log_offset, size, check_crc=True)
                except CorruptRecordError as exc:
                    log.error("%s/%d queue offset %d: %s; skipped", topic, queue_id, offset, exc)
                    self.corrupt_records_skipped += 1
                    offset += 1
                    continue
                if message is None:
                    if messages:
                        return GetResult(GetStatus.FOUND, messages, offset, min_offset, max_offset)
                    return GetResult(GetStatus.MESSAGE_WAS_REMOVING, [], offset + 1, min_offset, max_offset)
                messages.append(message)
                total_bytes += size
                offset += 1
                if len(messages) >= max_count:
                    break
        status = GetStatus.FOUND if messages else _nothing_read(tag_hashes)
        return GetResult(status, messages, offset, min_offset, max_offset)

    def _read_message(
        self, commit_log_offset: int, size: int, *, check_crc: bool = False
    ) -> StoredMessage | None:
        """Decode the record a unit points at; None when the commit log no longer holds it. Raises
        :class:`CorruptRecordError` when it is not a record of that size (or, with ``check_crc``, its body
        CRC does not match: bit rot)."""
        mapped_file = self._commit_log.mapped_file_queue.find_mapped_file_by_offset(commit_log_offset)
        if mapped_file is None:
            return None
        return decode_stored_message(
            mapped_file.buffer,
            commit_log_offset - mapped_file.file_from_offset,
            mapped_file.wrote_position,
            commit_log_offset,
            size,
            check_crc=check_crc,
        )

    def get_by_offset(self, commit_log_offset: int, size: int) -> StoredMessage:
        """The record at ``commit_log_offset`` of ``size`` bytes (e.g. from a consume queue unit or a
        PutResult).

        Raises :class:`OffsetOutOfRangeError` outside the commit log, :class:`CorruptRecordError` when no
        record of that size starts there.
        """
        self._check_open()
        message = self._read_message(commit_log_offset, size)
        if message is None:
            raise OffsetOutOfRangeError(
                f"commit log offset {commit_log_offset} is outside "
                f"[{self._commit_log.min_offset}, {self._commit_log.max_offset})"
            )
        return message

    # -- query by key ----------------------------------------------------------------------------------------

    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_num: int = 32
    ) -> list[StoredMessage]:
        """Messages of ``topic`` indexed under ``key`` with a store time in [begin_ms, end_ms] (ms since the
        epoch), at most ``max_num`` (capped at 64), the newest ones, returned oldest first (RocketMQ
        ``queryMessage`` plus the client-side key filter of ``MQAdminImpl``: hash collisions, records of other
        topics, records outside the time range and damaged records are dropped here).

        A record's keys are its ``KEYS`` words, its ``UNIQ_KEY`` and what the store's ``key_extractor``
        finds in the body. The index is built on the reput thread, so records appended in the last
        milliseconds may be missing. Raises ValueError for ``max_num < 1``, :class:`StoreClosedError` when not
        open.
        """
        self._check_open()
        if max_num < 1:
            raise ValueError(f"max_num must be >= 1: {max_num}")
        if not self._index_enabled or not isinstance(key, str) or not key:
            return []
        messages: list[StoredMessage] = []
        offsets = self._index_service.query_offsets(topic, key, max_num, begin_ms, end_ms)
        for offset in dict.fromkeys(offsets):  # an item indexed twice (a retried dispatch) counts once
            try:
                record = self._commit_log.read_record(offset, check_crc=True)
            except (CorruptRecordError, OffsetOutOfRangeError) as exc:
                log.warning("query %s#%s: commit log offset %d skipped: %s", topic, key, offset, exc)
                continue
            if record.topic != topic or not begin_ms <= record.store_timestamp <= end_ms:
                continue
            if key not in self._record_keys(record.topic, record.body, record.properties_raw):
                continue  # a hash collision (RocketMQ logs "maybe hash duplicate")
            messages.append(stored_message_of(record))
        messages.sort(key=lambda m: m.commit_log_offset)
        return messages

    def _record_keys(self, topic: str, body: memoryview, properties_raw: memoryview) -> set[str]:
        keys: set[str] = set()
        if len(properties_raw):
            try:
                properties = decode_properties(properties_raw)
            except CorruptRecordError:
                properties = {}
            keys.update(properties.get(PROPERTY_KEYS, "").split())
            if properties.get(PROPERTY_UNIQ_KEY):
                keys.add(properties[PROPERTY_UNIQ_KEY])
        extractor = self._index_service.key_extractor
        if extractor is not None:
            try:
                keys.update(extractor(topic, body))
            except Exception:  # the application's extractor: its failure only loses keys, never the query
                log.warning("key extractor failed on a %s record", topic, exc_info=True)
        return keys

    # -- queue bounds ----------------------------------------------------------------------------------------

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        queue = self._consume_queues.get(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still held (0 for an unknown queue)."""
        queue = self._consume_queues.get(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a consume queue, sorted."""
        return self._consume_queues.queues()


def _nothing_read(tag_hashes: frozenset[int] | None) -> GetStatus:
    """The status of a read that returns no message: without a filter every unit read pointed at a damaged
    record (``MESSAGE_WAS_REMOVING``); with one, no unit matched (``NO_MATCHED_MESSAGE``)."""
    return GetStatus.MESSAGE_WAS_REMOVING if tag_hashes is None else GetStatus.NO_MATCHED_MESSAGE


def _outside_queue(queue_offset: int, min_offset: int, max_offset: int) -> GetResult:
    """The answer of ``get`` for a ``queue_offset`` outside ``[min_offset, max_offset)`` (RocketMQ
    ``getMessage``'s statuses and next-begin offsets)."""
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_offset, max_offset)
    if queue_offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, [], min_offset, min_offset, max_offset)
    if queue_offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], queue_offset, min_offset, max_offset)
    return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], max_offset, min_offset, max_offset)
