"""ReplicationConfig defaults and validation."""

from __future__ import annotations

import pytest

from quasar.replication.config import BrokerRole, ReplicationConfig


def test_defaults_follow_rocketmq() -> None:
    config = ReplicationConfig()
    assert config.ha_port == 10912
    assert config.ha_transfer_batch_size == 32768
    assert config.ha_max_gap_not_in_sync == 256 * 1024 * 1024
    assert config.in_sync_replicas == 1
    assert ReplicationConfig(broker_role=BrokerRole.SYNC_MASTER).in_sync_replicas == 2
    assert ReplicationConfig(broker_role=BrokerRole.SYNC_MASTER, in_sync_replicas=3).in_sync_replicas == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ha_port", 70000),
        ("ha_send_heartbeat_interval_s", 0),
        ("ha_housekeeping_interval_s", 1.0),
        ("ha_transfer_batch_size", 0),
        ("ha_max_gap_not_in_sync", 0),
        ("in_sync_replicas", -1),
        ("min_in_sync_replicas", 3),
        ("broker_role", "SLAVE"),
    ],
)
def test_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ReplicationConfig(**{field: value})  # type: ignore[arg-type]
