"""ReplicaNode: one broker's place in its replicated broker group, driven by the group's leadership in etcd.

RocketMQ 5's controller mode (reference/cluster.md §4) with etcd as the controller (``group_state``): the
master holds the group's leader key on its session lease; when the lease expires an in-sync slave is elected,
bumps the epoch and becomes master; a returning old master finds a newer epoch, follows it and truncates the
tail it wrote after the last common epoch (the HA handshake does that, ``ha_client``).

The node owns, for its broker:

- the HA listener (``HAService``; it answers NOT_MASTER while this broker is a slave) and, on a slave, the
  ``HAClient`` that pulls the master's commit log and the ``JournalApplier`` that applies the state journal;
- the ports the managed ledgers use: ``ReplicatedStore`` (SYNC_MASTER receipts wait for the in-sync
  replicas) and ``JournaledMetadataStore`` (ledger and cursor state travels in the commit log);
- the role changes, in this order:

  promotion   stop the HA client -> apply the whole journal -> epoch entry (new epoch, max offset) -> the
              store accepts puts -> journal on -> ``broker.serve_as_master(epoch)`` -> journal a full state
              snapshot;
  step-down   the store refuses puts at once (a master whose lease is gone must not receipt anything) ->
              journal off -> ``broker.serve_as_slave(epoch)`` -> local state cleared and re-applied from the
              journal -> follow the new master;
  slave read  no leader and this slave cannot be elected (not in the sync-state set): ``broker.
              serve_slave_reads(epoch)`` serves consumers and readers from its copy and refuses publishing
              (RocketMQ's slave read) until a master is back (then ``serve_as_slave``) or it is elected.

Every task it starts is owned here and cancelled by :meth:`ReplicaNode.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from quasar.metadata.errors import MetadataStoreError
from quasar.metadata.port import MetadataStore
from quasar.replication.config import BrokerRole, ReplicationConfig
from quasar.replication.election import campaign_rank
from quasar.replication.group_state import GroupLeadership, GroupState, GroupStateError, LeaderInfo
from quasar.replication.group_transfer import GroupTransfer
from quasar.replication.ha_client import HAClient
from quasar.replication.ha_service import HAService
from quasar.replication.state_journal import APPLIED_OFFSET_PATH, JournalApplier, JournaledMetadataStore
from quasar.replication.store_adapter import ReplicatedStore
from quasar.storage.message_store import MessageStore
from quasar.storage.port import MessageStorePort
from quasar.storage.status import PutStatus

__all__ = ["ReplicaNode", "ServingBroker"]

log = logging.getLogger(__name__)

ELECTION_BACKOFF_S = 2.0
"""Extra wait per rank for a candidate that is not the first in line (lowest broker id)."""


class ServingBroker(Protocol):
    """The broker side of a role change (``quasar.broker.app.BrokerApp`` implements it)."""

    async def serve_as_master(self, epoch: int) -> None: ...

    async def serve_as_slave(self, epoch: int) -> None: ...

    async def serve_slave_reads(self, epoch: int) -> None: ...


class ReplicaNode:
    """Replication of one broker (see the module docstring).

    ``group`` / ``broker_id``:
    this broker's group and stable id; ``config.broker_role``: the role it starts in (a master bootstraps a
    group nobody started yet; a SLAVE never does); ``promoted_role``: how a SLAVE serves once elected (None:
    as the master it followed last, from its leader key; SYNC_MASTER when it never saw one);
    ``host``: the HA listener's bind and advertised address; ``snapshot_interval_s``: how often a master
    journals its full ledger/cursor state again; ``unclean``: RocketMQ enableElectUncleanMaster.
    """

    def __init__(
        self,
        *,
        group: str,
        broker_id: int,
        config: ReplicationConfig,
        promoted_role: BrokerRole | None = None,
        host: str = "127.0.0.1",
        advertised_host: str = "",
        advertised_ha_address: str = "",
        snapshot_interval_s: float = 600.0,
        unclean: bool = False,
    ) -> None:
        self._cluster: MetadataStore | None = None
        self.group = group
        self.broker_id = broker_id
        self.config = config
        self._promoted_role = promoted_role
        self._learned_role: BrokerRole | None = None
        self._host = host
        self._advertised_host = advertised_host or host
        self._advertised_ha_address = advertised_ha_address
        self._snapshot_interval_s = snapshot_interval_s
        self._unclean = unclean
        self.role = "starting"
        """"starting", "master", "slave" or "stopped"."""
        self.epoch = 0
        """The master epoch this broker serves under (0 until it knows one)."""
        self.state: GroupState | None = None
        self.leader: LeaderInfo | None = None
        self._store: MessageStore | None = None
        self._local: MetadataStore | None = None
        self._ha_service: HAService | None = None
        self._ha_client: HAClient | None = None
        self._transfer: GroupTransfer | None = None
        self._adapter: ReplicatedStore | None = None
        self._journaled: JournaledMetadataStore | None = None
        self._applier: JournalApplier | None = None
        self._leadership: GroupLeadership | None = None
        self._broker: ServingBroker | None = None
        self._ha_client_target: tuple[str, int] | None = None
        self._changes = asyncio.Queue[tuple[GroupState | None, LeaderInfo | None]]()
        self._vacancy_since: float | None = None
        self._slave_reads = False
        self._runner: asyncio.Task[None] | None = None
        self._snapshotter: asyncio.Task[None] | None = None
        self.on_role_changed: list[Callable[[str, int], None]] = []
        """Called with (role, epoch) after each change (e.g. the name-server registration)."""

    # ------------------------------------------------------------------ ReplicationPort
    @property
    def ha_address(self) -> str:
        """``host:port`` slaves dial for the HA listener (after :meth:`open`)."""
        if self._advertised_ha_address:
            return self._advertised_ha_address
        port = self._ha_service.port if self._ha_service is not None else self.config.ha_port
        return f"{self._advertised_host}:{port}"

    @property
    def ha_service(self) -> HAService | None:
        return self._ha_service

    @property
    def ha_client(self) -> HAClient | None:
        return self._ha_client

    @property
    def applier(self) -> JournalApplier | None:
        return self._applier

    async def open(
        self, store: MessageStore, local_metadata: MetadataStore, cluster_metadata: MetadataStore
    ) -> tuple[MessageStorePort, MetadataStore]:
        """``cluster_metadata`` is the cluster's etcd store (group state and leader key). Bind the HA listener
        and build the managed ledgers' ports (see ``quasar.broker.replication_port.ReplicationPort``).
        Raises OSError when the HA port cannot be bound."""
        self._store, self._local, self._cluster = store, local_metadata, cluster_metadata
        self._ha_service = HAService(
            store,
            group=self.group,
            epoch_source=self._epoch_source,
            config=self.config,
            broker_id=self.broker_id,
            sync_state_set_store=self,
        )
        await self._ha_service.start(self._host, self.config.ha_port)
        self._adapter = adapter = ReplicatedStore(store, self._ha_service, None)
        # a lambda: the adapter's wait changes when a promotion turns the group transfer on
        self._journaled = JournaledMetadataStore(local_metadata, adapter, self._journal_replicated)
        self._journaled.enabled = False
        self._applier = JournalApplier(
            store,
            local_metadata,
            paused=lambda: self._ha_client is not None and self._ha_client.busy_off_loop,
        )
        return self._adapter, self._journaled

    async def start(self, broker: ServingBroker) -> None:
        """Join the group: follow its leader, or become master (bootstrap of a new group by its configured
        master, or election), then keep following leadership changes. Raises the port's MetadataStoreError
        when etcd cannot be read at start."""
        self._broker = broker
        assert self._cluster is not None, "open() first"
        self._leadership = leadership = GroupLeadership(
            self._cluster, self.group, self.broker_id, address=self.ha_address
        )
        leadership.role = self._master_role().value
        leadership.on_leadership_lost(self._on_leadership_lost)
        leadership.watch(self._on_change)
        state, leader = await leadership.read()
        self._runner = asyncio.get_running_loop().create_task(self._run(state, leader), name="replica-node")

    async def stop(self) -> None:
        """Resign when master (an in-sync slave is elected at once), stop every task and listener. Idempotent."""
        if self.role == "stopped":
            return
        was_master = self.role == "master"
        self.role = "stopped"
        for task in (self._runner, self._snapshotter):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._runner = self._snapshotter = None
        if self._store is not None and was_master:
            self._store.set_replica_mode(True)
        if self._leadership is not None:
            if was_master:
                with contextlib.suppress(MetadataStoreError, Exception):
                    await self._leadership.resign()
            with contextlib.suppress(Exception):
                await self._leadership.close()
        if self._ha_client is not None:
            await self._ha_client.stop()
        if self._applier is not None:
            await self._applier.stop()
        if self._ha_service is not None:
            await self._ha_service.stop()

    async def request_failover(self) -> str | None:
        """Manual switch (``quasar admin broker-group failover``): this master resigns and an in-sync slave
        takes over (this broker holds off campaigning meanwhile). None when done, else why it was refused
        (``NotMasterError`` / ``NothingToFailOverError`` of ``group_state``, or the store being unreachable)."""
        if self._leadership is None:
            return "replication is not started"
        try:
            await self._leadership.request_failover()
        except (GroupStateError, MetadataStoreError) as exc:
            return str(exc)
        log.warning(
            "broker group %s: manual failover requested; broker %d resigned", self.group, self.broker_id
        )
        return None

    def write_refusal(self) -> str | None:
        """Why a producer is refused now: a SYNC_MASTER whose in-sync replicas have been too few for longer
        than ``slave_timeout_s``; None otherwise."""
        transfer = self._transfer
        if transfer is None or self.role != "master" or not transfer.refusing_writes:
            return None
        return (
            f"broker group {self.group}: too few in-sync replicas for a SYNC_MASTER receipt"
            f" ({transfer.need_ack_nums()} needed): publishing resumes once a slave has caught up"
        )

    def status(self) -> dict[str, Any]:
        """This broker's replication status, JSON-able (``GET /admin/v2/replication``)."""
        store = self._store
        doc: dict[str, Any] = {
            "group": self.group,
            "brokerId": self.broker_id,
            "role": self.role,
            "epoch": self.epoch,
            "slaveRead": self._slave_reads,
            "brokerRole": self.config.broker_role.value,
            "haAddress": self.ha_address,
            "maxOffset": store.max_commit_log_offset if store is not None else 0,
            "epochs": [[e.epoch, e.start_offset] for e in store.epoch_file.entries]
            if store is not None
            else [],
        }
        if self.state is not None:
            doc["syncStateSet"] = sorted(self.state.sync_state_set)
            doc["syncStateSetEpoch"] = self.state.sync_state_set_epoch
        if self.leader is not None:
            doc["leader"] = {
                "brokerId": self.leader.broker_id,
                "epoch": self.leader.epoch,
                "address": self.leader.address,
            }
        ha = self._ha_service
        if self.role == "master" and ha is not None:
            doc["syncStateSet"] = sorted(ha.sync_state_set)
            doc["confirmOffset"] = ha.confirm_offset
            doc["slaves"] = {
                str(broker_id): {
                    "connected": broker_id in ha.connected_slaves,
                    "ackedOffset": offset,
                    "inSync": ha.is_slave_in_sync(broker_id),
                }
                for broker_id, offset in sorted(ha.acked_offsets.items())
            }
            doc["syncReplication"] = self._transfer is not None
        client = self._ha_client
        if client is not None:
            doc["haClient"] = {
                "connected": client.connected,
                "masterEpoch": client.master_epoch,
                "confirmOffset": client.confirm_offset,
                "diverged": client.diverged,
            }
        if self._journaled is not None and self._applier is not None:
            doc["stateJournal"] = {
                "recordsWritten": self._journaled.records_written,
                "recordsFailed": self._journaled.records_failed,
                "recordsApplied": self._applier.records_applied,
                "recordsRejected": self._applier.records_rejected,
            }
        return doc

    # ------------------------------------------------------------------ SyncStateSetStore (for HAService)
    async def alter(self, new_set: frozenset[int]) -> bool:
        """Change the group's sync-state set in etcd (the master's HAService grows and shrinks it); False when
        this broker is no longer master (fenced)."""
        if self._leadership is None or self.state is None or self.role != "master":
            return False
        changed = await self._leadership.alter_sync_state_set(new_set, self.state)
        if changed is None:
            return False
        self.state = changed
        return True

    def _journal_replicated(self, end: int) -> Awaitable[PutStatus]:
        """How long a journal record is waited for: the local flush, and the in-sync replicas when enough are
        in sync now (SYNC_MASTER); without them it does not wait for the slave timeout: the entries that depend
        on the record wait for (or fail on) the same replicas, and their acks cover the record too."""
        assert self._adapter is not None and self._store is not None
        transfer = self._transfer
        if transfer is None or transfer.replicas_available():
            return self._adapter.wait_flushed(end)
        return self._store.wait_flushed(end)

    def _master_role(self) -> BrokerRole:
        """How this broker serves as master: its configured master role; for a SLAVE the configured
        ``promoted_role``, else the role of the master it followed last, else SYNC_MASTER."""
        if self.config.broker_role is not BrokerRole.SLAVE:
            return self.config.broker_role
        return self._promoted_role or self._learned_role or BrokerRole.SYNC_MASTER

    def _epoch_source(self) -> int | None:
        """The epoch the HA service serves under: this broker's while master, None (NOT_MASTER) otherwise."""
        return self.epoch if self.role == "master" else None

    # ------------------------------------------------------------------ the role machine
    def _on_change(self, state: GroupState | None, leader: LeaderInfo | None) -> None:
        self._changes.put_nowait((state, leader))

    def _on_leadership_lost(self, epoch: int, reason: str) -> None:
        """The lease is gone while master: refuse puts NOW (another broker may be elected any moment)."""
        if self.role == "master" and self._store is not None:
            self._store.set_replica_mode(True)
            if self._transfer is not None:
                self._transfer.close()
            log.error(
                "broker group %s: leadership lost (%s); writes fenced, stepping down", self.group, reason
            )
        self._changes.put_nowait((self.state, None))

    async def _run(self, state: GroupState | None, leader: LeaderInfo | None) -> None:
        """Owned task: react to each (state, leader) seen; campaign when the group has no leader. Never
        raises but CancelledError: a failed step is logged and retried from a fresh read."""
        assert self._leadership is not None
        leadership = self._leadership
        while True:
            try:
                await self._react(state, leader)
                wait_s = (
                    self._campaign_delay(state) if leader is None or self._stale_own_key(leader) else None
                )
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the node alive: the next change or the retry fixes it
                log.exception("broker group %s: role change failed; retrying", self.group)
                wait_s = 1.0
            try:
                async with asyncio.timeout(wait_s):
                    state, leader = await self._changes.get()
                while not self._changes.empty():
                    state, leader = self._changes.get_nowait()
            except TimeoutError:
                try:
                    state, leader = await leadership.read()
                except MetadataStoreError as exc:
                    log.warning("broker group %s: cannot read the group's state: %s", self.group, exc)

    def _stale_own_key(self, leader: LeaderInfo) -> bool:
        """A leader key with this broker's id that this process does not hold: its previous life's, until
        that session's lease expires (a restarted master)."""
        assert self._leadership is not None
        return leader.broker_id == self.broker_id and not self._leadership.is_master

    def _campaign_delay(self, state: GroupState | None) -> float:
        """Seconds before this broker looks at a vacancy again: until its turn among the candidates (rank r
        campaigns r x ELECTION_BACKOFF_S after the vacancy was seen, see
        :func:`~quasar.replication.election.campaign_rank`), else a periodic re-read."""
        bootstrap = state is None and self.config.broker_role is not BrokerRole.SLAVE
        rank = campaign_rank(state, self.broker_id, bootstrap=bootstrap, unclean=self._unclean)
        if rank is None or self._vacancy_since is None:
            return ELECTION_BACKOFF_S
        turn = self._vacancy_since + rank * ELECTION_BACKOFF_S - asyncio.get_running_loop().time()
        return max(0.05, min(turn, ELECTION_BACKOFF_S)) if turn > 0 else ELECTION_BACKOFF_S / 2

    async def _react(self, state: GroupState | None, leader: LeaderInfo | None) -> None:
        assert self._leadership is not None
        self.state, self.leader = state, leader
        if leader is not None and leader.broker_id == self.broker_id and self._leadership.is_master:
            if self.role != "master":
                await self._promote(state)
            return
        if leader is not None and self._stale_own_key(leader):
            if self.role == "starting":
                await self._become_slave(leader.epoch)
            return  # wait for the old lease to expire, then campaign like any member
        if leader is not None:
            self._vacancy_since = None
            await self._follow(leader)
            return
        # no leader: step down first if this broker still thinks it is master, then campaign when eligible
        if self.role == "master":
            await self._step_down(state.epoch if state is not None else self.epoch)
        elif self.role == "starting":
            await self._become_slave(self.epoch)
        now = asyncio.get_running_loop().time()
        if self._vacancy_since is None:
            self._vacancy_since = now
        bootstrap = state is None and self.config.broker_role is not BrokerRole.SLAVE
        rank = campaign_rank(state, self.broker_id, bootstrap=bootstrap, unclean=self._unclean)
        if rank is None and state is not None and not self._slave_reads and self.role == "slave":
            # no master and this slave cannot be elected: serve reads from its copy (RocketMQ slave read)
            self._slave_reads = True
            await self._broker.serve_slave_reads(self.epoch)  # type: ignore[union-attr]
        if rank is None or self._leadership.hold_off_remaining_s() > 0:
            return
        if now < self._vacancy_since + rank * ELECTION_BACKOFF_S:
            return  # a better-placed candidate goes first (the wait is _campaign_delay)
        self._leadership.role = self._master_role().value
        won = await self._leadership.try_acquire(bootstrap=bootstrap, unclean=self._unclean)
        if won is not None:
            self._vacancy_since = None
            await self._promote(won)

    async def _promote(self, state: GroupState | None) -> None:
        assert self._store is not None and self._broker is not None and self._journaled is not None
        assert self._applier is not None and self._adapter is not None and self._local is not None
        await self._end_slave_reads(state.epoch if state is not None else self.epoch)
        epoch = state.epoch if state is not None else self._leadership.master_epoch or 0  # type: ignore[union-attr]
        self.state = state
        if self._ha_client is not None:
            await self._ha_client.stop()
            self._ha_client = None
        await self._applier.stop()
        await self._applier.drain()
        store = self._store
        epochs = store.epoch_file
        last = epochs.last
        if last is None or last.epoch < epoch:
            epochs.append(epoch, store.max_commit_log_offset)
        self.epoch = epoch
        role = self._master_role()
        assert self._ha_service is not None
        self._ha_service.become_master(state.sync_state_set if state is not None else frozenset())
        if self._transfer is not None:
            self._transfer.close()
        self._transfer = (
            GroupTransfer(self._ha_service, self.config) if role is BrokerRole.SYNC_MASTER else None
        )
        self._adapter.group_transfer = self._transfer
        store.set_replica_mode(False)
        self._journaled.enabled = True
        with contextlib.suppress(MetadataStoreError):
            await self._local.delete(APPLIED_OFFSET_PATH)
        self.role = "master"
        log.info(
            "broker group %s: broker %d is master (%s) at epoch %d, commit log offset %d",
            self.group,
            self.broker_id,
            role.value,
            epoch,
            store.max_commit_log_offset,
        )
        await self._broker.serve_as_master(epoch)
        self._ha_service.wakeup()
        self._notify()
        try:
            await self._journaled.snapshot()
        except MetadataStoreError as exc:
            log.warning("state snapshot after the promotion failed: %s", exc)
        if self._snapshotter is None:
            self._snapshotter = asyncio.get_running_loop().create_task(
                self._snapshot_loop(), name="state-snapshots"
            )

    async def _step_down(self, epoch: int) -> None:
        assert self._store is not None and self._journaled is not None and self._broker is not None
        self._store.set_replica_mode(True)
        self._journaled.enabled = False
        if self._transfer is not None:  # receipts still waiting get SERVICE_NOT_AVAILABLE now
            self._transfer.close()
            self._transfer = None
        if self._adapter is not None:
            self._adapter.group_transfer = None
        if self._snapshotter is not None:
            self._snapshotter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._snapshotter
            self._snapshotter = None
        log.warning(
            "broker group %s: broker %d steps down to slave (epoch %d)", self.group, self.broker_id, epoch
        )
        await self._become_slave(epoch)

    async def _become_slave(self, epoch: int) -> None:
        assert self._broker is not None and self._applier is not None and self._local is not None
        was_master = self.role == "master"
        self.role = "slave"
        self.epoch = max(self.epoch, epoch)
        await self._broker.serve_as_slave(self.epoch)
        if was_master or await self._local.get(APPLIED_OFFSET_PATH) is None:
            # this broker's own (possibly truncated) state must not survive: rebuild it from the journal
            self._applier.reset()
        self._applier.start()
        self._notify()

    async def _end_slave_reads(self, epoch: int) -> None:
        """Leave slave-read mode: its topics close and its managed ledgers are dropped (a master is back)."""
        if self._slave_reads:
            self._slave_reads = False
            assert self._broker is not None
            await self._broker.serve_as_slave(epoch)
            log.info("broker group %s: broker %d stops serving slave reads", self.group, self.broker_id)

    async def _follow(self, leader: LeaderInfo) -> None:
        await self._end_slave_reads(leader.epoch)
        if self.role == "master":
            await self._step_down(leader.epoch)
        elif self.role == "starting":
            await self._become_slave(leader.epoch)
        self.epoch = max(self.epoch, leader.epoch)
        if leader.role in (BrokerRole.SYNC_MASTER.value, BrokerRole.ASYNC_MASTER.value):
            self._learned_role = BrokerRole(leader.role)
        host, _, port = leader.address.rpartition(":")
        target = (host, int(port))
        if self._ha_client is not None and self._ha_client_target == target:
            return
        if self._ha_client is not None:
            await self._ha_client.stop()
        assert self._store is not None
        self._ha_client_target = target
        self._ha_client = HAClient(
            self._store,
            group=self.group,
            broker_id=self.broker_id,
            master_address=lambda: self._ha_client_target,
            config=self.config,
            on_appended=self._applier.wakeup if self._applier is not None else None,
        )
        self._ha_client.start()
        log.info(
            "broker group %s: broker %d follows master %d at %s (epoch %d)",
            self.group,
            self.broker_id,
            leader.broker_id,
            leader.address,
            leader.epoch,
        )
        self._notify()

    def _notify(self) -> None:
        for callback in self.on_role_changed:
            try:
                callback(self.role, self.epoch)
            except Exception:
                log.exception("role-change callback failed")

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self._snapshot_interval_s)
            if self._journaled is None or self.role != "master":
                continue
            try:
                await self._journaled.snapshot()
            except MetadataStoreError as exc:
                log.warning("periodic state snapshot failed: %s", exc)
