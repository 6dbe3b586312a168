"""The typed port through which a replicated broker's composition root plugs replication into BrokerApp.

The broker package may not import ``quasar.replication`` (DESIGN.md import rules): ``quasar broker`` builds a
``quasar.replication.node.ReplicaNode`` and hands it to :class:`~quasar.broker.app.BrokerApp`, which sees it
only through :class:`ReplicationPort`. The node in turn drives the broker through :class:`ServingBroker`,
which BrokerApp implements: serve as the group's master (open the managed ledgers, register as master) or as
a slave (close every topic and connection, register as slave).
"""

from __future__ import annotations

from typing import Any, Protocol

from quasar.metadata import MetadataStore
from quasar.storage.message_store import MessageStore
from quasar.storage.port import MessageStorePort

__all__ = ["ReplicationPort", "ServingBroker"]


class ServingBroker(Protocol):
    """What replication asks of the broker when the group's leadership changes."""

    async def serve_as_master(self, epoch: int) -> None:
        """Open the managed ledgers (the store already accepts puts) and register as the group's master under
        master epoch ``epoch``. Raises the ledger's or the metadata port's errors."""
        ...

    async def serve_slave_reads(self, epoch: int) -> None:
        """The group has no master and none can be elected: serve reads from this slave's copy and refuse
        publishing (RocketMQ's slave read) until :meth:`serve_as_slave` or :meth:`serve_as_master`."""
        ...

    async def serve_as_slave(self, epoch: int) -> None:
        """Stop serving topics (clients reconnect and look the topic up at the new master), close the managed
        ledgers, and register as a slave under ``epoch``. Never raises for a client or topic failure."""
        ...


class ReplicationPort(Protocol):
    """A replicated broker's replication (``quasar.replication.node.ReplicaNode``)."""

    @property
    def ha_address(self) -> str:
        """``host:port`` of this broker's HA listener, once :meth:`open` returned."""
        ...

    async def open(
        self, store: MessageStore, local_metadata: MetadataStore, cluster_metadata: MetadataStore
    ) -> tuple[MessageStorePort, MetadataStore]:
        """Called once the store is open and started (in replica mode: it refuses puts) and the local and the
        cluster (etcd) metadata stores are open: bind the HA listener and return the store port and the
        metadata store the managed ledgers must use (the replicated store and the journaled metadata)."""
        ...

    async def start(self, broker: ServingBroker) -> None:
        """Called once the broker serves its listeners as a slave: decide this broker's role in its group (etcd)
        and call ``broker.serve_as_master`` / ``serve_as_slave`` now and whenever it changes."""
        ...

    def write_refusal(self) -> str | None:
        """Why publishing is refused right now (e.g. a SYNC_MASTER whose replicas have been out of sync for
        longer than the slave timeout), or None. Cheap: called for every new producer."""
        ...

    def status(self) -> dict[str, Any]:
        """This broker's replication status as JSON-able values (``GET /admin/v2/replication``): at least
        ``role`` ("starting" / "master" / "slave" / "stopped"), ``epoch``, ``group``, ``brokerId``."""
        ...

    async def request_failover(self) -> str | None:
        """Manual switch on the master: resign so an in-sync slave is elected. None when done, else why it
        was refused (not the master, no slave in sync)."""
        ...

    async def stop(self) -> None:
        """Stop replicating (resign leadership when master, so a slave takes over without waiting for the lease
        to expire). Idempotent."""
        ...
