"""Broker configuration: one frozen dataclass, loadable from a TOML file.

Names follow Pulsar's ``broker.conf`` in snake_case where the setting exists there; units are in the names.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # bytes; Pulsar's maxMessageSize default


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Everything ``quasar standalone`` needs.

    - ``host``/``port``: the Pulsar binary listener (``pulsar://host:port``); port 0 binds a free port.
    - ``admin_port``: the admin REST listener on the same host; 0 binds a free port.
    - ``data_dir``: root of the commit log, consume queues and the metadata database.
    - ``max_message_size``: bytes of metadata + payload accepted per entry, advertised in CONNECTED
      (Pulsar default 5 MiB).
    - ``commit_log_file_size``: bytes per commit log segment (RocketMQ default 1 GiB).
    - ``flush_disk_type``: ``"SYNC_FLUSH"`` (receipt after fsync, default) or ``"ASYNC_FLUSH"``.
    - ``managed_ledger_max_entries_per_ledger`` / ``managed_ledger_min_ledger_rollover_time_ms``: ledger
      rollover (Pulsar defaults 50,000 entries and 10 min).
    - ``dispatcher_max_read_batch_size``: entries read per dispatch round (Pulsar's dispatcherMaxReadBatchSize 100).
    - ``keep_alive_interval_s``: seconds between broker PINGs on an idle connection (Pulsar 30 s).
    """

    host: str = "127.0.0.1"
    port: int = 6650
    admin_port: int = 8080
    data_dir: Path = field(default_factory=lambda: Path("data"))
    cluster_name: str = "standalone"
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    commit_log_file_size: int = 1024 * 1024 * 1024
    flush_disk_type: str = "SYNC_FLUSH"
    sync_flush_timeout_ms: int = 5000
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_min_ledger_rollover_time_ms: int = 10 * 60 * 1000
    managed_ledger_cursor_persist_interval_ms: int = 1000
    dispatcher_max_read_batch_size: int = 100
    keep_alive_interval_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535 or not 0 <= self.admin_port <= 65535:
            raise ValueError(f"ports must be in 0..65535, got {self.port} and {self.admin_port}")
        if self.max_message_size <= 0:
            raise ValueError(f"max_message_size must be positive, got {self.max_message_size}")
        if self.flush_disk_type not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            raise ValueError(
                f"flush_disk_type must be SYNC_FLUSH or ASYNC_FLUSH, got {self.flush_disk_type!r}"
            )
        if self.managed_ledger_max_entries_per_ledger <= 0:
            raise ValueError("managed_ledger_max_entries_per_ledger must be positive")
        if self.dispatcher_max_read_batch_size <= 0:
            raise ValueError("dispatcher_max_read_batch_size must be positive")

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Load a TOML file of ``name = value`` pairs (names as the fields above), then apply ``overrides``.

        Raises ValueError for an unknown key or a bad value, OSError if the file cannot be read.
        """
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        return cls.from_mapping({**raw, **overrides})

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> BrokerConfig:
        """Build a config from a mapping; unknown keys raise ValueError listing the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid keys: {sorted(names)}")
        values = dict(values)
        if "data_dir" in values:
            values["data_dir"] = Path(values["data_dir"])
        return cls(**values)
