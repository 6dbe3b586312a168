"""CommitLog: append, roll-over with a blank record, read back, valid-end scan."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from quasar.storage.commit_log import CommitLog
from quasar.storage.errors import CorruptRecordError, OffsetOutOfRangeError
from quasar.storage.record import (
    BLANK,
    BLANK_MAGIC_CODE,
    CRC32_RESERVED_LEN,
    END_FILE_MIN_BLANK_LENGTH,
    encode_properties,
)
from quasar.storage.status import AppendMessageStatus

from .conftest import SEGMENT_SIZE, body_for


def _append(log: CommitLog, i: int, *, body: bytes | None = None, properties: bytes = b""):
    return log.append(
        topic=b"orders",
        queue_id=i % 3,
        queue_offset=i,
        body=body_for(i) if body is None else body,
        properties=properties,
        store_timestamp=1000 + i,
        born_timestamp=999,
    )


def test_append_rolls_segments_and_ends_full_files_with_a_blank_record(tmp_path: Path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_SIZE)
    results = [_append(log, i) for i in range(150)]
    assert all(r.status is AppendMessageStatus.PUT_OK for r in results)
    files = log.mapped_file_queue.mapped_files
    assert len(files) >= 3
    for previous, result in itertools.pairwise(results):
        end = previous.wrote_offset + previous.wrote_bytes
        if result.wrote_offset != end:  # rolled: the record went to the start of the next file
            assert result.wrote_offset % SEGMENT_SIZE == 0
            first = log.mapped_file_queue.find_mapped_file_by_offset(end)
            position = end - first.file_from_offset
            assert BLANK.unpack_from(first.buffer, position) == (SEGMENT_SIZE - position, BLANK_MAGIC_CODE)
            assert SEGMENT_SIZE - position < result.wrote_bytes + END_FILE_MIN_BLANK_LENGTH
    for i, result in enumerate(results):
        stored = log.read_record(result.wrote_offset, check_crc=True)
        assert bytes(stored.body) == body_for(i)
        assert (stored.queue_offset, stored.queue_id, stored.topic) == (i, i % 3, "orders")
        assert stored.physical_offset == result.wrote_offset
        assert stored.store_timestamp == 1000 + i
    assert log.max_offset == results[-1].wrote_offset + results[-1].wrote_bytes
    assert log.find_valid_end(0) == log.max_offset
    log.close()


def test_record_that_never_fits_a_segment_is_rejected(tmp_path: Path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_SIZE)
    assert _append(log, 0, body=bytes(SEGMENT_SIZE)).status is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
    big_properties = encode_properties({"k": "v" * 40000})
    assert _append(log, 0, properties=big_properties).status is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert log.max_offset == 0
    fits = SEGMENT_SIZE - 8 - 88 - 1 - 6 - 2 - CRC32_RESERVED_LEN  # fills a segment but the 8-byte blank
    assert _append(log, 0, body=bytes(fits)).status is AppendMessageStatus.PUT_OK
    assert log.max_offset == SEGMENT_SIZE - 8
    log.close()


def test_read_checks_ranges_and_record_boundaries(tmp_path: Path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_SIZE)
    first = _append(log, 0)
    second = _append(log, 1)
    raw = log.read(second.wrote_offset, second.wrote_bytes)
    assert bytes(raw[:4]) == second.wrote_bytes.to_bytes(4, "big")  # TOTALSIZE of the second record
    # body, then topic (1 + 6 bytes) and properties (2 + the 20-byte __CRC32# property)
    assert bytes(raw[-len(body_for(1)) - 29 : -29]) == body_for(1)
    assert bytes(raw[-20:-11]) == b"__CRC32#\x01" and bytes(raw[-11:-1]).isdigit() and raw[-1] == 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second.wrote_offset, second.wrote_bytes + 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_record(10 * SEGMENT_SIZE)
    with pytest.raises(CorruptRecordError):
        log.read_record(first.wrote_offset + 4)  # not a record boundary
    log.close()


def test_find_valid_end_stops_at_the_first_damaged_record(tmp_path: Path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_SIZE)
    results = [_append(log, i) for i in range(120)]
    victim = results[70]
    mapped_file = log.mapped_file_queue.find_mapped_file_by_offset(victim.wrote_offset)
    mapped_file.buffer[victim.wrote_offset - mapped_file.file_from_offset + 90] ^= 0xFF  # inside the body
    assert log.find_valid_end(0) == victim.wrote_offset
    assert log.find_valid_end(0, check_crc=False) == log.max_offset
    assert log.find_valid_end(results[80].wrote_offset) == log.max_offset  # scan starts past the damage
    records = list(log.iter_records(0, victim.wrote_offset))
    assert [r.queue_offset for r in records] == list(range(70))
    log.close()


def test_recovery_start_is_the_third_last_segment(tmp_path: Path):
    log = CommitLog(tmp_path / "commitlog", SEGMENT_SIZE)
    assert log.recovery_start_offset() == 0
    for i in range(200):
        _append(log, i)
    count = len(log.mapped_file_queue.mapped_files)
    assert count >= 4
    assert log.recovery_start_offset() == (count - 3) * SEGMENT_SIZE
    log.close()
