"""StoreConfig: every knob of the message store, with RocketMQ's defaults unless noted
(``MessageStoreConfig``)."""

from __future__ import annotations

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
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive: {getattr(self, name)}")
        if self.flush_least_pages < 0 or self.flush_consume_queue_least_pages < 0:
            raise ValueError("least-pages settings must be >= 0")
