"""ManagedLedgerConfig: the knobs of a managed ledger and its cursors (Pulsar ``ManagedLedgerConfig``).

Defaults are the broker's (apache/pulsar ``conf/broker.conf``, which ``BrokerService.getManagedLedgerConfig``
maps onto ManagedLedgerConfig), see reference/semantics.md B1.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ManagedLedgerConfig"]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagedLedgerConfig:
    """Configuration of every managed ledger a factory opens. Validated on construction (``ValueError``)."""

    max_entries_per_ledger: int = 50_000
    """Entries after which the current ledger is full (``managedLedgerMaxEntriesPerLedger``). The add
    that fills it is that ledger's last entry: a full ledger holds entry ids 0 .. max_entries_per_ledger-1."""

    max_size_per_ledger_bytes: int = 2048 * MIB
    """Bytes of entry data after which the current ledger is full (``managedLedgerMaxSizePerLedgerMbytes`` =
    2048 MiB in broker.conf; the library-only default is 100 MiB)."""

    max_ledger_rollover_time_ms: int = 240 * 60 * 1000
    """Age (ms) after which the current ledger is full (``managedLedgerMaxLedgerRolloverTimeMinutes``=240)."""

    min_ledger_rollover_time_ms: int = 10 * 60 * 1000
    """A full ledger rolls over only once it is older than this (ms); 0 rolls at once
    (``managedLedgerMinLedgerRolloverTimeMinutes`` = 10; semantics.md gotcha #10). Tests set 0."""

    max_unacked_ranges_to_persist: int = 10_000
    """At most this many individually-deleted ranges are persisted per cursor; the ones above are kept only in
    memory and redelivered after a crash (``managedLedgerMaxUnackedRangesToPersist``)."""

    max_batch_deleted_index_to_persist: int = 10_000
    """At most this many partly acknowledged batch entries (their batch-index ack sets) are persisted per
    cursor, the lowest positions first (``maxBatchDeletedIndexToPersist``)."""

    retention_time_ms: int = -1
    """Initial retention of consumed ledgers (ms; -1 unlimited, 0 none); ``ManagedLedger.set_retention``
    changes it per ledger. Pulsar's library default is 0 (the broker sets it from the retention policy,
    ``defaultRetentionTimeInMinutes`` = 0); Quasar's library keeps everything until told otherwise."""

    retention_size_bytes: int = -1
    """Initial retention size of consumed ledgers (bytes; -1 unlimited, 0 none), as ``retention_time_ms``."""

    cursor_persist_interval_ms: int = 1000
    """Durable cursor state is persisted at most once per this interval (ms), in the background; cursors are
    always persisted on close (Pulsar ``managedLedgerDefaultMarkDeleteRateLimit`` = 1.0/s)."""

    def __post_init__(self) -> None:
        if self.max_entries_per_ledger <= 0:
            raise ValueError(f"max_entries_per_ledger must be > 0, got {self.max_entries_per_ledger}")
        if self.max_size_per_ledger_bytes <= 0:
            raise ValueError(f"max_size_per_ledger_bytes must be > 0, got {self.max_size_per_ledger_bytes}")
        if self.max_ledger_rollover_time_ms <= 0:
            raise ValueError(
                f"max_ledger_rollover_time_ms must be > 0, got {self.max_ledger_rollover_time_ms}"
            )
        if self.min_ledger_rollover_time_ms < 0:
            raise ValueError(
                f"min_ledger_rollover_time_ms must be >= 0, got {self.min_ledger_rollover_time_ms}"
            )
        if self.max_unacked_ranges_to_persist < 0:
            raise ValueError(
                f"max_unacked_ranges_to_persist must be >= 0, got {self.max_unacked_ranges_to_persist}"
            )
        if self.max_batch_deleted_index_to_persist < 0:
            raise ValueError(
                "max_batch_deleted_index_to_persist must be >= 0, "
                f"got {self.max_batch_deleted_index_to_persist}"
            )
        if self.retention_time_ms < -1 or self.retention_size_bytes < -1:
            raise ValueError("retention_time_ms and retention_size_bytes must be >= -1")
        if self.cursor_persist_interval_ms <= 0:
            raise ValueError(f"cursor_persist_interval_ms must be > 0, got {self.cursor_persist_interval_ms}")
