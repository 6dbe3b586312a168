"""ReplicationConfig: how a broker group replicates (RocketMQ ``MessageStoreConfig``'s HA fields, snake_case).

Frozen, validated on construction (ValueError with the field name), printable in logs. Defaults are
RocketMQ's; units are in the names (``_s`` seconds, sizes in bytes).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["MAX_TRANSFER_BODY_SIZE", "BrokerRole", "ReplicationConfig"]

MAX_TRANSFER_BODY_SIZE = 64 * 1024 * 1024
"""Largest TRANSFER body a peer accepts (64 MiB): one commit log record may exceed the batch size."""


class BrokerRole(enum.Enum):
    """A broker's place in its group (RocketMQ ``BrokerRole``)."""

    #: master; send receipts do not wait for the slaves
    ASYNC_MASTER = "ASYNC_MASTER"
    #: master; send receipts wait until enough in-sync replicas acknowledged (needAckNums)
    SYNC_MASTER = "SYNC_MASTER"
    #: replica: pulls the master's commit log; refuses puts
    SLAVE = "SLAVE"


@dataclass(frozen=True, kw_only=True)
class ReplicationConfig:
    """The HA settings of one broker.

    Raises:
        ValueError: a field out of range (the message names it).
    """

    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    """RocketMQ ``brokerRole``."""
    ha_port: int = 10912
    """The master's HA listen port (RocketMQ ``haListenPort``, broker port + 1); 0 = any free port."""
    ha_send_heartbeat_interval_s: float = 5.0
    """Longest silence of either side: the slave reports and the idle master sends an empty TRANSFER at least
    this often, seconds (``haSendHeartbeatInterval``)."""
    ha_housekeeping_interval_s: float = 20.0
    """A connection silent this long is closed, seconds (``haHousekeepingInterval``)."""
    ha_transfer_batch_size: int = 32 * 1024
    """Most commit log bytes per TRANSFER (one bigger record is sent whole), bytes (``haTransferBatchSize``)."""
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    """A connected slave less than this far behind the master's max offset is in sync, bytes
    (``haMaxGapNotInSync``)."""
    ha_max_time_slave_not_catchup_s: float = 15.0
    """A sync-state set member that has not caught up for this long (or stayed disconnected this long) is
    removed, seconds (``haMaxTimeSlaveNotCatchup``)."""
    slave_timeout_s: float = 3.0
    """A SYNC_MASTER receipt waits this long for the slaves, then answers FLUSH_SLAVE_TIMEOUT, seconds
    (``slaveTimeout``)."""
    in_sync_replicas: int = 0
    """Replicas (counting the master) that must hold a message before a SYNC_MASTER receipt
    (``inSyncReplicas``); 0 = by role: 2 for SYNC_MASTER, 1 otherwise (resolved on construction)."""
    min_in_sync_replicas: int = 1
    """Lower bound of needAckNums when ``enable_auto_in_sync_replicas`` (``minInSyncReplicas``)."""
    enable_auto_in_sync_replicas: bool = False
    """needAckNums follows the current in-sync count, bounded by ``min_in_sync_replicas``
    (``enableAutoInSyncReplicas``)."""
    ha_reconnect_min_backoff_s: float = 0.1
    """The slave's first pause before reconnecting, seconds; doubled after each failure."""
    ha_reconnect_max_backoff_s: float = 5.0
    """The slave's longest pause between connection attempts, seconds (RocketMQ HAClient waits 5 s)."""

    def __post_init__(self) -> None:
        if not isinstance(self.broker_role, BrokerRole):
            raise ValueError(f"broker_role must be a BrokerRole: {self.broker_role!r}")
        if not 0 <= self.ha_port <= 65535:
            raise ValueError(f"ha_port must be in 0..65535: {self.ha_port}")
        for name in (
            "ha_send_heartbeat_interval_s",
            "ha_housekeeping_interval_s",
            "ha_max_time_slave_not_catchup_s",
            "slave_timeout_s",
            "ha_reconnect_min_backoff_s",
            "ha_reconnect_max_backoff_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds: {getattr(self, name)}")
        if self.ha_housekeeping_interval_s <= self.ha_send_heartbeat_interval_s:
            raise ValueError(
                "ha_housekeeping_interval_s must exceed ha_send_heartbeat_interval_s "
                f"({self.ha_housekeeping_interval_s} <= {self.ha_send_heartbeat_interval_s}): "
                "heartbeats would not keep connections open"
            )
        if self.ha_reconnect_max_backoff_s < self.ha_reconnect_min_backoff_s:
            raise ValueError("ha_reconnect_max_backoff_s must be >= ha_reconnect_min_backoff_s")
        if not 0 < self.ha_transfer_batch_size <= MAX_TRANSFER_BODY_SIZE:
            raise ValueError(
                f"ha_transfer_batch_size must be in 1..{MAX_TRANSFER_BODY_SIZE} bytes: "
                f"{self.ha_transfer_batch_size}"
            )
        if self.ha_max_gap_not_in_sync <= 0:
            raise ValueError(f"ha_max_gap_not_in_sync must be > 0 bytes: {self.ha_max_gap_not_in_sync}")
        if self.in_sync_replicas == 0:
            default = 2 if self.broker_role is BrokerRole.SYNC_MASTER else 1
            object.__setattr__(self, "in_sync_replicas", default)
        if self.in_sync_replicas < 1:
            raise ValueError(
                f"in_sync_replicas must be >= 1 (or 0 for the role's default): {self.in_sync_replicas}"
            )
        if not 1 <= self.min_in_sync_replicas <= self.in_sync_replicas:
            raise ValueError(
                f"min_in_sync_replicas must be in 1..in_sync_replicas ({self.in_sync_replicas}): "
                f"{self.min_in_sync_replicas}"
            )

    @property
    def is_master(self) -> bool:
        """True for ASYNC_MASTER and SYNC_MASTER."""
        return self.broker_role is not BrokerRole.SLAVE
