"""StoreConfig: every knob of the message store, with RocketMQ's defaults unless noted
(``MessageStoreConfig``)."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

from quasar.storage.consume_queue import CQ_STORE_UNIT_SIZE
from quasar.storage.flush import FlushDiskType

MIN_COMMIT_LOG_FILE_SIZE = 1024


@dataclass(frozen=True)
class StoreConfig:
    """Configuration of a :class:`~quasar.storage.message_store.MessageStore`. Validated on construction
    (``ValueError``). Sizes are bytes, times milliseconds.
    """

    root_dir: Path
    """``storePathRootDir``: holds ``commitlog/``, ``consumequeue/``, ``checkpoint``, ``abort``, ``lock``."""
    commit_log_file_size: int = 1024**3
    """``mappedFileSizeCommitLog`` (1 GiB). A record must fit in one file with 8 bytes to spare."""
    consume_queue_file_size: int = 300_000 * CQ_STORE_UNIT_SIZE
    """``mappedFileSizeConsumeQueue``: 300,000 units of 20 bytes; must be a multiple of 20."""
    flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH
    """Quasar's default is SYNC_FLUSH (RocketMQ's is ASYNC_FLUSH): a send receipt means the entry is on
    disk."""
    sync_flush_timeout_ms: int = 5000
    """``syncFlushTimeout``: a group commit waiter's deadline, then ``FLUSH_DISK_TIMEOUT``."""
    flush_interval_ms: int = 500
    """``flushIntervalCommitLog``: ASYNC_FLUSH period."""
    flush_least_pages: int = 4
    """``flushCommitLogLeastPages``: ASYNC_FLUSH syncs only when this many 4 KiB pages are dirty..."""
    flush_thorough_interval_ms: int = 10_000
    """``flushCommitLogThoroughInterval``: ...except at least this often, when any dirty byte is synced."""
    max_message_size: int = 8 * 1024 * 1024
    """Largest body accepted by ``put`` (bytes of body; larger gives ``MESSAGE_ILLEGAL``)."""
    flush_consume_queue_interval_ms: int = 1000
    """``flushIntervalConsumeQueue``."""
    flush_consume_queue_least_pages: int = 2
    """``flushConsumeQueueLeastPages``."""
    flush_consume_queue_thorough_interval_ms: int = 60_000
    """``flushConsumeQueueThoroughInterval``: a thorough round flushes every queue and writes the
    checkpoint."""
    check_crc_on_recover: bool = True
    """``checkCRCOnRecover``."""
    enabled_append_prop_crc: bool = True
    """``enabledAppendPropCRC`` (RocketMQ default false): append the 20-byte ``__CRC32#`` whole-record CRC
    property, so recovery also catches damage outside the body (header, topic, properties)."""
    force_verify_prop_crc: bool = True
    """``forceVerifyPropCRC``: on recovery a record without the ``__CRC32#`` property is invalid."""
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    """STOREHOSTADDRESS written into each record (IPv4 address, port); also the default BORNHOST."""
    message_index_enable: bool = True
    """``messageIndexEnable``: build the key index (``index/``) on the reput thread."""
    max_hash_slot_num: int = 5_000_000
    """``maxHashSlotNum``: hash slots per index file (4 bytes each)."""
    max_index_num: int = 20_000_000
    """``maxIndexNum``: index items per index file (20 bytes each); a file is 420,000,040 bytes (sparse)."""
    warm_mapped_file_enable: bool = False
    """``warmMapedFileEnable``: touch every 4 KiB page of a pre-allocated commit log segment (and madvise
    WILLNEED) before it is used."""
    file_reserved_time_h: float = 72
    """``fileReservedTime``: hours a commit log segment is kept after its last write, unless the disk is
    short of space."""
    delete_when: str = "04"
    """``deleteWhen``: hours of the day (``"04"``, ``"04;16"``) when expired segments are deleted."""
    disk_max_used_space_ratio: int = 75
    """``diskMaxUsedSpaceRatio`` (percent): above it, expired segments are deleted at any hour."""
    disk_space_clean_forcibly_ratio: int = 85
    """``diskSpaceCleanForciblyRatio`` (percent, clamped to 30..85): above it, segments no queue needs are
    deleted whatever their age."""
    disk_space_warning_level_ratio: int = 90
    """``diskSpaceWarningLevelRatio`` (percent, clamped to 35..90): above it the disk is full: puts answer
    ``SERVICE_NOT_AVAILABLE`` until space is freed."""
    clean_resource_interval_ms: int = 10_000
    """``cleanResourceInterval``: period of the clean service."""
    delete_file_batch_max: int = 10
    """``deleteFileBatchMax``: segments deleted per clean round at most."""
    clean_file_forcibly_enable: bool = True
    """``cleanFileForciblyEnable``: allow age-independent deletion above the clean-forcibly ratio."""

    max_open_consume_queue_files: int = 0
    """Quasar (issue 21): consume queue files mapped at a time at most; the least recently used ones beyond it
    are unmapped, and mapped again when used (:mod:`quasar.storage.file_cache`). A mapped file holds one file
    descriptor (the duplicate ``mmap`` keeps) and one memory mapping. 0 (the default) derives it when the
    store opens from the soft ``RLIMIT_NOFILE``: what is left after 512 descriptors for the rest of the broker
    (connections, commit log, index, metadata), at least 16 and at most 32,768 files (Linux allows 65,530
    mappings per process by default): 512 under the common 1,024 limit."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root_dir", Path(self.root_dir))
        if self.commit_log_file_size < MIN_COMMIT_LOG_FILE_SIZE:
            raise ValueError(
                f"commit_log_file_size must be >= {MIN_COMMIT_LOG_FILE_SIZE}: {self.commit_log_file_size}"
            )
        if self.consume_queue_file_size <= 0 or self.consume_queue_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(
                f"consume_queue_file_size must be a positive multiple of 20: {self.consume_queue_file_size}"
            )
        if not isinstance(self.flush_disk_type, FlushDiskType):
            raise ValueError(f"flush_disk_type must be a FlushDiskType: {self.flush_disk_type!r}")
        for name in (
            "sync_flush_timeout_ms",
            "flush_interval_ms",
            "flush_thorough_interval_ms",
            "max_message_size",
            "flush_consume_queue_interval_ms",
            "flush_consume_queue_thorough_interval_ms",
            "max_hash_slot_num",
            "clean_resource_interval_ms",
            "delete_file_batch_max",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive: {getattr(self, name)}")
        if self.flush_least_pages < 0 or self.flush_consume_queue_least_pages < 0:
            raise ValueError("least-pages settings must be >= 0")
        if self.max_open_consume_queue_files < 0:
            raise ValueError(
                f"max_open_consume_queue_files must be >= 0: {self.max_open_consume_queue_files}"
            )
        if self.max_index_num < 2:
            raise ValueError(f"max_index_num must be >= 2: {self.max_index_num}")
        if self.file_reserved_time_h < 0:
            raise ValueError(f"file_reserved_time_h must be >= 0: {self.file_reserved_time_h}")
        parse_delete_when(self.delete_when)
        for name in (
            "disk_max_used_space_ratio",
            "disk_space_clean_forcibly_ratio",
            "disk_space_warning_level_ratio",
        ):
            if not 1 <= getattr(self, name) <= 99:
                raise ValueError(f"{name} must be a percentage in 1..99: {getattr(self, name)}")

    @property
    def clean_forcibly_ratio(self) -> float:
        """``diskSpaceCleanForciblyRatio`` as a fraction, clamped to 0.30..0.85 (RocketMQ)."""
        return min(max(self.disk_space_clean_forcibly_ratio / 100, 0.30), 0.85)

    @property
    def warning_level_ratio(self) -> float:
        """``diskSpaceWarningLevelRatio`` as a fraction, clamped to 0.35..0.90 (RocketMQ)."""
        return min(max(self.disk_space_warning_level_ratio / 100, 0.35), 0.90)


OPEN_FILES_KEPT_FOR_THE_BROKER = 512
"""Descriptors the derived budget leaves to everything else (connections, commit log, index, metadata)."""
MAX_DERIVED_FILE_BUDGET = 32_768
"""Most mapped files the derived budget allows (half of Linux's default ``vm.max_map_count``)."""


def consume_queue_file_budget(config: StoreConfig, soft_limit: int | None = None) -> int:
    """The number of consume queue files the store keeps mapped: ``max_open_consume_queue_files``, or when it
    is 0, ``soft RLIMIT_NOFILE - 512`` clamped to 16..32,768 (``soft_limit`` overrides the process's limit,
    for tests; an unlimited one gives 32,768)."""
    if config.max_open_consume_queue_files:
        return config.max_open_consume_queue_files
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return MAX_DERIVED_FILE_BUDGET
    return min(MAX_DERIVED_FILE_BUDGET, max(16, soft_limit - OPEN_FILES_KEPT_FOR_THE_BROKER))


def parse_delete_when(delete_when: str) -> frozenset[int]:
    """``"04;16"`` -> ``{4, 16}`` (RocketMQ ``UtilAll.isItTimeToDo``); raises ValueError on anything else."""
    hours = set()
    for part in str(delete_when).split(";"):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ValueError(f"delete_when must be ';'-separated hours 0..23: {delete_when!r}")
        hours.add(int(part))
    return frozenset(hours)
